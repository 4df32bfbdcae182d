package aio

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sandgate/sandgate/executors"
)

// Executor runs code in the session's pooled AIO sandbox. It implements
// executors.Executor, executors.Closer and executors.SessionReleaser, and
// offers InstanceInfo (GET /v1/sessions/{id}) and BrowserCDP (the browser
// router). It is safe for concurrent use.
type Executor struct {
	cfg      PoolConfig
	prologue executors.Prologue
	pool     *pool
	be       backend
	cdp      *cdpForwarder
	closed   atomic.Bool
}

// Interface guards.
var (
	_ executors.Executor        = (*Executor)(nil)
	_ executors.Closer          = (*Executor)(nil)
	_ executors.SessionReleaser = (*Executor)(nil)
	_ executors.KernelHost      = (*Executor)(nil)
)

// New builds the executor with the local Docker backend. It fails only on a
// bad config or an unusable state directory: an engine that is down is not
// an error here (Available reports it; adoption of a previous gateway's
// containers and starting instances ahead happen once it answers).
func New(ctx context.Context, cfg PoolConfig) (*Executor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("aio: config: %w", err)
	}
	cfg = cfg.withDefaults()
	if directMode(cfg.Network) && cfg.MinInstances > 0 {
		cfg.Logger.Warn("aio: not root: instances are made for their session with the workspace mounted by the engine, none started ahead (min_instances 0)",
			"min_instances", cfg.MinInstances)
		cfg.MinInstances = 0
	}
	be, err := newLocalBackend(cfg)
	if err != nil {
		return nil, err
	}
	return newExecutor(ctx, cfg, be), nil
}

func newExecutor(ctx context.Context, cfg PoolConfig, be backend) *Executor {
	e := &Executor{cfg: cfg, be: be, prologue: executors.Prologue{Kind: executors.KindAIO,
		UID: cfg.SandboxUID, GID: cfg.SandboxGID, Timeout: cfg.DefaultTimeout, Limits: cfg.Limits}}
	e.pool = newPool(cfg, be)
	e.cdp = newCDPForwarder(e.pool)
	e.pool.start(ctx)
	cfg.Logger.Info("aio executor ready", "image", cfg.Image, "network", cfg.Network,
		"min_instances", cfg.MinInstances, "max_instances", cfg.MaxInstances)
	return e
}

// Kind implements executors.Executor.
func (e *Executor) Kind() executors.Kind { return executors.KindAIO }

// Available implements executors.Executor: the engine answers and the
// image exists. A full pool is not unavailability (see ErrPoolExhausted).
func (e *Executor) Available(ctx context.Context) error {
	if e.closed.Load() {
		return unavailable("executor closed", nil)
	}
	return e.be.available(ctx)
}

// Execute implements executors.Executor. The run goes to the session's
// instance, which it shares with the session's other concurrent runs.
func (e *Executor) Execute(ctx context.Context, spec executors.Spec) (executors.Result, error) {
	spec, err := e.prologue.Resolve(spec)
	if err != nil {
		return executors.Result{}, err
	}
	if err := e.Capabilities().Check(executors.KindAIO, spec); err != nil {
		return executors.Result{}, err // bridge mode: the image's server enforces no per-run obligation
	}
	if err := executors.CheckEgress(executors.KindAIO, e.Capabilities(), spec); err != nil {
		return executors.Result{}, err
	}
	if spec.SessionID == "" {
		return executors.Result{}, errors.New("aio: a run needs a session id: the instance belongs to the session")
	}
	if !e.Stages(spec) {
		if err := releaseNow(ctx, spec.Release); err != nil {
			return executors.Result{}, err
		}
		spec.Release = nil
	}
	ws := Workspace{Dir: spec.WorkspaceDir, UID: spec.UID, GID: spec.GID, Root: spec.Layout.Root, Home: homeOf(spec.Layout)}
	for attempt := 1; ; attempt++ {
		l, err := e.acquire(ctx, spec.SessionID, ws)
		if err != nil {
			return executors.Result{}, err
		}
		if spec.Stateful {
			return e.cell(ctx, l, spec)
		}
		res, err := e.runOn(ctx, l, spec)
		// A run its instance never received (the connection to sandboxd
		// was refused: the container died or the engine restarted since
		// the last run) is run once more on a new instance instead of
		// failing: nothing of it ran. Each session meets its dead instance
		// this way after an engine restart, and failing each of those
		// runs would also hold the executor down (manager: runs that keep
		// failing while the probe passes).
		if attempt == 1 && errors.Is(err, errNotDelivered) && ctx.Err() == nil {
			e.cfg.Logger.Warn("aio: the instance was unreachable before the run; running it on a new one",
				"session_id", spec.SessionID, "request_id", spec.RequestID, "err", err.Error())
			continue
		}
		return res, err
	}
}

