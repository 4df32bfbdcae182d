package deerflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/manager"
)

// Wire shapes of DeerFlow's provisioner (docker/provisioner/app.py and its
// README): FastAPI models, so unknown request fields are ignored and errors
// carry "detail". sandgate's own error object rides along under "error",
// with its stable code.
type (
	createBody struct {
		SandboxID string  `json:"sandbox_id"`
		ThreadID  *string `json:"thread_id"`
		UserID    *string `json:"user_id"`
		// ExtraMounts are host paths DeerFlow asks to mount: sandgate
		// mounts none (the workspace is the sandbox's only storage), so a
		// non-empty list is refused rather than silently dropped.
		ExtraMounts []json.RawMessage `json:"extra_mounts"`
		// RequiredMountContractVersion is newer DeerFlow's negotiation:
		// sandgate speaks contract 0 (no mounts), and answers any other
		// with DeerFlow's own 409 mount_contract_changed.
		RequiredMountContractVersion *int `json:"required_mount_contract_version"`
	}
	sandboxView struct {
		SandboxID  string `json:"sandbox_id"`
		SandboxURL string `json:"sandbox_url"`
		// Status is a Pod phase in DeerFlow's provisioner; a sandgate
		// sandbox is "Running" as soon as it exists.
		Status   string `json:"status"`
		ThreadID string `json:"thread_id"`
		UserID   string `json:"user_id"`
		// SessionID is the sandgate session the sandbox runs in, for the
		// sessions, audit and approvals APIs.
		SessionID string `json:"session_id"`
	}
	listResponse struct {
		Sandboxes []sandboxView `json:"sandboxes"`
		Count     int           `json:"count"`
	}
	deleteResponse struct {
		OK        bool   `json:"ok"`
		SandboxID string `json:"sandbox_id"`
	}
	provisionerError struct {
		Detail any         `json:"detail"`
		Error  errorDetail `json:"error"`
	}
	contractConflict struct {
		Code     string `json:"code"`
		Expected int    `json:"expected"`
		Actual   int    `json:"actual"`
	}
)

// Provisioner errors.
var (
	errSandboxNotFound = errcode.New(errcode.NotFound, "no such sandbox")
	errExtraMounts     = invalidField("extra_mounts", "unsupported",
		"sandgate mounts no host paths; the session workspace is the sandbox's storage")
	errMountContract = errcode.New(errcode.Conflict, "sandgate speaks mount contract 0 (no mounts)")
)

// statusRunning is the status of every live sandbox.
const statusRunning = "Running"

// KindSandboxCreate is the audit kind of a sandbox's creation: who minted
// a capability for which session (the capability itself is not recorded).
const KindSandboxCreate = "deerflow.sandbox.create"

// roleAgent is the role AIO calls run as: the agent that made the sandbox.
const roleAgent = "agent"

// DeerFlow's id formats (its provisioner's pydantic patterns). User ids are
// also bounded here, so that the session name fits its 128 bytes.
var (
	threadIDFormat  = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	sandboxIDFormat = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	userIDFormat    = regexp.MustCompile(`^[A-Za-z0-9_-]{1,60}$`)
)

// sessionOf is the session of a (user, thread).
func sessionOf(userID, threadID string) string { return "df." + userID + "." + threadID }

// provisionerHandler serves a provisioner call for the caller api
// authenticated.
type provisionerHandler func(w http.ResponseWriter, r *http.Request, p manager.Principal) error

// provisioner takes the caller api authenticated (an agent) and renders
// errors the FastAPI way.
func (s *Server) provisioner(h provisionerHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := manager.PrincipalFrom(r.Context())
		var err error = errUnauthorized // mounted without authentication: refused
		if ok {
			err = h(w, r.WithContext(manager.WithFrontEnd(r.Context(), frontEnd)), p)
		}
		if err != nil {
			s.WriteProvisionerError(w, r, err)
		}
	})
}

// WriteProvisionerError answers a provisioner call that failed as DeerFlow
// reads it: FastAPI's "detail", with sandgate's error object under
// "error". api calls it for the calls it refuses (401, 403).
func (s *Server) WriteProvisionerError(w http.ResponseWriter, r *http.Request, err error) {
	status, d := s.errorOf(w, r, err)
	var detail any = d.Message
	var cc *contractErr
	if errors.As(err, &cc) {
		detail = contractConflict{Code: "mount_contract_changed", Expected: cc.expected, Actual: 0}
	}
	writeJSON(w, status, provisionerError{Detail: detail, Error: d})
}

// contractErr is a mount contract other than sandgate's.
type contractErr struct{ expected int }

func (e *contractErr) Error() string { return errMountContract.Error() }
func (e *contractErr) Unwrap() error { return errMountContract }

// createSandbox makes the caller's sandbox on the session of its (user,
// thread), or returns the one made before. Any replica answers it: the
// sandbox is a row in the store, admitted against the tenant's quotas,
// and its session's state starts on the replica that serves the first
// sandbox call.
func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request, p manager.Principal) error {
	var body createBody
	if err := decodeLenient(r, &body); err != nil {
		return err
	}
	thread, user, err := body.identity()
	if err != nil {
		return err
	}
	session := sessionOf(user, thread)
	ref, release, err := s.deps.Manager.AdmitSession(r.Context(), p, session, KindSandboxCreate)
	if err != nil {
		return err
	}
	release()
	sb, created, err := s.deps.Registry.create(r.Context(), sandbox{tenant: p.Tenant, id: body.SandboxID,
		threadID: thread, userID: user, session: session, sessionKey: ref.Key, ownerRole: p.Role, ownerName: p.Name})
	if err != nil {
		return err
	}
	if created {
		if err := s.auditSandbox(r, sb); err != nil {
			// A capability nobody can trace to its creator must not exist.
			return errors.Join(err, s.deps.Registry.remove(r.Context(), sb.tenant, sb.id))
		}
		s.log.InfoContext(r.Context(), "deerflow sandbox created", "request_id", manager.RequestIDFrom(r.Context()),
			"tenant", sb.tenant, "sandbox_id", sb.id, "session_id", session)
	}
	writeJSON(w, http.StatusOK, s.view(r, sb))
	return nil
}

