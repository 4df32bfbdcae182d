package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/workspace"
)

// AIOBrowsers finds the DevTools endpoint of the browser inside a session's
// AIO sandbox (the cdp_url of the sandbox's GET /v1/browser/info, or its
// /json/version address). executors/aio implements it; main wires it.
type AIOBrowsers interface {
	BrowserCDP(ctx context.Context, sessionID string) (string, error)
}

// Deps are the router's collaborators, wired in main.
type Deps struct {
	Policy     Decider
	Audit      audit.Store
	Workspaces *workspace.Workspaces
	// AIO locates sandbox browsers; nil makes the aio backend unavailable
	// (executor_unavailable), never a silent fallback to external.
	AIO AIOBrowsers
	// Resolver resolves the hosts the external browser asks for; nil is
	// net.DefaultResolver.
	Resolver Resolver
	Logger   *slog.Logger
}

// RouteContext selects the backend, as in the seed: needs_file_access or
// is_research select aio, anything else external.
type RouteContext struct {
	NeedsFileAccess bool `json:"needs_file_access"`
	IsResearch      bool `json:"is_research"`
}

// Backend is the backend the context selects.
func (c RouteContext) Backend() string {
	if c.NeedsFileAccess || c.IsResearch {
		return BackendAIO
	}
	return BackendExternal
}

// Request is one browser action.
type Request struct {
	RequestID string
	// SessionID is the session's key (workspace.Key): the gateway resolves
	// the caller's session (manager.ResolveSession) before it asks the
	// router, which then keeps one browser per tenant and session.
	SessionID string
	// Principal is "role:name" of the caller, for the audit record.
	Principal string
	Action    string
	// Params are the action's JSON parameters, decoded strictly per action.
	Params  json.RawMessage
	Context RouteContext
}

// Result is an action's outcome.
type Result struct {
	Action  string `json:"action"`
	Backend string `json:"backend"`
	// Started is true when this action started (or restarted, after a
	// crash or the idle timeout) the session's browser.
	Started bool `json:"started"`
	// Data is the action's own result (NavigateResult, ContentResult...).
	Data any `json:"result"`
	// Blocked lists requests the policy refused while the action ran
	// (sub-resources, redirects); BlockedDropped counts those past the cap.
	Blocked        []Blocked `json:"blocked"`
	BlockedDropped int       `json:"blocked_dropped,omitempty"`
	// Warnings lists requests the policy let through only because the
	// rules that would have refused them are in warn mode (enforcement
	// modes); absent when there are none.
	Warnings []Warning     `json:"warnings,omitempty"`
	Duration time.Duration `json:"-"`
}

// Manager owns every session's Router. It is safe for concurrent use.
type Manager struct {
	cfg      Config
	deps     Deps
	log      *slog.Logger
	resolver Resolver

	// lifetime parents every browser: cancelling it (Close) kills them all.
	lifetime       context.Context
	cancelLifetime context.CancelFunc
	janitorDone    chan struct{}

	mu       sync.Mutex
	routers  map[string]*Router
	external int // live (or starting) external browsers
	closed   bool
}

