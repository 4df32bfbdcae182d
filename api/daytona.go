package api

import (
	"net/http"
)

// DaytonaServer is the Daytona front end (package daytona), wired in main:
// the subset of Daytona's API and of its sandbox toolbox that the
// unmodified Daytona SDK's quickstart uses, under /daytona. The SDK sends
// its API key as a bearer token on every call, the toolbox's included, so
// api authenticates every route of it with agentKeyAuth (an agent token,
// handed on with manager.WithPrincipal) and the front end answers the
// refusals in Daytona's error shape. There is no other credential.
type DaytonaServer interface {
	// Routes calls mount for each route: its pattern and its handler.
	Routes(mount func(pattern string, h http.Handler))
	// WriteError answers a request api refused (401, 403) in Daytona's
	// error shape.
	WriteError(w http.ResponseWriter, r *http.Request, err error)
	// BodyLimit is the body cap of an upload route, 0 for the others.
	BodyLimit(r *http.Request) int64
}

func (s *Server) daytonaRoutes() {
	if s.deps.Daytona == nil {
		return
	}
	s.deps.Daytona.Routes(func(pattern string, h http.Handler) {
		s.mount(pattern, s.agentKeyAuth(h, s.deps.Daytona.WriteError))
	})
}
