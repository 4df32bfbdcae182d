package docker

import (
	"context"
	"slices"
	"sync"
	"time"
)

// warmPool keeps, for sessions that run repeatedly, their next containers
// prepared: created, attached and started, each one's boot step waiting
// on stdin for a program. A run of the same session with the same shape
// (image, workspace, identity, limits) takes one and skips container
// start-up.
//
// A container serves one run (a fresh container per run is the isolation
// contract), so a session sending runs back to back would otherwise wait
// for a container start each time. The pool therefore holds up to
// Config.WarmPerSession containers per session, as many as the session's
// recent run rate needs (want), and tops a bursting session up as soon as
// a run has its container, concurrently with that run (replenish).
//
// A warm container is bound to one session: it is only ever handed to that
// session's runs, it mounts only that session's workspace and runs as that
// session's uid. At most Config.WarmMax exist at once across sessions; when
// that cap is reached a session without any takes one from the session
// that holds the most (evict), so one busy session cannot hold every
// session's first warm container. One is removed when it serves its run,
// when the session is released, when it has waited Config.WarmIdle, when
// its shape no longer matches the session's runs, and at Close.
type warmPool struct {
	e *Executor

	mu     sync.Mutex
	slots  map[string][]*warmSlot // by session id, oldest first
	total  int                    // len of every list in slots
	closed bool
	// seen remembers each session's runs: how many (a container is
	// prepared only once a session has had Config.WarmAfter runs: a
	// one-off session would otherwise pay for a second container start
	// nobody uses, competing with the next session's run for the engine;
	// fresh sessions through the gateway measured 1.12x docker run with a
	// container prepared after every run), when it last ran, and whether
	// it sends runs back to back, which sizes its share of the pool.
	seen map[string]seenEntry
	// prep is a moving average of how long preparing a container takes
	// on this engine and runtime (runsc's start costs more than runc's).
	prep time.Duration
}

type seenEntry struct {
	runs int
	last time.Time // when the session's last run had its container
	// A gap is the time from a run having its container to the session's
	// next run arriving: the run itself plus the caller's pause. A wait
	// for a container is not part of it, or a session kept waiting would
	// look slow and never get more. short is a moving average of the gaps
	// shorter than a container start (runs back to back), burst when the
	// last of those was seen.
	short time.Duration
	burst time.Time
}

// seenMax bounds the sessions remembered for the second-run rule; past it,
// entries older than seenTTL are forgotten.
const (
	seenMax = 4096
	seenTTL = 30 * time.Minute
)

// prepGuess stands for the preparation time until one was measured: runc's
// start on a loaded 2-core machine.
const prepGuess = 300 * time.Millisecond

// record notes a run of session that arrived at arrived and has its
// container now, and returns what is known of the session. Call with p.mu
// held.
func (p *warmPool) record(session string, arrived time.Time) seenEntry {
	now := time.Now()
	e, known := p.seen[session]
	if !known && len(p.seen) >= seenMax {
		for id, old := range p.seen {
			if now.Sub(old.last) > seenTTL {
				delete(p.seen, id)
			}
		}
	}
	if gap := arrived.Sub(e.last); known && gap < p.prepTime() {
		e.short = ewma(e.short, max(gap, time.Millisecond))
		e.burst = now
	}
	e.runs++
	e.last = now
	if known || len(p.seen) < seenMax {
		p.seen[session] = e
	}
	return e
}

// ewma folds sample into avg, weighing the newest sample by one half.
func ewma(avg, sample time.Duration) time.Duration {
	if avg <= 0 {
		return sample
	}
	return (avg + sample) / 2
}

// bursting reports whether the session has sent runs back to back (a run
// arriving sooner after the previous one had its container than a
// container takes to start) within the last Config.WarmIdle. Agents work
// in bursts (a few runs, then a model call): a burst's first run must
// find the containers ready. Call with p.mu held.
func (p *warmPool) bursting(s seenEntry) bool {
	return !s.burst.IsZero() && time.Since(s.burst) <= p.e.cfg.WarmIdle
}