// Stages implements executors.Stager: sandboxd (none mode) holds a run
// at its exec until the manager's write-ahead record is committed; a
// kernel's cell, and the image's own server in bridge mode, wait for it
// before they are sent.
func (e *Executor) Stages(spec executors.Spec) bool {
	return e.cfg.Network == NetworkNone && !spec.Stateful
}

// runOn runs spec on the leased instance and releases it, recycling it
// when the run's outcome is unknown.
func (e *Executor) runOn(ctx context.Context, l *lease, spec executors.Spec) (executors.Result, error) {
	grant, endEgress, err := e.startEgress(ctx, l, spec)
	if err != nil {
		l.release(false)
		return executors.Result{}, err
	}
	res, err := run(ctx, l.client(), runRequest{
		dir: workspaceMount, cwd: spec.Layout.Dir(), id: spec.RequestID, lang: spec.Language, code: spec.Code, timeout: spec.Timeout, margin: DefaultClientMargin,
		limits: spec.Limits, extended: e.cfg.Network == NetworkNone, output: spec.Output, egress: grant, release: spec.Release,
	})
	endEgress()
	broken := errors.Is(err, errUnknownOutcome)
	l.release(broken)
	if broken {
		e.cfg.Logger.Warn("aio: run outcome unknown; instance recycled", "session_id", spec.SessionID, "request_id", spec.RequestID, "err", err.Error())
		return executors.Result{}, unavailable("sandbox did not deliver the run's outcome", err)
	}
	return res, err
}

// acquire gets the session's instance, recycling it first when it serves
// another workspace or identity than the run's (a session's workspace does
// not move, so this only happens after its directory was recreated).
func (e *Executor) acquire(ctx context.Context, session string, ws Workspace) (*lease, error) {
	for range 2 {
		l, err := e.pool.acquire(ctx, binding{session: session, ws: ws})
		if err != nil {
			return nil, err
		}
		if l.in.ws == ws {
			return l, nil
		}
		l.release(true)
	}
	return nil, unavailable("the session's instance serves another workspace", nil)
}

// ReleaseSession implements executors.SessionReleaser: the session's
// instance is destroyed, at once when idle, when its last run ends
// otherwise (DELETE /v1/sessions/{id}). A session that is deleted has no
// use for a warm container, and its workspace may be purged next.
func (e *Executor) ReleaseSession(_ context.Context, sessionID string) error {
	e.pool.releaseSession(sessionID)
	return nil
}

// InstanceInfo describes the session's instance, if it has one.
func (e *Executor) InstanceInfo(sessionID string) (Info, bool) {
	return e.pool.info(sessionID)
}

// Client returns the API client of the session's instance, if it has a
// ready one: for tools that speak the AIO API to the session's sandbox
// directly (the benchmarks' baseline, an operator's debugging). Calls made
// with it do not hold the instance; the idle reaper may remove it.
func (e *Executor) Client(sessionID string) (*Client, bool) {
	e.pool.mu.Lock()
	defer e.pool.mu.Unlock()
	in := e.pool.bySession[sessionID]
	if in == nil || in.client == nil || in.state == stateDestroying {
		return nil, false
	}
	return in.client, true
}

// Close implements executors.Closer: it removes every instance (unless
// PoolConfig.KeepOnClose), waiting for the removals under ctx.
func (e *Executor) Close(ctx context.Context) error {
	if e.closed.Swap(true) {
		return nil
	}
	e.cdp.close()
	err := e.pool.close(ctx, e.cfg.KeepOnClose)
	e.be.close(e.cfg.KeepOnClose || err != nil)
	return err
}

// abandon stops the executor as a crash would: containers keep running.
// Tests use it to show that the next executor adopts them.
func (e *Executor) abandon() {
	e.closed.Store(true)
	e.cdp.close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = e.pool.close(ctx, true)
	e.be.close(true)
}
