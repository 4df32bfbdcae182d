package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/workspace"
)

// Config tunes the front end.
type Config struct {
	// Keepalive is how often a held or quiet command's stream, and a
	// held cell's /execute stream, gets a keepalive; default
	// DefaultKeepalive.
	Keepalive time.Duration
	// WriteTimeout bounds each write of a stream, in place of the
	// server's WriteTimeout; default DefaultWriteTimeout.
	WriteTimeout time.Duration
}

// Defaults of Config.
const (
	// DefaultKeepalive is well under the SDK's 60 s request timeout and
	// the idle timeouts of common proxies.
	DefaultKeepalive = 10 * time.Second
	// DefaultWriteTimeout is six keepalives: a client that took nothing
	// in that time is not reading.
	DefaultWriteTimeout = 60 * time.Second
)

// Deps are the collaborators, wired in main.
type Deps struct {
	Manager *manager.Manager
	// Registry holds the sandboxes this process serves; main also hands
	// its Release to the manager as a session resource.
	Registry *Registry
	Logger   *slog.Logger
	// Fleet routes a sandbox's calls to the replica serving its session;
	// nil serves every session here (one process).
	Fleet Fleet
}

// Fleet routes session requests between the replicas of a PostgreSQL
// fleet (DESIGN.md §12); package fleet's Router implements it, as for the
// REST and DeerFlow routes.
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
		return nil, errors.New("e2b: a manager and a registry are required")
	}
	if cfg.Keepalive <= 0 {
		cfg.Keepalive = DefaultKeepalive
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	s := &Server{cfg: cfg, deps: deps, log: deps.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s, nil
}

// Prefix is where the front end lives on the gateway's listener: both
// E2B_API_URL and E2B_SANDBOX_URL are http(s)://<gateway>/e2b.
const Prefix = "/e2b"

// frontEnd names this front end in the sessions it creates.
const frontEnd = "e2b"

// Routes calls mount for each route: its mux pattern, its handler, and
// whether it is a control-plane route, which the mounting front end (api)
// authenticates first (an agent token in X-API-Key), handing the caller
// on with manager.WithPrincipal, and whose refusals it answers with
// WriteControlPlaneError. The sandbox routes (envd and the code
// interpreter) carry the sandbox's own tokens, which this package checks.
func (s *Server) Routes(mount func(pattern string, h http.Handler, controlPlane bool)) {
	cp := func(pattern string, h func(http.ResponseWriter, *http.Request, manager.Principal) error) {
		mount(pattern, s.controlPlane(h), true)
	}
	cp("POST "+Prefix+"/sandboxes", s.createSandbox)
	cp("POST "+Prefix+"/v2/sandboxes", s.createSandbox)
	cp("GET "+Prefix+"/sandboxes", s.listSandboxes)
	cp("GET "+Prefix+"/v2/sandboxes", s.listSandboxes)
	// A sandbox's own control-plane calls are served where its
	// session is (owned): its tokens, processes and cgroups are there.
	cp("GET "+Prefix+"/sandboxes/{id}", s.owned(s.getSandbox))
	cp("DELETE "+Prefix+"/sandboxes/{id}", s.owned(s.killSandbox))
	cp("POST "+Prefix+"/sandboxes/{id}/timeout", s.owned(s.setTimeout))
	cp("GET "+Prefix+"/sandboxes/{id}/metrics", s.owned(s.getMetrics))
	cp("POST "+Prefix+"/sandboxes/{id}/connect", s.owned(s.connectSandbox))
	cp("POST "+Prefix+"/v2/sandboxes/{id}/connect", s.owned(s.connectSandbox))
	cp("POST "+Prefix+"/sandboxes/{id}/resume", s.owned(s.connectSandbox))
	cp("POST "+Prefix+"/sandboxes/{id}/pause", s.owned(s.pauseSandbox))
	cp("POST "+Prefix+"/sandboxes/{id}/fork", s.owned(s.forkSandbox))

	sbx := func(pattern string, h http.HandlerFunc, traffic bool) {
		mount(pattern, s.routedSandbox(h, traffic), false)
	}
	sbx("POST "+Prefix+"/process.Process/{method}", s.processRPC, false)
	sbx("POST "+Prefix+"/filesystem.Filesystem/{method}", s.filesystemRPC, false)
	sbx("GET "+Prefix+"/files", s.getFile, false)
	sbx("POST "+Prefix+"/files", s.postFiles, false)
	sbx("GET "+Prefix+"/health", s.health, false)

	sbx("POST "+Prefix+"/execute", s.execute, true)
	sbx("GET "+Prefix+"/contexts", s.listContexts, true)
	sbx("POST "+Prefix+"/contexts", s.createContext, true)
	sbx("DELETE "+Prefix+"/contexts/{id}", s.deleteContext, true)
	sbx("POST "+Prefix+"/contexts/{id}/restart", s.restartContext, true)
}

// BodyLimit is the body cap api puts on r when it is an upload to /files:
// the workspace's file-size limit plus room for the multipart framing; 0
// for every other request (api's own cap applies).
func (s *Server) BodyLimit(r *http.Request) int64 {
	if r.Method == http.MethodPost && r.URL.Path == Prefix+"/files" {
		return s.deps.Manager.FileLimits().MaxFileBytes + 1<<20
	}
	return 0
}

// apiError is E2B's control-plane error body ({code, message}); the SDK
// reads code (404 on kill and connect) and shows message.
type apiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// WriteControlPlaneError answers a control-plane request api refused
// (401, 403) or this package failed, in E2B's error shape. The message is
// errcode's client-safe one, with the policy's reasons when there are.
func (s *Server) WriteControlPlaneError(w http.ResponseWriter, r *http.Request, err error) {
	code, status, msg := errcode.Of(err)
	if status >= 500 {
		s.log.ErrorContext(r.Context(), "e2b request failed", "request_id", manager.RequestIDFrom(r.Context()),
			"status", status, "err", err)
	}
	var invalid *errcode.ValidationError
	if errors.As(err, &invalid) {
		for _, f := range invalid.Fields {
			msg += "; " + f.Field + ": " + f.Message
		}
	}
	if code == errcode.Unauthorized {
		msg = "a valid API key is required: an agent token of the gateway, in X-API-Key (E2B_API_KEY)"
	}
	writeJSON(w, status, apiError{Code: status, Message: msg + reasonsOf(err) + " (request " + manager.RequestIDFrom(r.Context()) + ")"})
}

// reasonsOf is ": " and the policy's reasons of a refusal, or "".
func reasonsOf(err error) string {
	var denied *manager.DeniedError
	if !errors.As(err, &denied) || len(denied.Reasons) == 0 {
		return ""
	}
	parts := make([]string, 0, len(denied.Reasons))
	for _, r := range denied.Reasons {
		if r.Enforced() {
			parts = append(parts, r.Message+" ("+r.Code+")")
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return ": " + strings.Join(parts, "; ")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client may be gone; nothing to do
}

// controlPlane hands a control-plane handler the caller api
// authenticated, and renders its error.
func (s *Server) controlPlane(h func(http.ResponseWriter, *http.Request, manager.Principal) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := manager.PrincipalFrom(r.Context())
		if !ok {
			s.WriteControlPlaneError(w, r, errcode.New(errcode.Unauthorized, "unauthorized"))
			return
		}
		r = r.WithContext(manager.WithFrontEnd(r.Context(), frontEnd))
		if err := h(w, r, p); err != nil {
			s.WriteControlPlaneError(w, r, err)
		}
	})
}

// sandboxOf is the sandbox a sandbox request names, as routedSandbox
// found it (E2b-Sandbox-Id, its token checked: X-Access-Token, or on the
// code interpreter's routes also E2B-Traffic-Access-Token), served here.
// sb is nil for an unknown sandbox (gone: the SDK reads 502 as not
// running), a wrong token, or a session that cannot be served (503),
// with the status and message to answer.
func (s *Server) sandboxOf(r *http.Request, traffic bool) (sb *sandbox, status int, msg string) {
	if f, ok := r.Context().Value(foundKey{}).(*found); ok {
		return f.sb, f.status, f.msg
	}
	return s.findSandbox(r, traffic) // a handler mounted without routedSandbox (tests)
}

// findSandbox looks up and authorises the sandbox r names, without
// routing it.
func (s *Server) findSandbox(r *http.Request, traffic bool) (sb *sandbox, status int, msg string) {
	id := r.Header.Get("E2b-Sandbox-Id")
	if id == "" {
		return nil, http.StatusBadRequest, "the E2b-Sandbox-Id header is required (set E2B_SANDBOX_URL to this gateway's /e2b)"
	}
	sb, ok, err := s.deps.Registry.lookup(r.Context(), id)
	if err != nil {
		s.log.ErrorContext(r.Context(), "e2b sandbox lookup failed", "request_id", manager.RequestIDFrom(r.Context()), "err", err)
		return nil, http.StatusServiceUnavailable, "the sandbox registry is unreachable; retry shortly"
	}
	if !ok {
		return nil, http.StatusBadGateway, "the sandbox is not running on this gateway (killed or expired)"
	}
	tt := ""
	if traffic {
		tt = r.Header.Get("E2B-Traffic-Access-Token")
	}
	if !sb.accepts(r.Header.Get("X-Access-Token"), tt) {
		return nil, http.StatusUnauthorized, "the sandbox's access token is missing or wrong"
	}
	return sb, 0, ""
}

type foundKey struct{}

// found is what routedSandbox found for the handler.
type found struct {
	sb     *sandbox
	status int
	msg    string
}

// routedSandbox serves a sandbox route where the sandbox's session is
// served: a call whose token checks out is forwarded to the replica
// serving the session when that is another one (which checks it again),
// so that a sandbox's processes, contexts and kernel live on one replica
// whichever replica a call reaches. Served here, the handler gets the
// sandbox through sandboxOf; a refusal is left to the handler to answer
// in its route's wire format.
func (s *Server) routedSandbox(h http.HandlerFunc, traffic bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sb, status, msg := s.findSandbox(r, traffic)
		if sb != nil && s.deps.Fleet != nil {
			handled, err := s.deps.Fleet.Route(w, r, sb.sessionKey, manager.RequestIDFrom(r.Context()), s.forwarded(r))
			if handled && err == nil {
				return
			}
			if err != nil {
				_, status, msg = errcode.Of(err)
				if status == http.StatusServiceUnavailable {
					w.Header().Set("Retry-After", "1")
				}
				sb = nil
			}
		}
		if sb != nil {
			sb = s.deps.Registry.serve(sb) // as looked up just now
		}
		ctx := context.WithValue(r.Context(), foundKey{}, &found{sb: sb, status: status, msg: msg})
		if sb != nil {
			ctx = manager.WithServedHere(ctx, sb.sessionKey)
		}
		h(w, r.WithContext(ctx))
	})
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