// want is how many warm containers the session should hold: enough that a
// new one can be prepared in the time its runs take to use them. A
// session that pauses between runs longer than a container takes to start
// needs one; a bursting one more, up to Config.WarmPerSession. Call with
// p.mu held.
func (p *warmPool) want(s seenEntry) int {
	if !p.bursting(s) {
		return 1
	}
	prep := p.prepTime()
	n := int((prep + s.short - 1) / s.short)
	return min(max(n, 1), p.e.cfg.WarmPerSession)
}

func (p *warmPool) prepTime() time.Duration {
	if p.prep <= 0 {
		return prepGuess
	}
	return p.prep
}

// observePrep records how long one container preparation took.
func (p *warmPool) observePrep(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.prep <= 0 {
		p.prep = d
		return
	}
	p.prep = (3*p.prep + d) / 4
}

// warmSlot is one warm container, possibly still being prepared.
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
	return &warmPool{e: e, slots: map[string][]*warmSlot{}, seen: map[string]seenEntry{}}
}

func (p *warmPool) enabled() bool { return p.e.cfg.WarmMax > 0 }

// replenish records a run of session, which arrived at arrived and has
// its container now, and tops up the session's warm containers of shape
// sh to what its pace wants. Nothing is prepared before the session's
// Config.WarmAfter-th run, nor once the pool is closed or full.
//
// A session sending runs back to back gets its containers started at
// once, alongside the run: its next run may come before a container
// started after this one could be ready. A session that pauses between
// runs gets its container after the run (replenish reports that the
// caller must call topUp then): a container start alongside a run slows
// the run down on a small machine (a warm print(1) took 85-105 ms alone
// and ~365 ms next to a container start, 2 cores, loaded), and the pause
// leaves time enough to start one afterwards.
func (p *warmPool) replenish(session string, arrived time.Time, sh shape) (later bool) {
	if !p.enabled() {
		return false
	}
	p.mu.Lock()
	seen := p.record(session, arrived)
	if p.closed || seen.runs < p.e.cfg.WarmAfter {
		p.mu.Unlock()
		return false
	}
	p.dropMismatched(session, sh)
	if !p.bursting(seen) {
		p.mu.Unlock()
		return true
	}
	start := p.grow(session, sh, p.want(seen))
	p.mu.Unlock()
	p.start(session, start)
	return false
}

// topUp prepares, after a run of a session that pauses between runs, the
// warm containers replenish left for later.
func (p *warmPool) topUp(session string, sh shape) {
	p.mu.Lock()
	seen, known := p.seen[session]
	if p.closed || !known { // released while the run was in flight
		p.mu.Unlock()
		return
	}
	p.dropMismatched(session, sh)
	start := p.grow(session, sh, p.want(seen))
	p.mu.Unlock()
	p.start(session, start)
}

// grow adds slots of shape sh to session until it holds n, as far as the
// global cap allows, and returns them for start. Call with p.mu held.
func (p *warmPool) grow(session string, sh shape, n int) []*warmSlot {
	var added []*warmSlot
	for have := len(p.slots[session]); have < n; have++ {
		if p.total >= p.e.cfg.WarmMax && (have > 0 || !p.evict(session)) {
			break
		}
		s := &warmSlot{shape: sh, ready: make(chan struct{})}
		p.slots[session] = append(p.slots[session], s)
		p.total++
		added = append(added, s)
	}
	return added
}

// start prepares the containers of slots in the background.
func (p *warmPool) start(session string, slots []*warmSlot) {
	for _, s := range slots {
		p.e.goBackground(func() { p.fill(session, s) })
	}
}

// dropMismatched removes session's containers whose shape is not sh: the
// session's runs changed limits or identity, and those will not serve
// them. Call with p.mu held.
func (p *warmPool) dropMismatched(session string, sh shape) {
	for _, s := range slices.Clone(p.slots[session]) {
		if s.shape != sh {
			p.unlink(session, s)
			p.markDead(s)
		}
	}
}

