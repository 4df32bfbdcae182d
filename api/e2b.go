package api

import (
	"net/http"
)

// E2BServer is the E2B front end (package e2b), wired in main: E2B's
// control plane, envd's services and the code interpreter's, under /e2b.
// api mounts its routes and authenticates the control plane's, as it does
// DeerFlow's provisioner: an agent token in E2B's X-API-Key header
// (E2B_API_KEY) or as a bearer token, handed on with
// manager.WithPrincipal. A sandbox route is authorised by the sandbox's
// own tokens, which the front end checks; api reads no credential there.
type E2BServer interface {
	// Routes calls mount for each route: its pattern, its handler, and
	// whether it is a control-plane route.
	Routes(mount func(pattern string, h http.Handler, controlPlane bool))
	// WriteControlPlaneError answers a control-plane request api refused
	// (401, 403) in E2B's error shape.
	WriteControlPlaneError(w http.ResponseWriter, r *http.Request, err error)
	// BodyLimit is the body cap of an upload route, 0 for the others.
	BodyLimit(r *http.Request) int64
}

func (s *Server) e2bRoutes() {
	if s.deps.E2B == nil {
		return
	}
	s.deps.E2B.Routes(func(pattern string, h http.Handler, controlPlane bool) {
		if controlPlane {
			h = s.agentKeyAuth(h, s.deps.E2B.WriteControlPlaneError)
		}
		s.mount(pattern, h)
	})
}
