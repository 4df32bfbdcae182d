package deerflow

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/policy"
)

// Config tunes the front end.
type Config struct {
	// PublicURL is the gateway's base URL as DeerFlow reaches it (behind a
	// proxy); empty derives it from each request's Host (for a request
	// another replica forwarded, from the Host that replica was reached
	// by).
	PublicURL string
}

// Deps are the collaborators, wired in main.
type Deps struct {
	Manager *manager.Manager
	// Registry holds the sandboxes (OpenRegistry on the audit database).
	Registry *Registry
	// Audit receives the record of each sandbox's creation; nil records
	// none.
	Audit  audit.Store
	Logger *slog.Logger
	// Fleet routes a sandbox's requests to the replica serving its
	// session; nil serves every session here (one process).
	Fleet Fleet
}

// Fleet routes session requests between the replicas of a PostgreSQL
// fleet (DESIGN.md §12); package fleet's Router implements it, as for the
// REST routes.
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

// Server is the front end. api mounts its routes (Routes).
type Server struct {
	cfg  Config
	deps Deps
	log  *slog.Logger
}

// New builds the front end.
func New(cfg Config, deps Deps) (*Server, error) {
	if deps.Manager == nil || deps.Registry == nil {
		return nil, errors.New("deerflow: a manager and a registry are required")
	}
	return newServer(cfg, deps), nil
}