// New checks the configuration and wiring and builds a Manager. Browsers
// start lazily, on a session's first action.
func New(cfg Config, deps Deps) (*Manager, error) {
	cfg.applyDefaults()
	errs := []error{cfg.Validate()}
	if deps.Policy == nil {
		errs = append(errs, errors.New("browser: no policy engine"))
	}
	if deps.Audit == nil {
		errs = append(errs, errors.New("browser: no audit store"))
	}
	if deps.Workspaces == nil {
		errs = append(errs, errors.New("browser: no workspaces"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	res := deps.Resolver
	if res == nil {
		res = net.DefaultResolver
	}
	deps.Audit = keyedStore{deps.Audit}
	m := &Manager{cfg: cfg, deps: deps, log: log, resolver: res, routers: make(map[string]*Router),
		janitorDone: make(chan struct{})}
	m.lifetime, m.cancelLifetime = context.WithCancel(context.Background())
	reapStale(cfg.DataDir)
	go m.janitor()
	return m, nil
}

// Config returns the configuration in force, defaults applied.
func (m *Manager) Config() Config { return m.cfg }

// Do runs one action in the session's browser, starting it (or switching
// backend, or restarting it after a crash) first when needed. Actions of
// one session run one at a time, in arrival order as far as the lock
// allows; different sessions run in parallel. Every action is audited as a
// browser.action record, after the decisions taken while it ran.
func (m *Manager) Do(ctx context.Context, req Request) (*Result, error) {
	start := time.Now()
	rec := &audit.Record{RequestID: req.RequestID, Kind: KindAction, SessionID: req.SessionID, Principal: req.Principal,
		Detail: map[string]string{"action": req.Action}}
	if err := workspace.ValidateKey(req.SessionID); err != nil {
		m.finish(ctx, rec, nil, err, start, nil)
		return nil, err
	}
	act, err := parseAction(&m.cfg, req.Action, req.Params)
	if err != nil {
		m.finish(ctx, rec, nil, err, start, nil)
		return nil, err
	}
	backend := req.Context.Backend()
	rec.Detail["backend"] = backend
	rec.Executor = "browser." + backend
	for {
		r, err := m.router(req.SessionID)
		if err != nil {
			m.finish(ctx, rec, nil, err, start, nil)
			return nil, err
		}
		if err := r.acquire(ctx); err != nil {
			err = cancelled(err)
			m.finish(ctx, rec, nil, err, start, nil)
			return nil, err
		}
		if r.released {
			r.release() // ReleaseSession won the race: use a fresh router
			continue
		}
		res, err := r.run(ctx, req, act, backend, rec)
		if res != nil {
			res.Duration = time.Since(start)
		}
		m.finish(ctx, rec, res, err, start, r)
		r.release()
		return res, err
	}
}

// router returns the session's router, creating it.
func (m *Manager) router(sessionID string) (*Router, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	r, ok := m.routers[sessionID]
	if !ok {
		r = newRouter(m, sessionID)
		m.routers[sessionID] = r
	}
	return r, nil
}

// reserveExternal takes one of the MaxBrowsers slots.
func (m *Manager) reserveExternal() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	if m.external >= m.cfg.MaxBrowsers {
		return ErrTooMany
	}
	m.external++
	return nil
}

func (m *Manager) releaseExternal() {
	m.mu.Lock()
	m.external--
	m.mu.Unlock()
}

// ReleaseSession closes the session's browser, whichever backend it is on,
// and forgets the session. An action of the session that is running is
// waited for (up to ctx). Releasing a session without a browser succeeds.
// Wire it into manager.DeleteSession.
func (m *Manager) ReleaseSession(ctx context.Context, sessionID string) error {
	m.mu.Lock()
	r, ok := m.routers[sessionID]
	if ok {
		delete(m.routers, sessionID)
	}
	m.mu.Unlock()
	if !ok {
		return nil
	}
	if err := r.acquire(ctx); err != nil {
		return fmt.Errorf("browser: release session %s: %w", sessionID, err)
	}
	r.retire(ctx)
	r.release()
	return nil
}

// Close ends every browser and stops the router; later actions get
// executor_unavailable. It waits for running actions up to ctx, then kills
// what is left: no Chromium process it started survives it.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	routers := make([]*Router, 0, len(m.routers))
	for id, r := range m.routers {
		routers = append(routers, r)
		delete(m.routers, id)
	}
	m.mu.Unlock()
	close(m.janitorDone)

	closeAll := func(ctx context.Context) []*Router {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var busy []*Router
		for _, r := range routers {
			wg.Go(func() {
				if err := r.acquire(ctx); err != nil {
					mu.Lock()
					busy = append(busy, r)
					mu.Unlock()
					return
				}
				r.retire(ctx)
				r.release()
			})
		}
		wg.Wait()
		return busy
	}
	busy := closeAll(ctx)
	// What is still running past ctx is cut off: cancelling the lifetime
	// kills every external browser and drops every CDP connection, so the
	// actions fail at once and their instances can be cleaned up.
	m.cancelLifetime()
	if len(busy) > 0 {
		routers = busy
		cctx, cancel := context.WithTimeout(context.Background(), 2*closeTimeout)
		defer cancel()
		if left := closeAll(cctx); len(left) > 0 {
			return fmt.Errorf("browser: %d sessions did not stop in time", len(left))
		}
		return fmt.Errorf("browser: %d sessions were still running at shutdown: %w", len(busy), ctx.Err())
	}
	return nil
}

// janitor closes browsers idle for longer than IdleTTL and forgets routers
// that hold nothing.
func (m *Manager) janitor() {
	period := min(m.cfg.IdleTTL/4, 30*time.Second)
	period = max(period, 10*time.Millisecond)
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-m.janitorDone:
			return
		case <-t.C:
			m.sweep(time.Now())
		}
	}
}

