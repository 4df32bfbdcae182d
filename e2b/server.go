package e2b

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/manager"
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
	cp("GET "+Prefix+"/sandboxes/{id}", s.getSandbox)
	cp("DELETE "+Prefix+"/sandboxes/{id}", s.killSandbox)
	cp("POST "+Prefix+"/sandboxes/{id}/timeout", s.setTimeout)
	cp("GET "+Prefix+"/sandboxes/{id}/metrics", s.getMetrics)
	cp("POST "+Prefix+"/sandboxes/{id}/connect", s.connectSandbox)
	cp("POST "+Prefix+"/v2/sandboxes/{id}/connect", s.connectSandbox)

	mount("POST "+Prefix+"/process.Process/{method}", http.HandlerFunc(s.processRPC), false)
	mount("POST "+Prefix+"/filesystem.Filesystem/{method}", http.HandlerFunc(s.filesystemRPC), false)
	mount("GET "+Prefix+"/files", http.HandlerFunc(s.getFile), false)
	mount("POST "+Prefix+"/files", http.HandlerFunc(s.postFiles), false)
	mount("GET "+Prefix+"/health", http.HandlerFunc(s.health), false)

	mount("POST "+Prefix+"/execute", http.HandlerFunc(s.execute), false)
	mount("GET "+Prefix+"/contexts", http.HandlerFunc(s.listContexts), false)
	mount("POST "+Prefix+"/contexts", http.HandlerFunc(s.createContext), false)
	mount("DELETE "+Prefix+"/contexts/{id}", http.HandlerFunc(s.deleteContext), false)
	mount("POST "+Prefix+"/contexts/{id}/restart", http.HandlerFunc(s.restartContext), false)
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

// sandboxOf finds the sandbox a sandbox request names (E2b-Sandbox-Id)
// and checks its token: X-Access-Token, or on the code interpreter's
// routes also E2B-Traffic-Access-Token. ok is false for an unknown
// sandbox (gone: the SDK reads 502 as not running) and for a wrong token.
func (s *Server) sandboxOf(r *http.Request, traffic bool) (sb *sandbox, status int, msg string) {
	id := r.Header.Get("E2b-Sandbox-Id")
	if id == "" {
		return nil, http.StatusBadRequest, "the E2b-Sandbox-Id header is required (set E2B_SANDBOX_URL to this gateway's /e2b)"
	}
	sb, ok := s.deps.Registry.get(id)
	if !ok {
		return nil, http.StatusBadGateway, "the sandbox is not running on this gateway (killed, expired, or registered before a restart: Sandbox.connect registers it again)"
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