func newServer(cfg Config, deps Deps) *Server {
	cfg.PublicURL = strings.TrimRight(cfg.PublicURL, "/")
	s := &Server{cfg: cfg, deps: deps, log: deps.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s
}

// prefix is where the provisioner API and the sandboxes live.
const prefix = "/deerflow"

// frontEnd names this front end in the sessions it creates.
const frontEnd = "deerflow"

// Routes calls mount for each route: its mux pattern, its handler, and
// whether it is a provisioner route, which the mounting front end (api)
// authenticates first, handing the caller on with manager.WithPrincipal
// and its refusals to WriteProvisionerError. The sandbox routes carry
// their own credential, the capability in the URL, and are mounted as
// they are.
func (s *Server) Routes(mount func(pattern string, h http.Handler, provisioner bool)) {
	p := prefix + "/api/sandboxes"
	mount("POST "+p, s.provisioner(s.createSandbox), true)
	mount("GET "+p, s.provisioner(s.listSandboxes), true)
	mount("GET "+p+"/{sandbox_id}", s.provisioner(s.getSandbox), true)
	mount("DELETE "+p+"/{sandbox_id}", s.provisioner(s.deleteSandbox), true)

	base := prefix + "/sandboxes/{sandbox_id}/{capability}"
	mount("GET "+base+"/v1/sandbox", s.aio(s.aioSandbox), false)
	mount("POST "+base+"/v1/shell/exec", s.aio(s.aioShellExec), false)
	mount("POST "+base+"/v1/shell/sessions/create", s.aio(s.aioShellCreate), false)
	mount("DELETE "+base+"/v1/shell/sessions/{shell_id}", s.aio(s.aioShellDelete), false)
	mount("POST "+base+"/v1/file/read", s.aio(s.aioFileRead), false)
	mount("POST "+base+"/v1/file/write", s.aio(s.aioFileWrite), false)
	mount("POST "+base+"/v1/file/list", s.aio(s.aioFileList), false)
	mount("POST "+base+"/v1/file/find", s.aio(s.aioFileFind), false)
	mount("POST "+base+"/v1/file/search", s.aio(s.aioFileSearch), false)
	mount("POST "+base+"/v1/file/grep", s.aio(s.aioFileGrep), false)
	mount("POST "+base+"/v1/file/replace", s.aio(s.aioFileReplace), false)
	mount("GET "+base+"/v1/file/download", s.aio(s.aioFileDownload), false)
}

// Schemas are the wire shapes of the front end's operations, by the names
// the OpenAPI document gives them (api's operation table names them).
func (s *Server) Schemas() map[string]any {
	return map[string]any{
		"DeerFlowSandbox":         sandboxView{},
		"DeerFlowCreateRequest":   createBody{},
		"DeerFlowSandboxList":     listResponse{},
		"DeerFlowDeleted":         deleteResponse{},
		"DeerFlowError":           provisionerError{},
		"AIOError":                aioErrorBody{},
		"AIOFileFailure":          aioResponse[aioFileError]{},
		"AIOSandboxInfo":          aioSandboxInfo{},
		"AIOShellExecRequest":     aioShellExecBody{},
		"AIOShellExecResponse":    aioResponse[aioShellResult]{},
		"AIOShellSessionRequest":  aioShellSessionBody{},
		"AIOShellSessionResponse": aioResponse[aioShellSession]{},
		"AIOFileReadRequest":      aioFileReadBody{},
		"AIOFileReadResponse":     aioResponse[aioFileRead]{},
		"AIOFileWriteRequest":     aioFileWriteBody{},
		"AIOFileWriteResponse":    aioResponse[aioFileWrite]{},
		"AIOFileListRequest":      aioFileListBody{},
		"AIOFileListResponse":     aioResponse[aioFileList]{},
		"AIOFileFindRequest":      aioFileFindBody{},
		"AIOFileFindResponse":     aioResponse[aioFileFind]{},
		"AIOFileSearchRequest":    aioFileSearchBody{},
		"AIOFileSearchResponse":   aioResponse[aioFileSearch]{},
		"AIOFileGrepRequest":      aioFileGrepBody{},
		"AIOFileGrepResponse":     aioResponse[aioFileGrep]{},
		"AIOFileReplaceRequest":   aioFileReplaceBody{},
		"AIOFileReplaceResponse":  aioResponse[aioFileReplace]{},
	}
}

// forwarded reports whether r came from another replica of the fleet (a
// verified hop).
func (s *Server) forwarded(r *http.Request) bool {
	if s.deps.Fleet == nil {
		return false
	}
	_, ok := s.deps.Fleet.Forwarded(r)
	return ok
}

// route serves r on the replica serving the session key when that is
// another live one: true when that replica answered. A false with a nil
// error means this replica serves the session (it owns it, or has just
// claimed it), and the caller goes on here.
func (s *Server) route(w http.ResponseWriter, r *http.Request, key string) (bool, error) {
	if s.deps.Fleet == nil {
		return false, nil
	}
	return s.deps.Fleet.Route(w, r, key, manager.RequestIDFrom(r.Context()), s.forwarded(r))
}

// errorDetail is sandgate's error object, as the REST API's error body
// carries it (DESIGN.md §5): the provisioner's and the AIO envelope's
// errors carry it under "error", with its stable code.
type errorDetail struct {
	Code      errcode.Code         `json:"code"`
	Message   string               `json:"message"`
	Reasons   []policy.Reason      `json:"reasons,omitempty"`
	Fields    []manager.FieldError `json:"fields,omitempty"`
	RequestID string               `json:"request_id"`
}

// Errors raised by the front end itself, worded as the REST API's.
var (
	errBadJSON      = errcode.New(errcode.InvalidRequest, "the body is not valid JSON for this endpoint")
	errTooLarge     = errcode.New(errcode.PayloadTooLarge, "the body exceeds the size limit")
	errUnauthorized = errcode.New(errcode.Unauthorized, "a valid bearer token is required")
)

// invalidField is a one-field validation error raised while decoding.
func invalidField(field, code, msg string) error {
	return &manager.ValidationError{Kind: manager.ErrInvalidRequest,
		Fields: []manager.FieldError{{Field: field, Code: code, Message: msg}}}
}

// errorOf renders err through errcode.Of, the single mapping from errors
// to code and status, logging what a 5xx hides. Internal error text never
// reaches the client. An answer worth retrying gets its Retry-After.
func (s *Server) errorOf(w http.ResponseWriter, r *http.Request, err error) (int, errorDetail) {
	code, status, msg := errcode.Of(err)
	d := errorDetail{Code: code, Message: msg, RequestID: manager.RequestIDFrom(r.Context())}
	var denied *manager.DeniedError
	if errors.As(err, &denied) {
		d.Reasons = denied.Reasons
	}
	var invalid *manager.ValidationError
	if errors.As(err, &invalid) {
		d.Fields = invalid.Fields
	}
	switch code {
	case errcode.PoolExhausted, errcode.ReplicaUnavailable, errcode.SessionUnavailable:
		w.Header().Set("Retry-After", "1") // busy, not broken
	}
	var limited *manager.RateLimitedError
	if errors.As(err, &limited) {
		w.Header().Set("Retry-After", strconv.Itoa(limited.RetryAfterSeconds()))
	}
	if status >= 500 {
		s.log.ErrorContext(r.Context(), "deerflow request failed", "request_id", d.RequestID, "status", status, "err", err)
	}
	return status, d
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client may be gone; nothing to do
}

// decodeLenient reads one JSON object, ignoring unknown fields, as the
// FastAPI servers DeerFlow talks to do. Too large is 413, empty is a
// missing body.
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
		return invalidField("body", "required", "a JSON body is required")
	}
	if err := json.Unmarshal(body, v); err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) {
			return invalidField(ute.Field, "type", "must be a JSON "+ute.Type.String())
		}
		return errBadJSON
	}
	return nil
}
