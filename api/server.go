// Package api is sandgate's HTTP surface (DESIGN.md §5): routing,
// authentication, request decoding and validation handoff, and the single
// error body. It holds no decisions of its own: every execution goes through
// manager.
package api

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/browser"
	"github.com/sandgate/sandgate/confirm"
	"github.com/sandgate/sandgate/events"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/policy"
)

// DefaultMaxBodyBytes caps request bodies. Code is capped at 256 KiB by the
// manager; JSON escaping can inflate it several times, hence the headroom.
const DefaultMaxBodyBytes = 2 << 20

// PolicyAdmin is the policy engine as the admin endpoints use it.
type PolicyAdmin interface {
	Status() policy.Status
	Reload(ctx context.Context) (policy.Status, error)
	// ShadowStatus is the candidate policy's record; false without one.
	ShadowStatus() (policy.ShadowStatus, bool)
}

// Config tunes the HTTP layer. Zero values take the defaults in New.
type Config struct {
	MaxBodyBytes int64
	// StreamKeepalive is how often a streamed run (Accept:
	// application/x-ndjson) sends a keepalive event: DefaultStreamKeepalive.
	StreamKeepalive time.Duration
	// StreamWriteTimeout bounds each write of a streamed run, in place of
	// the server's WriteTimeout (which would cut a long run): a client
	// that reads nothing for this long is gone, and its run is cancelled.
	// Default DefaultStreamWriteTimeout.
	StreamWriteTimeout time.Duration
	// MaxEventStreams bounds the event streams (GET /v1/events) one
	// tenant holds open at once: each wakes on every event and reads the
	// log. Default DefaultMaxEventStreams.
	MaxEventStreams int
}

// Defaults of the streamed runs.
const (
	// DefaultStreamKeepalive is within DESIGN.md §10's 10–15 s, under the
	// idle timeouts of common proxies (30–60 s).
	DefaultStreamKeepalive = 12 * time.Second
	// DefaultStreamWriteTimeout is five keepalives: a client that has not
	// taken one event in that time is not reading.
	DefaultStreamWriteTimeout = 60 * time.Second
	// DefaultMaxEventStreams is Config.MaxEventStreams's default: a
	// tenant's dashboards and automations, not one per request.
	DefaultMaxEventStreams = 16
)

// Deps are the collaborators, wired in main.
type Deps struct {
	Manager  *manager.Manager
	Policy   PolicyAdmin
	Audit    audit.Store
	Auth     *Auth
	Gatherer prometheus.Gatherer
	Logger   *slog.Logger
	// Browser is the browser router behind POST /v1/sessions/{id}/browser;
	// nil answers that endpoint with executor_unavailable.
	Browser *browser.Manager
	// Approvals is the approval hub behind /v1/approvals and the page; nil
	// answers those endpoints with 404 (approvals not enabled).
	Approvals *confirm.Hub
	// MCP is the MCP server mounted at /mcp; nil leaves it unmounted.
	MCP MCPServer
	// Database is the audit and approvals database /readyz pings; nil
	// leaves it out.
	Database Pinger
	// AuditChain is the database whose hash chains GET /v1/audit/verify
	// recomputes (the one Audit writes to); nil answers it 404.
	AuditChain audit.Database
	// DeerFlow is the AIO/DeerFlow front end mounted under /deerflow;
	// nil leaves those routes unmounted.
	DeerFlow DeerFlowServer
	// E2B is the E2B front end mounted under /e2b; nil leaves those
	// routes unmounted.
	E2B E2BServer
	// Daytona is the Daytona front end mounted under /daytona; nil leaves
	// those routes unmounted.
	Daytona DaytonaServer
	// Events is the lifecycle event log behind /v1/events; nil leaves
	// those routes unmounted.
	Events *events.Log
	// Fleet routes session requests to the replica owning the session;
	// nil serves every session here (one process).
	Fleet Fleet
}

// Pinger is a dependency /readyz checks.
type Pinger interface {
	Ping(ctx context.Context) error
}

// Server is the http.Handler of the gateway.
type Server struct {
	cfg  Config
	deps Deps
	log  *slog.Logger
	mux  *http.ServeMux
	// patterns are the mux patterns registered, in order: what the OpenAPI
	// drift test holds the document against.
	patterns []string
	// openAPIDoc is GET /v1/openapi.json's document, built on first use.
	openAPIDoc openAPICache
	// streams closes when the server shuts down (EndStreams): open-ended
	// answers (the event stream) end then, so they never hold a graceful
	// shutdown to its deadline.
	streams     chan struct{}
	streamsOnce sync.Once
	// openStreams counts each tenant's open event streams.
	streamsMu   sync.Mutex
	openStreams map[string]int
}

// EndStreams ends the open-ended answers in progress and those to come
// (GET /v1/events): main calls it when the HTTP server shuts down
// (http.Server.RegisterOnShutdown).
func (s *Server) EndStreams() { s.streamsOnce.Do(func() { close(s.streams) }) }

