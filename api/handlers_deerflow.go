package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/manager"
)

// Wire shapes of DeerFlow's provisioner (docker/provisioner/app.py and its
// README): FastAPI models, so unknown request fields are ignored and errors
// carry "detail". sandgate's own error object rides along under "error",
// with its stable code.
type (
	dfCreateBody struct {
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
	dfSandboxView struct {
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
	dfListResponse struct {
		Sandboxes []dfSandboxView `json:"sandboxes"`
		Count     int             `json:"count"`
	}
	dfDeleteResponse struct {
		OK        bool   `json:"ok"`
		SandboxID string `json:"sandbox_id"`
	}
	dfErrorBody struct {
		Detail any         `json:"detail"`
		Error  errorDetail `json:"error"`
	}
	dfContractConflict struct {
		Code     string `json:"code"`
		Expected int    `json:"expected"`
		Actual   int    `json:"actual"`
	}
)

// Provisioner errors.
var (
	errSandboxConflict = errcode.New(errcode.Conflict, "this sandbox_id exists for another thread or user")
	errSandboxNotFound = errcode.New(errcode.NotFound, "no such sandbox")
	errExtraMounts     = &fieldErr{field: manager.FieldError{Field: "extra_mounts", Code: "unsupported",
		Message: "sandgate mounts no host paths; the session workspace is the sandbox's storage"}}
	errMountContract = errcode.New(errcode.Conflict, "sandgate speaks mount contract 0 (no mounts)")
)

// dfStatusRunning is the status of every live sandbox.
const dfStatusRunning = "Running"

func (s *Server) deerflowRoutes() {
	if s.deps.DeerFlow == nil {
		return
	}
	p := deerflowPrefix + "/api/sandboxes"
	s.mount("POST "+p, s.wrapDF(s.createSandbox))
	s.mount("GET "+p, s.wrapDF(s.listSandboxes))
	s.mount("GET "+p+"/{sandbox_id}", s.wrapDF(s.getSandbox))
	s.mount("DELETE "+p+"/{sandbox_id}", s.wrapDF(s.deleteSandbox))
	s.aioRoutes()
}

// wrapDF authenticates a provisioner call (an agent token, in DeerFlow's
// X-API-Key header or as a bearer token) and renders its errors the
// FastAPI way.
func (s *Server) wrapDF(h handlerFunc) http.Handler {
	auth := s.authorize([]Role{RoleAgent}, h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if key := r.Header.Get("X-API-Key"); key != "" && r.Header.Get("Authorization") == "" {
			r.Header.Set("Authorization", "Bearer "+key)
		}
		if err := auth(w, r); err != nil {
			s.writeDFError(w, r, err)
		}
	})
}

func (s *Server) writeDFError(w http.ResponseWriter, r *http.Request, err error) {
	status, body := s.errorResponse(r, err)
	var detail any = body.Error.Message
	var cc *dfConflictErr
	if errors.As(err, &cc) {
		detail = dfContractConflict{Code: "mount_contract_changed", Expected: cc.expected, Actual: 0}
	}
	writeJSON(w, status, dfErrorBody{Detail: detail, Error: body.Error})
}

// dfConflictErr is a mount contract other than sandgate's.
type dfConflictErr struct{ expected int }

func (e *dfConflictErr) Error() string { return errMountContract.Error() }
func (e *dfConflictErr) Unwrap() error { return errMountContract }

// decodeLenient reads one JSON object, ignoring unknown fields, as the
// FastAPI servers DeerFlow talks to do.
func decodeLenient(r *http.Request, v any) error {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return errTooLarge
		}
		return errBadJSON
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return &fieldErr{field: manager.FieldError{Field: "body", Code: "required", Message: "a JSON body is required"}}
	}
	if err := json.Unmarshal(body, v); err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) {
			return &fieldErr{field: manager.FieldError{Field: ute.Field, Code: "type", Message: "must be a JSON " + ute.Type.String()}}
		}
		return errBadJSON
	}
	return nil
}

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request) error {
	var body dfCreateBody
	if err := decodeLenient(r, &body); err != nil {
		return err
	}
	thread, user, err := body.identity()
	if err != nil {
		return err
	}
	id := identity(r)
	p := principal(r)
	session := dfSession(user, thread)
	ref, release, err := s.deps.Manager.AdmitSession(r.Context(), p, session, kindSandboxCreate)
	if err != nil {
		return err
	}
	release()
	sb, created, err := s.deps.DeerFlow.create(id, body.SandboxID, thread, user, session, ref.Key)
	if err != nil {
		return err
	}
	if created {
		if err := s.auditSandbox(r, sb); err != nil {
			// A capability nobody can trace to its creator must not exist.
			s.deps.DeerFlow.remove(sb)
			return err
		}
		s.log.InfoContext(r.Context(), "deerflow sandbox created", "request_id", requestID(r.Context()),
			"tenant", id.Tenant, "sandbox_id", sb.key.id, "session_id", session)
	}
	writeJSON(w, http.StatusOK, s.sandboxView(r, sb))
	return nil
}