func (s *Server) auditSandbox(r *http.Request, sb *sandbox) error {
	if s.deps.Audit == nil {
		return nil
	}
	rec := &audit.Record{
		RequestID: manager.RequestIDFrom(r.Context()), Kind: KindSandboxCreate, Tenant: sb.tenant, SessionID: sb.session,
		Principal: sb.ownerRole + ":" + sb.ownerName, Outcome: manager.OutcomeOK, HTTPStatus: http.StatusOK,
		Detail: map[string]string{"sandbox_id": sb.id, "thread_id": sb.threadID, "user_id": sb.userID},
	}
	if err := s.deps.Audit.Append(r.Context(), rec); err != nil {
		return fmt.Errorf("audit sandbox creation: %w", err)
	}
	return nil
}

// identity validates the create request's ids and applies DeerFlow's
// defaults: thread_id is the sandbox id, user_id "default".
func (b createBody) identity() (thread, user string, err error) {
	thread, user = b.SandboxID, "default"
	if b.ThreadID != nil && *b.ThreadID != "" {
		thread = *b.ThreadID
	}
	if b.UserID != nil && *b.UserID != "" {
		user = *b.UserID
	}
	switch {
	case !sandboxIDFormat.MatchString(b.SandboxID):
		return "", "", invalidField("sandbox_id", "invalid", "must match ^[A-Za-z0-9_-]{1,64}$")
	case !threadIDFormat.MatchString(thread):
		return "", "", invalidField("thread_id", "invalid", "must match ^[A-Za-z0-9_-]{1,64}$")
	case !userIDFormat.MatchString(user):
		return "", "", invalidField("user_id", "invalid", "must match ^[A-Za-z0-9_-]{1,60}$")
	case len(b.ExtraMounts) > 0:
		return "", "", errExtraMounts
	case b.RequiredMountContractVersion != nil && *b.RequiredMountContractVersion != 0:
		return "", "", &contractErr{expected: *b.RequiredMountContractVersion}
	}
	return thread, user, nil
}

// getSandbox and listSandboxes answer from the store, on any replica.
func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request, p manager.Principal) error {
	sb, ok, err := s.deps.Registry.get(r.Context(), p.Tenant, r.PathValue("sandbox_id"))
	if err != nil {
		return err
	}
	if !ok {
		return errSandboxNotFound
	}
	writeJSON(w, http.StatusOK, s.view(r, sb))
	return nil
}

func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request, p manager.Principal) error {
	all, err := s.deps.Registry.list(r.Context(), p.Tenant)
	if err != nil {
		return err
	}
	out := listResponse{Sandboxes: []sandboxView{}}
	for _, sb := range all {
		out.Sandboxes = append(out.Sandboxes, s.view(r, sb))
	}
	out.Count = len(out.Sandboxes)
	writeJSON(w, http.StatusOK, out)
	return nil
}

// deleteSandbox kills the sandbox's capability and releases its session
// (pool instance, browser), keeping the workspace, as DeerFlow's
// provisioner keeps a thread's user-data when it deletes the Pod; with
// ?purge=true the workspace goes too. Deleting an unknown sandbox succeeds,
// as in DeerFlow's provisioner. The delete is done by the replica serving
// the session (forwarded there), whose release is what frees the session's
// state; the capability dies in the store, for every replica at once.
func (s *Server) deleteSandbox(w http.ResponseWriter, r *http.Request, p manager.Principal) error {
	purge := r.URL.Query().Get("purge") == "true"
	id := r.PathValue("sandbox_id")
	sb, ok, err := s.deps.Registry.get(r.Context(), p.Tenant, id)
	if err != nil {
		return err
	}
	if ok {
		if handled, err := s.route(w, r, sb.sessionKey); handled || err != nil {
			return err
		}
		if err := s.deps.Registry.remove(r.Context(), sb.tenant, sb.id); err != nil {
			return err
		}
		if err := s.deps.Manager.DeleteSession(r.Context(), p, sb.session, purge); err != nil {
			return err
		}
	}
	writeJSON(w, http.StatusOK, deleteResponse{OK: true, SandboxID: id})
	return nil
}

func (s *Server) view(r *http.Request, sb *sandbox) sandboxView {
	return sandboxView{
		SandboxID: sb.id, SandboxURL: s.sandboxURL(r, sb), Status: statusRunning,
		ThreadID: sb.threadID, UserID: sb.userID, SessionID: sb.session,
	}
}

// sandboxURL is where the sandbox's AIO API is: the configured public URL
// or, without one, the URL the caller reached the gateway by. A request
// another replica forwarded reached this one at the fleet's internal
// address; the forwarder, whose hop is verified, says in
// X-Forwarded-Host and X-Forwarded-Proto which one the client used.
func (s *Server) sandboxURL(r *http.Request, sb *sandbox) string {
	base := s.cfg.PublicURL
	if base == "" {
		scheme, host := "http", r.Host
		if r.TLS != nil {
			scheme = "https"
		}
		if s.forwarded(r) {
			if h := r.Header.Get("X-Forwarded-Host"); h != "" {
				host = h
			}
			if p := r.Header.Get("X-Forwarded-Proto"); p == "http" || p == "https" {
				scheme = p
			}
		}
		base = scheme + "://" + host
	}
	return base + prefix + "/sandboxes/" + sb.id + "/" + sb.cap
}