// New builds the handler with every route of this version.
func New(cfg Config, deps Deps) *Server {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.MaxEventStreams <= 0 {
		cfg.MaxEventStreams = DefaultMaxEventStreams
	}
	if cfg.StreamKeepalive <= 0 {
		cfg.StreamKeepalive = DefaultStreamKeepalive
	}
	if cfg.StreamWriteTimeout <= 0 {
		cfg.StreamWriteTimeout = DefaultStreamWriteTimeout
	}
	s := &Server{cfg: cfg, deps: deps, log: deps.Logger, mux: http.NewServeMux(), streams: make(chan struct{}),
		openStreams: map[string]int{}}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.routes()
	return s
}

func (s *Server) routes() {
	agent := []Role{RoleAgent}
	agentOrAdmin := []Role{RoleAgent, RoleAdmin}
	admin := []Role{RoleAdmin}

	s.handleSession("POST /v1/sessions/{id}/run_code", agent, s.runCode)
	s.handleSession("POST /v1/sessions/{id}/execute", agent, s.execute)
	s.handleSession("POST /v1/sessions/{id}/kernel/restart", agent, s.restartKernel)
	s.handle("GET /v1/sessions", agentOrAdmin, s.listSessions)
	s.handle("POST /v1/sessions", agent, s.createSession)
	s.handleSession("PATCH /v1/sessions/{id}", agentOrAdmin, s.patchSession)
	s.handleSession("GET /v1/sessions/{id}", agentOrAdmin, s.getSession)
	s.handleSession("DELETE /v1/sessions/{id}", agentOrAdmin, s.deleteSession)

	s.handle("GET /v1/policy", admin, s.getPolicy)
	s.handle("POST /v1/policy/reload", admin, s.reloadPolicy)
	s.handle("GET /v1/policy/shadow", admin, s.getShadow)
	s.handle("POST /v1/policy/evaluate", agentOrAdmin, s.evaluate)
	s.handle("GET /v1/audit", admin, s.listAudit)
	s.handle("GET /v1/audit/records/{id}", admin, s.getAuditRecord)
	s.handle("GET /v1/audit/verify", admin, s.verifyAudit)
	s.handle("GET /v1/audit/export", admin, s.exportAudit)
	s.fileRoutes()
	s.pauseRoutes()
	s.approvalRoutes()
	s.browserRoutes()
	s.mcpRoutes()
	s.eventRoutes()
	s.deerflowRoutes()
	s.e2bRoutes()
	s.daytonaRoutes()

	// Metrics name executors, policy revisions and rates: admin only.
	metrics := promhttp.HandlerFor(s.deps.Gatherer, promhttp.HandlerOpts{})
	s.handle("GET /metrics", admin, func(w http.ResponseWriter, r *http.Request) error {
		metrics.ServeHTTP(w, r)
		return nil
	})
	// Probes are unauthenticated by design (load balancers, kubelets) and
	// say nothing beyond ready or not.
	s.mount("GET /healthz", s.wrap(s.healthz))
	s.mount("GET /readyz", s.wrap(s.readyz))
	s.mount("GET /v1/openapi.json", s.wrap(s.openAPI))
	s.mux.Handle("/", s.wrap(s.unmatched)) // not a route: every other path
}

// unmatched answers 405 when the path exists for another method, else 404,
// both with the JSON error body.
func (s *Server) unmatched(w http.ResponseWriter, r *http.Request) error {
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := s.mux.Handler(probe); pattern != "/" {
			return errMethod
		}
	}
	return errNotFound
}

// handlerFunc is a handler that returns its error, so that every failure is
// rendered by writeError (Caddy's error-returning handlers).
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

func (s *Server) handle(pattern string, roles []Role, h handlerFunc) {
	s.mount(pattern, s.wrap(s.authorize(roles, h)))
}

// mount registers every route: it records the pattern for the OpenAPI
// drift test (openapi_test.go).
func (s *Server) mount(pattern string, h http.Handler) {
	s.patterns = append(s.patterns, pattern)
	s.mux.Handle(pattern, h)
}

func (s *Server) wrap(h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			s.writeError(w, r, err)
		}
	})
}

// ServeHTTP stamps every response with a request id, bounds the body,
// and turns panics into a 500 with the fixed body.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id, hop := newRequestID(), false
	if s.deps.Fleet != nil {
		// A request another replica forwarded keeps the id it was given
		// there, so one id names it in both replicas' logs and audit.
		if fid, ok := s.deps.Fleet.Forwarded(r); ok {
			hop = true
			if fid != "" {
				id = fid
			}
		}
	}
	w.Header().Set("X-Request-Id", id)
	ctx := withRequestID(r.Context(), id)
	if hop {
		ctx = context.WithValue(ctx, keyForwarded, true)
	}
	r = r.WithContext(ctx)
	r.Body = http.MaxBytesReader(w, r.Body, s.bodyLimit(r))
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.ErrorContext(r.Context(), "handler panic", "request_id", id, "panic", v)
			s.writeError(w, r, errPanic)
		}
	}()
	s.mux.ServeHTTP(w, r)
}
