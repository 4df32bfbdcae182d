package subprocess

import (
	"container/list"
	"context"
	"github.com/sandgate/sandgate/executors/process"
	"os"
	"sync"
	"time"

	"github.com/sandgate/sandgate/executors"
)

// zygotePool holds at most one zygote per session and at most max in all;
// one is killed after ttl without a run, when its session is released,
// and to make room (the least recently used idle one). A zygote serves
// any number of runs of its session, concurrently.
type zygotePool struct {
	e   *Executor
	max int
	ttl time.Duration
	// program is what the zygote's interpreter runs: zygoteBoot; tests
	// replace it with one that fails.
	program string

	mu     sync.Mutex
	closed bool
	live   map[string]*zygote // by session
	idle   *list.List         // *zygote with no run, least recently used first
	stats  WarmStats          // the zygote side; WarmStats adds it in
	broken int                // zygotes in a row that failed (see done)
	kills  sync.WaitGroup     // killed zygotes not yet reaped
	// draining are zygotes out of the pool whose runs have not ended yet:
	// Close waits for them too.
	draining map[*zygote]struct{}
}

// maxZygoteFailures zygotes in a row that fail turn zygotes off (an
// interpreter that cannot run zygoteBoot, such as a Python older than
// 3.9, or a host where a run cannot be set up): Python runs then use warm
// interpreters. A zygote fails when it dies or times out before it is
// ready, or takes maxZygoteNoStarts runs in a row without starting them.
const maxZygoteFailures = 3

// maxZygoteNoStarts runs in a row that a ready zygote took but could not
// start (each then ran cold) retire it.
const maxZygoteNoStarts = 2

func newZygotePool(e *Executor) *zygotePool {
	return &zygotePool{e: e, max: e.cfg.WarmMax, ttl: e.cfg.WarmIdleTTL, program: zygoteBoot,
		live: map[string]*zygote{}, idle: list.New(), draining: map[*zygote]struct{}{}}
}

// usable reports whether runs should try a zygote.
func (p *zygotePool) usable() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.closed && p.broken < maxZygoteFailures
}

// acquire returns session's zygote for ws, starting one when the session
// has none, or nil when none can be had (the run goes cold). The caller
// must call done.
func (p *zygotePool) acquire(session string, ws *warmSpec) *zygote {
	key := ws.key
	key.limits = process.Rlimits{} // each run sets its own
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.broken >= maxZygoteFailures {
		return nil
	}
	z := p.live[session]
	if z != nil && (z.key != key || closed(z.gone)) {
		if z.key != key {
			p.stats.Mismatched++
		} else {
			p.stats.Died++
		}
		p.dropLocked(z)
		z = nil
	}
	if z == nil {
		if len(p.live) >= p.max && !p.evictLocked() {
			return nil
		}
		var err error
		if z = p.e.idle.claim(session, ws, key); z != nil {
			p.live[session] = z
		} else if z, err = p.e.startZygote(ws, key, session); err != nil {
			p.stats.SpawnFailed++
			p.e.log.Warn("zygote: start failed", "session_id", session, "error", err.Error())
			return nil
		} else {
			p.stats.Spawned++
			p.live[session] = z
		}
	}
	if z.elem != nil {
		p.idle.Remove(z.elem)
		z.elem = nil
		z.timer.Stop()
	}
	z.active++
	return z
}

// done ends one use of z. served says whether z ran the program, healthy
// whether it may serve again, failed whether z itself failed (died or
// timed out before it was ready, as opposed to the run's ctx ending);
// count is false for a Prewarm.
func (p *zygotePool) done(z *zygote, served, healthy, failed, count bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if count {
		if served {
			p.stats.Hits++
		} else {
			p.stats.Misses++
		}
	}
	switch {
	case served:
		z.noStarts = 0
		p.judge(z, false)
	case failed:
		p.judge(z, true)
		healthy = false
	case count && closed(z.ready):
		if z.noStarts++; z.noStarts >= maxZygoteNoStarts {
			p.judge(z, true)
			healthy = false
		}
	}
	if !healthy || closed(z.gone) {
		p.dropLocked(z)
	}
	z.active--
	if z.active > 0 {
		return
	}
	if z.dropped {
		delete(p.draining, z)
		p.killLocked(z)
		return
	}
	z.idleGen++
	gen := z.idleGen
	z.elem = p.idle.PushBack(z)
	z.timer = time.AfterFunc(p.ttl, func() { p.expire(z, gen) })
}

// judge counts z, once, as broken or working: a working zygote resets the
// count of broken ones in a row.
func (p *zygotePool) judge(z *zygote, broken bool) {
	if z.judged {
		return
	}
	z.judged = true
	if !broken {
		p.broken = 0
		return
	}
	if p.broken++; p.broken == maxZygoteFailures {
		p.e.log.Warn("zygote: turned off after repeated failures; python runs use warm interpreters")
	}
}

