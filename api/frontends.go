package api

import (
	"net/http"

	"github.com/sandgate/sandgate/manager"
)

// agentKeyAuth authenticates a front end's call made with an agent token,
// sent as the SDK sends its key (X-API-Key) or as a bearer token, and
// hands the caller to the front end in the request's context
// (manager.PrincipalFrom). A refusal (401, 403) is answered by writeErr,
// in the front end's own error shape: the DeerFlow provisioner's, E2B's
// control plane's, Daytona's (every /daytona route).
func (s *Server) agentKeyAuth(h http.Handler, writeErr func(w http.ResponseWriter, r *http.Request, err error)) http.Handler {
	auth := s.authorize([]Role{RoleAgent}, func(w http.ResponseWriter, r *http.Request) error {
		h.ServeHTTP(w, r.WithContext(manager.WithPrincipal(r.Context(), principal(r))))
		return nil
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if key := r.Header.Get("X-API-Key"); key != "" && r.Header.Get("Authorization") == "" {
			r.Header.Set("Authorization", "Bearer "+key)
		}
		if err := auth(w, r); err != nil {
			writeErr(w, r, err)
		}
	})
}
