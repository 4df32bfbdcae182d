package browser

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/errcode"
)

// Router is one session's browser: at most one live instance, on one
// backend. Its lock (a one-slot semaphore, so that waiting can be
// cancelled) serialises the session's actions, and guards every field
// below it.
type Router struct {
	m         *Manager
	sessionID string
	sem       chan struct{}
	backend   atomic.Pointer[string] // the live instance's backend, for Live

	inst     *instance
	rec      *recorder       // the session's decision records, across instances
	held     []*audit.Record // allow records of the running action, written with its record
	lastUsed time.Time
	released bool // forgotten by the manager; a waiter must get a new router
}

func newRouter(m *Manager, sessionID string) *Router {
	return &Router{m: m, sessionID: sessionID, sem: make(chan struct{}, 1), lastUsed: time.Now(),
		rec: newRecorder(m.deps.Audit, m.log)}
}

func (r *Router) acquire(ctx context.Context) error {
	select {
	case r.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *Router) tryAcquire() bool {
	select {
	case r.sem <- struct{}{}:
		return true
	default:
		return false
	}
}

func (r *Router) release() { <-r.sem }

// writeRecords writes the action's record, durably, with every denial
// queued so far; then the allow records the action held, in the background
// (see recorder). The caller holds the lock; nothing reaches the client
// before this returns.
func (r *Router) writeRecords(ctx context.Context, action *audit.Record) {
	held := r.held
	r.held = nil
	var wg sync.WaitGroup
	wg.Go(func() { r.rec.write(action) })
	wg.Go(func() {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditWriteTimeout)
		defer cancel()
		r.rec.flush(fctx)
	})
	wg.Wait()
	for _, rec := range held {
		r.rec.append(rec, false)
	}
	r.rec.quiet()
}

// retire ends the router for good: its browser is closed and its records
// written. A waiter that acquires it afterwards gets a new router. The
// caller holds the lock.
func (r *Router) retire(ctx context.Context) {
	r.released = true
	r.closeInstance()
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditWriteTimeout)
	defer cancel()
	r.rec.drain(dctx)
}

// closeInstance ends the live instance, if any. The caller holds the lock.
func (r *Router) closeInstance() {
	if r.inst == nil {
		return
	}
	in := r.inst
	r.inst = nil
	r.backend.Store(nil)
	in.close()
	if in.backend == BackendExternal {
		r.m.releaseExternal()
	}
}

// ensure returns a live instance on backend: the current one, or a new one
// after closing one on the other backend (switching closes the other
// first, so the session never has two) or one that crashed. The caller
// holds the lock.
func (r *Router) ensure(ctx context.Context, backend string) (in *instance, started bool, err error) {
	if r.inst != nil && r.inst.backend == backend && r.inst.responsive() {
		return r.inst, false, nil
	}
	if r.inst != nil {
		if !r.inst.alive() {
			r.m.log.Warn("browser died, restarting", "session_id", r.sessionID, "backend", r.inst.backend)
		}
		r.closeInstance()
	}
	switch backend {
	case BackendExternal:
		if err := r.m.reserveExternal(); err != nil {
			return nil, false, err
		}
		in, err = r.m.startExternal(ctx, r.sessionID, r.rec)
		if err != nil {
			r.m.releaseExternal()
		}
	default:
		in, err = r.m.startAIO(ctx, r.sessionID, r.rec)
	}
	if err != nil {
		return nil, false, startError(ctx, err)
	}
	r.inst = in
	b := backend
	r.backend.Store(&b)
	return in, true, nil
}

// startError classifies a failed start: cancellation stays cancellation,
// coded errors keep their code, anything else is the backend being
// unavailable (the client may retry; the log has the cause).
func startError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return cancelled(ctx.Err())
	}
	var ce *errcode.Error
	if errors.As(err, &ce) {
		return err
	}
	return errors.Join(ErrUnavailable, err)
}

// prechecker is an action with a policy check that needs no browser. The
// verdict, if any, is handed to the instance's guard (see guard.expect).
type prechecker interface {
	precheck(ctx context.Context, g *guard, rec *audit.Record) (*typedURL, error)
}

// run executes one action with the lock held.
func (r *Router) run(ctx context.Context, req Request, act action, backend string, rec *audit.Record) (*Result, error) {
	defer func() { r.lastUsed = time.Now() }()
	res := &Result{Action: req.Action, Backend: backend, Blocked: []Blocked{}}
	if _, ok := act.(closeAction); ok {
		closed := r.inst != nil
		r.closeInstance()
		res.Data = CloseResult{Closed: closed}
		return res, nil
	}
	// An action that can be refused without a browser (a navigation to a
	// URL the policy denies) is refused before one is started.
	var typed *typedURL
	if pc, ok := act.(prechecker); ok {
		g := newGuard(&r.m.cfg, r.m.deps.Policy, r.m.resolver, r.rec, r.sessionID, backend)
		g.begin(req.RequestID)
		var err error
		typed, err = pc.precheck(ctx, g, rec)
		st := g.end()
		r.held = append(r.held, st.allowed...)
		res.Warnings = st.warnings
		if err != nil {
			res.Blocked = st.blocked
			return res, err
		}
	}
	in, started, err := r.ensure(ctx, backend)
	if err != nil {
		return nil, err
	}
	if typed != nil {
		in.guard.expect(typed.raw, typed.v)
	}
	res.Started = started
	in.guard.begin(req.RequestID)
	timeout := act.timeout(&r.m.cfg)
	actx, cancel := context.WithTimeout(in.tabCtx, timeout)
	stop := context.AfterFunc(ctx, cancel)
	data, err := act.do(actx, &env{m: r.m, in: in, req: req, rec: rec})
	stop()
	cancel()
	st := in.guard.end()
	r.held = append(r.held, st.allowed...)
	res.Blocked, res.BlockedDropped = st.blocked, st.dropped
	res.Warnings = mergeWarnings(res.Warnings, st.warnings)
	if res.Blocked == nil {
		res.Blocked = []Blocked{}
	}
	if err != nil {
		return res, r.actionError(ctx, actx, in, err)
	}
	res.Data = data
	return res, nil
}

// mergeWarnings adds the action's warnings to the typed URL's, without
// repeating the navigation the browser loaded on the typed URL's decision.
func mergeWarnings(typed, action []Warning) []Warning {
	a := &actionState{warnings: typed}
	for _, w := range action {
		a.warn(w)
	}
	return a.warnings
}

// actionError turns a failed action's error into a coded one: the caller
// went away, the deadline passed, the browser died, or the action's own
// (already coded) error.
func (r *Router) actionError(ctx, actx context.Context, in *instance, err error) error {
	var ce *errcode.Error
	switch {
	case ctx.Err() != nil:
		return cancelled(ctx.Err())
	case !in.alive():
		return errors.Join(ErrCrashed, err)
	case errors.As(err, &ce):
		return err
	case errors.Is(actx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded):
		return errors.Join(ErrTimeout, err)
	}
	return err
}

func cancelled(err error) error { return errors.Join(ErrCancelled, err) }