// count records a run that could not use a zygote.
func (p *zygotePool) miss() {
	p.mu.Lock()
	p.stats.Misses++
	p.mu.Unlock()
}

// dropLocked takes z out of the pool and kills it now, or when its last
// run ends: killing it kills the runs in it.
func (p *zygotePool) dropLocked(z *zygote) {
	if z.dropped {
		return
	}
	z.dropped = true
	if p.live[z.session] == z {
		delete(p.live, z.session)
	}
	if z.elem != nil {
		p.idle.Remove(z.elem)
		z.elem = nil
		z.timer.Stop()
	}
	if z.active == 0 {
		p.killLocked(z)
	} else {
		p.draining[z] = struct{}{}
	}
}

// killLocked kills z. Until close, kills tracks the reaping; after it,
// close waits on the zygotes it dropped itself (a WaitGroup must not be
// added to while it is waited on).
func (p *zygotePool) killLocked(z *zygote) {
	z.kill()
	if p.closed {
		return
	}
	p.kills.Add(1)
	go func() {
		<-z.proc.done
		p.kills.Done()
	}()
}

// evictLocked drops the least recently used idle zygote.
func (p *zygotePool) evictLocked() bool {
	front := p.idle.Front()
	if front == nil {
		return false
	}
	p.stats.Evicted++
	p.dropLocked(front.Value.(*zygote))
	return true
}

// expire drops z after the idle TTL, unless z was used since the timer
// was set (gen is the idle period the timer belongs to).
func (p *zygotePool) expire(z *zygote, gen uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if z.elem != nil && !z.dropped && z.idleGen == gen {
		p.stats.Expired++
		p.dropLocked(z)
	}
}

// died drops z when its socket ended on its own.
func (p *zygotePool) died(z *zygote) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !z.dropped {
		p.stats.Died++
		p.dropLocked(z)
	}
}

// release drops session's zygote and, when no run is using it, waits
// until it is gone. Runs in progress keep it until they end.
func (p *zygotePool) release(ctx context.Context, session string) error {
	p.mu.Lock()
	z := p.live[session]
	if z == nil {
		p.mu.Unlock()
		return nil
	}
	p.stats.Released++
	p.dropLocked(z)
	waitFor := z.active == 0
	p.mu.Unlock()
	if waitFor {
		return z.proc.waitDone(ctx)
	}
	return nil
}

// close kills every zygote and starts no more. It waits until every
// zygote is gone: idle ones at once, ones still running a program once
// that run ends.
func (p *zygotePool) close(ctx context.Context) error {
	p.mu.Lock()
	var dropped []*zygote
	for z := range p.draining {
		dropped = append(dropped, z)
	}
	for _, z := range p.live {
		p.stats.Released++
		dropped = append(dropped, z)
		p.dropLocked(z)
	}
	p.closed = true // after the kills above are tracked: see killLocked
	p.mu.Unlock()
	return waitCtx(ctx, func() {
		p.kills.Wait()
		for _, z := range dropped {
			<-z.proc.done
		}
	})
}

func (p *zygotePool) snapshot() WarmStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.stats
	st.Zygotes = len(p.live)
	return st
}

// runZygote runs a Python program of session in the session's zygote.
// served is false when it did not run there; the caller runs it cold.
func (e *Executor) runZygote(ctx context.Context, session, interp string, ws *os.Root, l launch, lim executors.Limits, rel string, newOut func() *output, timeout time.Duration) (executors.Result, bool, error) {
	spec, err := e.warmSpecFor(executors.LangPython, interp, ws, l, lim)
	if err != nil {
		e.log.Warn("zygote: cannot describe run", "session_id", session, "error", err.Error())
		e.zygotes.miss()
		return executors.Result{}, false, nil
	}
	z := e.zygotes.acquire(session, spec)
	if z == nil {
		e.zygotes.miss()
		return executors.Result{}, false, nil
	}
	res, served, healthy, err := e.runInZygote(ctx, z, rel, l, newOut, timeout)
	failed := !closed(z.ready) && err == nil && !healthy // died, or too slow for zygoteReadyTimeout
	e.zygotes.done(z, served, healthy, failed, true)
	e.idle.kick() // after the run: a pooled zygote's start would slow it down
	return res, served, err
}

// useZygote reports whether runs of lang go to zygotes.
func (e *Executor) useZygote(lang string) bool {
	return lang == executors.LangPython && e.zygotes != nil && e.zygotes.usable()
}

// prewarmZygote starts session's zygote for runs like ws and waits until
// it is ready.
func (e *Executor) prewarmZygote(ctx context.Context, session string, ws *warmSpec) error {
	z := e.zygotes.acquire(session, ws)
	if z == nil {
		return nil
	}
	ok, err := z.awaitReady(ctx, zygoteReadyTimeout)
	e.zygotes.done(z, false, true, !ok && err == nil, false)
	return err
}