func (m *Manager) sweep(now time.Time) {
	m.mu.Lock()
	routers := make([]*Router, 0, len(m.routers))
	for _, r := range m.routers {
		routers = append(routers, r)
	}
	m.mu.Unlock()
	for _, r := range routers {
		if !r.tryAcquire() {
			continue // busy: not idle
		}
		if now.Sub(r.lastUsed) >= m.cfg.IdleTTL {
			if r.inst != nil {
				m.log.Info("browser idle, closing", "session_id", r.sessionID, "backend", r.inst.backend)
				r.closeInstance()
			}
			m.mu.Lock()
			if m.routers[r.sessionID] == r {
				delete(m.routers, r.sessionID)
			}
			m.mu.Unlock()
			r.retire(m.lifetime)
		}
		r.release()
	}
}

// Live reports the live browser of each session, by backend (for tests,
// metrics and the session view).
func (m *Manager) Live() map[string]string {
	m.mu.Lock()
	routers := make([]*Router, 0, len(m.routers))
	for _, r := range m.routers {
		routers = append(routers, r)
	}
	m.mu.Unlock()
	out := make(map[string]string)
	for _, r := range routers {
		if b := r.backend.Load(); b != nil && *b != "" {
			out[r.sessionID] = *b
		}
	}
	return out
}

// finish writes the action's audit record; with a router (whose lock the
// caller holds), together with the decisions taken while it ran.
func (m *Manager) finish(ctx context.Context, rec *audit.Record, res *Result, err error, start time.Time, r *Router) {
	rec.DurationMS = time.Since(start).Milliseconds()
	code, status, _ := errcodeOf(err)
	rec.ErrorCode, rec.HTTPStatus = string(code), status
	rec.Outcome = outcomeOf(err)
	var denied *DeniedError
	switch {
	case errors.As(err, &denied):
		rec.Action = "deny"
		rec.Reasons = auditReasons(denied.Reasons)
		rec.PolicyRevision = denied.PolicyRevision
	case err == nil:
		rec.Action = "allow"
	}
	if res != nil && len(res.Blocked) > 0 {
		rec.Detail["blocked"] = fmt.Sprint(len(res.Blocked) + res.BlockedDropped)
	}
	if res != nil && len(res.Warnings) > 0 {
		rec.Detail["warnings"] = fmt.Sprint(len(res.Warnings))
	}
	if rec.ErrorCode == "internal" {
		m.log.ErrorContext(ctx, "browser action failed", "request_id", rec.RequestID, "session_id", rec.SessionID, "err", err)
	}
	if r != nil {
		r.writeRecords(ctx, rec)
		return
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditWriteTimeout)
	defer cancel()
	if werr := m.deps.Audit.Append(wctx, rec); werr != nil {
		m.log.ErrorContext(ctx, "browser audit write failed", "request_id", rec.RequestID, "err", werr)
	}
}