// owned serves a control-plane call about one sandbox ({id}) on the
// replica serving its session, forwarding it there when that is another
// one (which authenticates the caller again from its own key). An id that
// is not a live E2B sandbox of the caller's tenant is answered here.
func (s *Server) owned(h func(http.ResponseWriter, *http.Request, manager.Principal) error) func(http.ResponseWriter, *http.Request, manager.Principal) error {
	if s.deps.Fleet == nil {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request, p manager.Principal) error {
		info, err := s.session(r, p, r.PathValue("id"))
		if err != nil {
			return err
		}
		key := workspace.Key(info.Tenant, info.ID)
		handled, err := s.deps.Fleet.Route(w, r, key, manager.RequestIDFrom(r.Context()), s.forwarded(r))
		if err != nil || handled {
			return err
		}
		return h(w, r.WithContext(manager.WithServedHere(r.Context(), key)), p)
	}
}

// sandboxContext is r's context for work in sb: its principal, the front
// end, and the request id api gave it.
func sandboxContext(r *http.Request, sb *sandbox) *http.Request {
	ctx := manager.WithPrincipal(r.Context(), sb.principal)
	return r.WithContext(manager.WithFrontEnd(ctx, frontEnd))
}

// via is how the approval page names the channel.
func (sb *sandbox) via() string {
	if sb.client == "" {
		return "E2B SDK"
	}
	return "E2B SDK (" + sb.client + ")"
}
