package docker

import (
	"context"
	"sync"
	"time"
)

// warmPool keeps, for sessions that just ran, their next container
// prepared: created, attached and started, its boot step waiting on stdin
// for a program. The next run of the same session with the same shape
// (image, workspace, identity, limits) skips container start-up.
//
// A warm container is bound to one session: it is only ever handed to
// that session's next run, it mounts only that session's workspace and
// runs as that session's uid. At most Config.WarmMax exist at once. One is
// removed when it serves its run, when the session is released, when it
// has waited Config.WarmIdle, when its shape no longer matches, and at
// Close.
type warmPool struct {
	e *Executor

	mu     sync.Mutex
	slots  map[string]*warmSlot // by session id
	closed bool
	// seen counts each session's runs (and when it last ran). A container
	// is prepared only once a session has had Config.WarmAfter runs: a
	// one-off session would otherwise pay for a second container start
	// nobody uses, competing with the next session's run for the engine
	// (fresh sessions through the gateway measured 1.12x docker run with
	// a container prepared after every run).
	seen map[string]seenEntry
}

type seenEntry struct {
	runs int
	last time.Time
}

// seenMax bounds the sessions remembered for the second-run rule; past it,
// entries older than seenTTL are forgotten.
const (
	seenMax = 4096
	seenTTL = 30 * time.Minute
)

// repeat records a run of session and reports whether the session has now
// had enough runs to be worth a warm container. Call with p.mu held.
func (p *warmPool) repeat(session string) bool {
	now := time.Now()
	e, known := p.seen[session]
	if !known && len(p.seen) >= seenMax {
		for id, old := range p.seen {
			if now.Sub(old.last) > seenTTL {
				delete(p.seen, id)
			}
		}
	}
	e.runs++
	e.last = now
	if known || len(p.seen) < seenMax {
		p.seen[session] = e
	}
	return e.runs >= p.e.cfg.WarmAfter
}

// warmSlot is one session's warm container, possibly still being prepared.
type warmSlot struct {
	shape shape
	ready chan struct{} // closed when preparation ended

	// Guarded by warmPool.mu.
	box      *box // nil while preparing or when preparation failed
	prepared bool // preparation ended
	dead     bool // nobody will take it: dispose of it once prepared
	idle     *time.Timer
}

func newWarmPool(e *Executor) *warmPool {
	return &warmPool{e: e, slots: map[string]*warmSlot{}, seen: map[string]seenEntry{}}
}

func (p *warmPool) enabled() bool { return p.e.cfg.WarmMax > 0 }

// offer starts preparing session's next container, unless this was the
// session's first run, it has one, the pool is full or closed.
func (p *warmPool) offer(session string, sh shape) {
	if !p.enabled() {
		return
	}
	p.mu.Lock()
	if !p.repeat(session) || p.closed || p.slots[session] != nil || len(p.slots) >= p.e.cfg.WarmMax {
		p.mu.Unlock()
		return
	}
	s := &warmSlot{shape: sh, ready: make(chan struct{})}
	p.slots[session] = s
	p.mu.Unlock()
	p.e.goBackground(func() { p.fill(session, s) })
}

// fill prepares s's container.
func (p *warmPool) fill(session string, s *warmSlot) {
	b, err := p.e.prepare(p.e.life, s.shape, p.e.labels(session, ""))
	if err != nil {
		p.e.log.Debug("warm container", "session_id", session, "err", err.Error())
	}
	p.mu.Lock()
	s.box, s.prepared = b, true
	dispose := s.dead && b != nil
	watch := false
	switch {
	case b == nil && p.slots[session] == s:
		delete(p.slots, session) // let a later run try again
	case !s.dead && p.slots[session] == s:
		s.idle = time.AfterFunc(p.e.cfg.WarmIdle, func() { p.expire(session, s) })
		watch = true
	}
	p.mu.Unlock()
	close(s.ready)
	if dispose {
		p.e.discard(b)
	}
	if watch {
		go p.watchDeath(session, s, b)
	}
}

// watchDeath removes s as soon as its container exits while it waits for
// its run (killed from outside, or stopped with its engine): otherwise it
// stays, exited, until the session's next run or WarmIdle (issue 21's
// soak counted them after an engine restart). A removal the engine cannot
// take now is retried once it answers again (Executor.remove).
func (p *warmPool) watchDeath(session string, s *warmSlot, b *box) {
	select {
	case <-b.exit.done:
		p.expire(session, s)
	case <-p.e.life.Done():
	}
}

// take hands session's warm container to a run of shape sh. It returns nil
// when there is none, it does not match (it is then removed), it died, or
// ctx ended while it was still being prepared.
func (p *warmPool) take(ctx context.Context, session string, sh shape) *box {
	p.mu.Lock()
	s := p.slots[session]
	if s == nil {
		p.mu.Unlock()
		return nil
	}
	delete(p.slots, session)
	if s.idle != nil {
		s.idle.Stop()
	}
	if s.shape != sh {
		p.markDead(s)
		p.mu.Unlock()
		return nil
	}
	p.mu.Unlock()

	select {
	case <-s.ready:
	case <-ctx.Done():
		p.mu.Lock()
		p.markDead(s)
		p.mu.Unlock()
		return nil
	}
	if s.box == nil {
		return nil
	}
	if s.box.exit.exited() {
		p.e.discard(s.box)
		return nil
	}
	return s.box
}

// markDead gives up on s: a prepared container is discarded now, one still
// being prepared by fill once it is. Call with p.mu held.
func (p *warmPool) markDead(s *warmSlot) {
	if s.dead {
		return
	}
	s.dead = true
	if s.prepared && s.box != nil {
		p.e.discard(s.box)
	}
}

func (p *warmPool) expire(session string, s *warmSlot) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.slots[session] == s {
		delete(p.slots, session)
		p.markDead(s)
	}
}

// release removes session's warm container.
func (p *warmPool) release(session string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.seen, session)
	if s := p.slots[session]; s != nil {
		delete(p.slots, session)
		if s.idle != nil {
			s.idle.Stop()
		}
		p.markDead(s)
	}
}

// closeAll removes every warm container and refuses new ones.
func (p *warmPool) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for session, s := range p.slots {
		delete(p.slots, session)
		if s.idle != nil {
			s.idle.Stop()
		}
		p.markDead(s)
	}
}

// size returns the number of warm slots (prepared or not).
func (p *warmPool) size() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.slots)
}

// waitReady waits until session's warm container is prepared, for tests
// and benchmarks; false when there is none.
func (p *warmPool) waitReady(ctx context.Context, session string) bool {
	p.mu.Lock()
	s := p.slots[session]
	p.mu.Unlock()
	if s == nil {
		return false
	}
	select {
	case <-s.ready:
		return s.box != nil
	case <-ctx.Done():
		return false
	}
}
