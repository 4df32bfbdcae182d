package api

import (
	"context"
	"net/http"

	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/manager"
)

// Fleet routes session requests between the replicas of a PostgreSQL
// fleet (DESIGN.md §12): a session is served by the replica that owns it,
// and a request that reaches another one is forwarded there. Package
// fleet's Router implements it; nil (SQLite, one process) serves every
// session here.
type Fleet interface {
	// Forwarded verifies that r was forwarded by another replica of the
	// fleet and returns the request id that replica gave it.
	Forwarded(r *http.Request) (requestID string, ok bool)
	// Route serves r on the owner of the session key when that is
	// another replica and reports true; false means this replica serves
	// it. A non-nil error is the answer (nothing was written). A
	// forwarded request is never forwarded again.
	Route(w http.ResponseWriter, r *http.Request, key, requestID string, forwarded bool) (bool, error)
}

func forwarded(ctx context.Context) bool {
	v, _ := ctx.Value(keyForwarded).(bool)
	return v
}

// handleSession registers a route on /v1/sessions/{id}: authenticated
// like handle, then served by the replica that owns the session.
func (s *Server) handleSession(pattern string, roles []Role, h handlerFunc) {
	s.handle(pattern, roles, s.routed(h))
}

// routed runs h here when this replica serves the session, after the
// caller is authenticated (the session's key depends on its tenant).
// The owner authenticates the forwarded request again from the client's
// own credential, which the forward keeps: no identity is taken on a
// replica's word.
func (s *Server) routed(h handlerFunc) handlerFunc {
	if s.deps.Fleet == nil {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) error {
		ref, err := s.deps.Manager.ResolveSession(principal(r), r.PathValue("id"))
		if err != nil {
			return h(w, r) // the handler answers the same error, with nothing forwarded
		}
		ctx := r.Context()
		handled, err := s.deps.Fleet.Route(w, r, ref.Key, requestID(ctx), forwarded(ctx))
		if err != nil {
			return err
		}
		if handled {
			return nil
		}
		return h(w, r.WithContext(manager.WithServedHere(ctx, ref.Key)))
	}
}

// peerApproval serves another replica of the fleet (only: a request
// without a verified hop is 404, as if the route did not exist) a pending
// approval held here, with its code, so that its approvers see it. The
// asking replica checks the code against the hash in the database.
func (s *Server) peerApproval(w http.ResponseWriter, r *http.Request) error {
	if s.deps.Fleet == nil || s.deps.Approvals == nil || !forwarded(r.Context()) {
		return errNotFound
	}
	v, ok := s.deps.Approvals.PeerView(r.PathValue("id"))
	if !ok {
		return errcode.New(errcode.NotFound, "no such pending approval here")
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}
