package api

import (
	"net/http"
)

// DeerFlowServer is the AIO/DeerFlow front end (package deerflow), wired
// in main: DeerFlow's provisioner under /deerflow/api/sandboxes and the
// AIO sandbox API at each sandbox's URL. api mounts its routes and
// authenticates the provisioner's, as it does /mcp's: an agent token in
// DeerFlow's X-API-Key header (its provisioner_api_key) or as a bearer
// token, handed on with manager.WithPrincipal. A sandbox route is
// authorised by the capability in its URL alone, which the front end
// checks; api reads no credential there.
type DeerFlowServer interface {
	// Routes calls mount for each route: its pattern, its handler, and
	// whether it is a provisioner route.
	Routes(mount func(pattern string, h http.Handler, provisioner bool))
	// WriteProvisionerError answers a provisioner request api refused
	// (401, 403) in the provisioner's error shape.
	WriteProvisionerError(w http.ResponseWriter, r *http.Request, err error)
	// Schemas are the Go values of the wire shapes the document's
	// DeerFlow and AIO operations name (openapi_ops.go), by name.
	Schemas() map[string]any
}

func (s *Server) deerflowRoutes() {
	if s.deps.DeerFlow == nil {
		return
	}
	s.deps.DeerFlow.Routes(func(pattern string, h http.Handler, provisioner bool) {
		if provisioner {
			h = s.agentKeyAuth(h, s.deps.DeerFlow.WriteProvisionerError)
		}
		s.mount(pattern, h)
	})
}