// kindSandboxCreate is the audit kind of a sandbox's creation: who minted
// a capability for which session (the capability itself is not recorded).
const kindSandboxCreate = "deerflow.sandbox.create"

func (s *Server) auditSandbox(r *http.Request, sb *dfSandbox) error {
	if s.deps.Audit == nil {
		return nil
	}
	rec := &audit.Record{
		RequestID: requestID(r.Context()), Kind: kindSandboxCreate, Tenant: sb.owner.Tenant, SessionID: sb.session,
		Principal: string(sb.owner.Role) + ":" + sb.owner.Name, Outcome: manager.OutcomeOK, HTTPStatus: http.StatusOK,
		Detail: map[string]string{"sandbox_id": sb.key.id, "thread_id": sb.threadID, "user_id": sb.userID},
	}
	if err := s.deps.Audit.Append(r.Context(), rec); err != nil {
		return fmt.Errorf("audit sandbox creation: %w", err)
	}
	return nil
}

// identity validates the create request's ids and applies DeerFlow's
// defaults: thread_id is the sandbox id, user_id "default".
func (b dfCreateBody) identity() (thread, user string, err error) {
	thread, user = b.SandboxID, "default"
	if b.ThreadID != nil && *b.ThreadID != "" {
		thread = *b.ThreadID
	}
	if b.UserID != nil && *b.UserID != "" {
		user = *b.UserID
	}
	switch {
	case !dfSandboxID.MatchString(b.SandboxID):
		return "", "", &fieldErr{field: fieldErrorOf("sandbox_id", "must match ^[A-Za-z0-9_-]{1,64}$")}
	case !dfThreadID.MatchString(thread):
		return "", "", &fieldErr{field: fieldErrorOf("thread_id", "must match ^[A-Za-z0-9_-]{1,64}$")}
	case !dfUserID.MatchString(user):
		return "", "", &fieldErr{field: fieldErrorOf("user_id", "must match ^[A-Za-z0-9_-]{1,60}$")}
	case len(b.ExtraMounts) > 0:
		return "", "", errExtraMounts
	case b.RequiredMountContractVersion != nil && *b.RequiredMountContractVersion != 0:
		return "", "", &dfConflictErr{expected: *b.RequiredMountContractVersion}
	}
	return thread, user, nil
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request) error {
	sb, ok := s.deps.DeerFlow.get(identity(r).Tenant, r.PathValue("sandbox_id"))
	if !ok {
		return errSandboxNotFound
	}
	writeJSON(w, http.StatusOK, s.sandboxView(r, sb))
	return nil
}

func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request) error {
	out := dfListResponse{Sandboxes: []dfSandboxView{}}
	for _, sb := range s.deps.DeerFlow.list(identity(r).Tenant) {
		out.Sandboxes = append(out.Sandboxes, s.sandboxView(r, sb))
	}
	out.Count = len(out.Sandboxes)
	writeJSON(w, http.StatusOK, out)
	return nil
}

// deleteSandbox kills the sandbox's capability and releases its session
// (pool instance, browser), keeping the workspace, as DeerFlow's
// provisioner keeps a thread's user-data when it deletes the Pod; with
// ?purge=true the workspace goes too. Deleting an unknown sandbox succeeds,
// as in DeerFlow's provisioner.
func (s *Server) deleteSandbox(w http.ResponseWriter, r *http.Request) error {
	purge := r.URL.Query().Get("purge") == "true"
	id := r.PathValue("sandbox_id")
	if sb, ok := s.deps.DeerFlow.get(identity(r).Tenant, id); ok {
		s.deps.DeerFlow.remove(sb)
		if err := s.deps.Manager.DeleteSession(r.Context(), principal(r), sb.session, purge); err != nil {
			return err
		}
	}
	writeJSON(w, http.StatusOK, dfDeleteResponse{OK: true, SandboxID: id})
	return nil
}

func (s *Server) sandboxView(r *http.Request, sb *dfSandbox) dfSandboxView {
	return dfSandboxView{
		SandboxID: sb.key.id, SandboxURL: s.sandboxURL(r, sb), Status: dfStatusRunning,
		ThreadID: sb.threadID, UserID: sb.userID, SessionID: sb.session,
	}
}

// sandboxURL is where the sandbox's AIO API is: the configured public URL
// or, without one, the URL the caller reached the gateway by.
func (s *Server) sandboxURL(r *http.Request, sb *dfSandbox) string {
	base := s.deps.DeerFlow.cfg.PublicURL
	if base == "" {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		base = scheme + "://" + r.Host
	}
	return base + deerflowPrefix + "/sandboxes/" + sb.key.id + "/" + sb.cap
}
