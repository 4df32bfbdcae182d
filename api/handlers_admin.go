package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/policy"
)

var (
	errPolicyRejected = errcode.New(errcode.InvalidRequest, "the policy was rejected; the last good revision stays in force")
	errBundleReload   = errcode.New(errcode.Conflict, "the policy comes from bundles; OPA's bundle plugin polls for new revisions")
)

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request) error {
	limit, err := intParam(r, "limit", 100)
	if err != nil {
		return err
	}
	labels, err := labelQuery(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	page, err := s.deps.Manager.ListSessions(r.Context(), principal(r),
		manager.SessionQuery{Tenant: q.Get("tenant"), Cursor: q.Get("cursor"), Limit: limit, Labels: labels})
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

// policyView is GET /v1/policy: the policy in force, the mode, and the
// executors as the policy sees them (availability, reason, capabilities).
type policyView struct {
	policy.Status
	Mode      string                            `json:"mode"`
	Executors map[string]manager.ExecutorStatus `json:"executors"`
}

func (s *Server) policyView(ctx context.Context, st policy.Status) policyView {
	return policyView{Status: st, Mode: s.deps.Manager.Mode(), Executors: s.deps.Manager.ExecutorStatus(ctx)}
}

func (s *Server) getPolicy(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, s.policyView(r.Context(), s.deps.Policy.Status()))
	return nil
}

// reloadPolicy answers 200 with the new status, or 400 with the compile
// error as a reason: the caller is the administrator who wrote the policy,
// and the same text is shown by GET /v1/policy. A policy from bundles is
// not reloaded on demand (OPA's bundle plugin polls): 409.
func (s *Server) reloadPolicy(w http.ResponseWriter, r *http.Request) error {
	st, err := s.deps.Policy.Reload(r.Context())
	if errors.Is(err, policy.ErrBundleReload) {
		return errBundleReload
	}
	if err != nil {
		body := errorBody{Error: errorDetail{Code: errcode.InvalidRequest, Message: errPolicyRejected.Message,
			Reasons:   []policy.Reason{{Code: "policy.invalid", Message: st.LastError}},
			RequestID: requestID(r.Context())}}
		writeJSON(w, http.StatusBadRequest, body)
		return nil
	}
	writeJSON(w, http.StatusOK, s.policyView(r.Context(), st))
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
	writeJSON(w, http.StatusOK, healthResponse{Status: "ok"})
	return nil
}

// readyz is ready when the policy is loaded (a bundle source: once a
// bundle has activated), every wired executor is available and the
// database answers. It shows the revision in force, so a fleet's rollout
// can be followed replica by replica. Each executor shows what the policy decides on: its status,
// the executor's own short reason when it is unavailable (never a wrapped
// internal error: this endpoint is unauthenticated) and its capabilities,
// so a gateway that cannot enforce an obligation says so here instead of
// looking healthy while its runs are refused.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	defer cancel()
	pst := s.deps.Policy.Status()
	ready := pst.Revision != ""
	execs := map[string]readyExecutor{}
	for kind, st := range s.deps.Manager.ExecutorStatus(ctx) {
		execs[kind] = readyExecutor{Status: "ok", ExecutorStatus: st}
		if !st.Available {
			execs[kind] = readyExecutor{Status: "unavailable", ExecutorStatus: st}
			ready = false
			s.log.WarnContext(ctx, "executor not ready", "executor", kind, "reason", st.Reason)
		}
	}
	body := readyResponse{Executors: execs, Policy: readyPolicyOf(pst)}
	if s.deps.Database != nil {
		// Audit records and approvals live there: without it every
		// request would fail closed, so the gateway is not ready.
		body.Database = "ok"
		if err := s.deps.Database.Ping(ctx); err != nil {
			body.Database = "unavailable"
			ready = false
			s.log.WarnContext(ctx, "database not ready", "err", err)
		}
	}
	body.Ready = ready
	status := http.StatusOK
	if !ready {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, body)
	return nil
}

// readyExecutor is one executor in /readyz: "ok" or "unavailable", then
// the status the policy sees.
// healthResponse is GET /healthz.
type healthResponse struct {
	Status string `json:"status"`
}

// readyResponse is GET /readyz; Database is absent when none is wired.
type readyResponse struct {
	Ready     bool                     `json:"ready"`
	Policy    readyPolicy              `json:"policy"`
	Executors map[string]readyExecutor `json:"executors"`
	Database  string                   `json:"database,omitempty"`
}

type readyExecutor struct {
	Status string `json:"status"`
	manager.ExecutorStatus
}
