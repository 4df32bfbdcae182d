package browser

import (
	"context"
	"errors"
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
	rec      *recorder // the session's decision records, across instances
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
	if r.inst != nil && r.inst.backend == backend && r.inst.responsive(ctx) {
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

// prechecker is an action with a policy check that needs no browser.
type prechecker interface {
	precheck(ctx context.Context, g *guard, rec *audit.Record) error
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
	if pc, ok := act.(prechecker); ok {
		g := newGuard(&r.m.cfg, r.m.deps.Policy, r.m.resolver, r.rec, r.sessionID, backend)
		g.begin(req.RequestID)
		err := pc.precheck(ctx, g, rec)
		st := g.end()
		if err != nil {
			fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), auditWriteTimeout)
			r.rec.flush(fctx)
			fcancel()
			res.Blocked = st.blocked
			return res, err
		}
	}
	in, started, err := r.ensure(ctx, backend)
	if err != nil {
		return nil, err
	}
	res.Started = started
	in.guard.begin(req.RequestID)
	timeout := act.timeout(&r.m.cfg)
	actx, cancel := context.WithTimeout(in.tabCtx, timeout)
	stop := context.AfterFunc(ctx, cancel)
	data, err := act.do(actx, &env{m: r.m, in: in, req: req, rec: rec})
	stop()
	cancel()
	// Decisions of the requests the action caused are durable before the
	// action's own record and response.
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), auditWriteTimeout)
	r.rec.flush(fctx)
	fcancel()
	st := in.guard.end()
	res.Blocked, res.BlockedDropped = st.blocked, st.dropped
	if res.Blocked == nil {
		res.Blocked = []Blocked{}
	}
	if err != nil {
		return res, r.actionError(ctx, actx, in, err)
	}
	res.Data = data
	return res, nil
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
