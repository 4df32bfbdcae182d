package daytona

import (
	"net/http"

	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/workspace"
)

// Fleet routes session requests between the replicas of a PostgreSQL
// fleet (DESIGN.md §12); package fleet's Router implements it, as for the
// REST, DeerFlow and E2B routes. A Daytona sandbox keeps nothing outside
// its session (its labels, timeouts and autostop are the session's
// record, in the store), so any replica answers get and list; a call
// that works in the sandbox (the toolbox) or ends it (delete) is served
// by the replica serving its session, where its processes and kernel
// are, and is forwarded there.
type Fleet interface {
	// Forwarded verifies that r was forwarded by another replica of the
	// fleet and returns the request id that replica gave it.
	Forwarded(r *http.Request) (requestID string, ok bool)
	// Route serves r on the replica serving the session key when that is
	// another one and reports true; false means this replica serves it.
	// A non-nil error is the answer (nothing was written). A forwarded
	// request is never forwarded again.
	Route(w http.ResponseWriter, r *http.Request, key, requestID string, forwarded bool) (bool, error)
}

// route serves r on the replica serving info's session when that is
// another one: handled is true when that replica answered. Otherwise r
// comes back with the manager told the session is served here.
func (s *Server) route(w http.ResponseWriter, r *http.Request, info manager.SessionInfo) (handled bool, _ *http.Request, _ error) {
	if s.deps.Fleet == nil {
		return false, r, nil
	}
	_, fwd := s.deps.Fleet.Forwarded(r)
	key := workspace.Key(info.Tenant, info.ID)
	handled, err := s.deps.Fleet.Route(w, r, key, manager.RequestIDFrom(r.Context()), fwd)
	if err != nil || handled {
		return handled, r, err
	}
	return false, r.WithContext(manager.WithServedHere(r.Context(), key)), nil
}