// evict makes room for the first warm container of session by removing
// the newest one of the session holding the most, if that one holds more
// than one. Call with p.mu held.
func (p *warmPool) evict(session string) bool {
	victim, most := "", 1
	for id, list := range p.slots {
		if id != session && len(list) > most {
			victim, most = id, len(list)
		}
	}
	if victim == "" {
		return false
	}
	s := p.slots[victim][most-1]
	p.unlink(victim, s)
	p.markDead(s)
	return true
}

// unlink removes s from session's list. It reports whether s was there.
// Call with p.mu held.
func (p *warmPool) unlink(session string, s *warmSlot) bool {
	list := p.slots[session]
	i := slices.Index(list, s)
	if i < 0 {
		return false
	}
	list = slices.Delete(list, i, i+1)
	if len(list) == 0 {
		delete(p.slots, session)
	} else {
		p.slots[session] = list
	}
	p.total--
	if s.idle != nil {
		s.idle.Stop()
	}
	return true
}

// fill prepares s's container.
func (p *warmPool) fill(session string, s *warmSlot) {
	t0 := time.Now()
	b, err := p.e.prepare(p.e.life, s.shape, p.e.labels(session, ""))
	if err != nil {
		p.e.log.Debug("warm container", "session_id", session, "err", err.Error())
	} else {
		p.observePrep(time.Since(t0))
	}
	p.mu.Lock()
	s.box, s.prepared = b, true
	dispose := s.dead && b != nil
	watch := false
	switch {
	case b == nil:
		p.unlink(session, s) // let a later run try again
	case !s.dead && slices.Contains(p.slots[session], s):
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

// take hands one of session's warm containers to a run of shape sh: a
// prepared one when there is one, else the one whose preparation started
// first (it is further along than a fresh start would be). It returns nil
// when the session has none of that shape (those of another are removed),
// the one waited for failed, or ctx ended while it was being prepared.
func (p *warmPool) take(ctx context.Context, session string, sh shape) *box {
	p.mu.Lock()
	p.dropMismatched(session, sh)
	s := p.pick(session)
	if s == nil {
		p.mu.Unlock()
		return nil
	}
	p.unlink(session, s)
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

// pick chooses the slot take hands out, discarding prepared containers
// that died while waiting. Call with p.mu held.
func (p *warmPool) pick(session string) *warmSlot {
	for _, s := range slices.Clone(p.slots[session]) {
		if s.prepared && s.box != nil && s.box.exit.exited() {
			p.unlink(session, s)
			p.markDead(s)
		}
	}
	list := p.slots[session]
	for _, s := range list {
		if s.prepared {
			return s
		}
	}
	if len(list) > 0 {
		return list[0]
	}
	return nil
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
	if p.unlink(session, s) {
		p.markDead(s)
	}
}

// release removes session's warm containers and forgets its pace.
func (p *warmPool) release(session string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.seen, session)
	p.dropSession(session)
}

// dropSession removes every warm container of session. Call with p.mu
// held.
func (p *warmPool) dropSession(session string) {
	for _, s := range slices.Clone(p.slots[session]) {
		p.unlink(session, s)
		p.markDead(s)
	}
}

// closeAll removes every warm container and refuses new ones.
func (p *warmPool) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for session := range p.slots {
		p.dropSession(session)
	}
}

// size returns the number of warm containers (prepared or not).
func (p *warmPool) size() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.total
}

// sessionSize returns the number of session's warm containers.
func (p *warmPool) sessionSize(session string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.slots[session])
}

// waitReady waits until every warm container session has now is prepared,
// for tests and benchmarks; false when none is ready then.
func (p *warmPool) waitReady(ctx context.Context, session string) bool {
	p.mu.Lock()
	list := slices.Clone(p.slots[session])
	p.mu.Unlock()
	ok := false
	for _, s := range list {
		select {
		case <-s.ready:
			ok = ok || s.box != nil
		case <-ctx.Done():
			return false
		}
	}
	return ok
}
