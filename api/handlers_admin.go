package api

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/policy"
)

var errPolicyRejected = errcode.New(errcode.InvalidRequest, "the policy was rejected; the last good revision stays in force")

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request) error {
	limit, err := intParam(r, "limit", 100)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	page, err := s.deps.Manager.ListSessions(r.Context(), principal(r),
		manager.SessionQuery{Tenant: q.Get("tenant"), Cursor: q.Get("cursor"), Limit: limit})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request) error {
	info, err := s.deps.Manager.Session(r.Context(), principal(r), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, info)
	return nil
}

func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request) error {
	purge := r.URL.Query().Get("purge") == "true"
	if err := s.deps.Manager.DeleteSession(r.Context(), principal(r), r.PathValue("id"), purge); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

type policyView struct {
	policy.Status
	Mode string `json:"mode"`
}

func (s *Server) getPolicy(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, policyView{Status: s.deps.Policy.Status(), Mode: s.deps.Manager.Mode()})
	return nil
}

// reloadPolicy answers 200 with the new status, or 400 with the compile
// error as a reason: the caller is the administrator who wrote the policy,
// and the same text is shown by GET /v1/policy.
func (s *Server) reloadPolicy(w http.ResponseWriter, r *http.Request) error {
	st, err := s.deps.Policy.Reload(r.Context())
	if err != nil {
		body := errorBody{Error: errorDetail{Code: errcode.InvalidRequest, Message: errPolicyRejected.Message,
			Reasons:   []policy.Reason{{Code: "policy.invalid", Message: st.LastError}},
			RequestID: requestID(r.Context())}}
		writeJSON(w, http.StatusBadRequest, body)
		return nil
	}
	writeJSON(w, http.StatusOK, policyView{Status: st, Mode: s.deps.Manager.Mode()})
	return nil
}

// listAudit is GET /v1/audit?tenant=&session_id=&kind=&limit=&cursor=,
// newest first. A session's records are those of tenant and session_id
// together: the same name under two tenants is two sessions.
func (s *Server) listAudit(w http.ResponseWriter, r *http.Request) error {
	limit, err := intParam(r, "limit", 100)
	if err != nil {
		return err
	}
	cursor, err := intParam(r, "cursor", 0)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	page, err := s.deps.Audit.Query(r.Context(), audit.Query{
		Tenant: q.Get("tenant"), SessionID: q.Get("session_id"), Kind: q.Get("kind"),
		Limit: limit, Before: int64(cursor),
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}

func intParam(r *http.Request, name string, def int) (int, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, &fieldErr{field: fieldErrorOf(name, "must be a non-negative integer")}
	}
	return n, nil
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) error {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

// readyz is ready when the policy is loaded and every wired executor
// answers its probe. Failure reasons go to the log, not to this
// unauthenticated endpoint.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	defer cancel()
	ready := s.deps.Policy.Status().Revision != ""
	execs := map[string]string{}
	for kind, err := range s.deps.Manager.Probe(ctx) {
		execs[kind] = "ok"
		if err != nil {
			execs[kind], ready = "unavailable", false
			s.log.WarnContext(ctx, "executor not ready", "executor", kind, "err", err)
		}
	}
	status := http.StatusOK
	if !ready {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, map[string]any{"ready": ready, "executors": execs})
	return nil
}
