package aio

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandgate/sandgate/errcode"
)

// ErrPoolExhausted is wrapped by the error of a run that found every
// instance busy for PoolConfig.AcquireTimeout. It carries the stable code
// pool_exhausted (HTTP 503). It deliberately does not wrap
// executors.ErrUnavailable: the executor is healthy, only busy, so the
// manager must neither mark it unavailable nor fall back.
var ErrPoolExhausted = errcode.New(errcode.PoolExhausted, "every AIO sandbox instance is busy; retry later")

// errNoInstance is returned by acquireExisting for a session without one.
var errNoInstance = errors.New("no instance for this session")

// instState is an instance's place in IDLE → ACQUIRING → BUSY (and
// DESTROYING, once it is on its way out).
type instState int

const (
	stateIdle instState = iota
	stateAcquiring
	stateBusy
	stateDestroying
)

func (s instState) String() string {
	return [...]string{"idle", "acquiring", "busy", "destroying"}[s]
}

// instance is one container slot of the pool.
type instance struct {
	slot     string
	session  string // "" while unbound
	ws       Workspace
	state    instState
	refs     int // leases held (BUSY while > 0)
	uses     int // leases handed out over the instance's life
	created  time.Time
	lastUsed time.Time
	adopted  bool
	broken   bool // outcome of a run unknown, or its session deleted: recycle
	h        *handle
	client   *Client
	ready    chan struct{} // closed when ACQUIRING ends
	err      error         // why ACQUIRING failed
	cdpToken string
}

// pool is the instance state machine. Every transition happens under mu;
// the slow work (creating, binding, destroying containers) happens outside
// it, with the instance marked so that nobody else starts the same work:
// concurrent acquires for one session find the ACQUIRING mark set by the
// first and wait for it (the seed's TOCTOU fix), so they create exactly
// one container.
type pool struct {
	cfg PoolConfig
	be  backend
	log *slog.Logger

	mu        sync.Mutex
	bySession map[string]*instance
	unbound   map[string]*instance // started ahead, by slot (IDLE or ACQUIRING)
	all       map[string]*instance // every slot in use, DESTROYING included
	changed   chan struct{}        // closed and replaced at every transition
	closed    bool
	adopted   bool
	// slotWaiters counts acquires waiting for a free slot: each may have
	// one eviction under way, no more.
	slotWaiters int

	life    context.Context
	stop    context.CancelFunc
	kickCh  chan struct{}
	bg      sync.WaitGroup
	creates atomic.Int64 // containers created (tests and metrics)
	now     func() time.Time
	// lastBind is when a session last took an instance it did not
	// have: demand, which keeps one instance started ahead (wantUnbound).
	lastBind time.Time
}

func newPool(cfg PoolConfig, be backend) *pool {
	life, stop := context.WithCancel(context.Background())
	return &pool{
		cfg: cfg, be: be, log: cfg.Logger,
		bySession: map[string]*instance{}, unbound: map[string]*instance{}, all: map[string]*instance{},
		changed: make(chan struct{}), life: life, stop: stop, kickCh: make(chan struct{}, 1), now: time.Now,
	}
}

// start adopts what a previous gateway left running and starts the
// background loop (idle reaping, starting ahead).
func (p *pool) start(ctx context.Context) {
	p.tryAdopt(ctx)
	p.bg.Go(p.loop)
	p.kick()
}

// tryAdopt adopts the containers of a previous life, once. With the engine
// down it is retried by the loop.
func (p *pool) tryAdopt(ctx context.Context) {
	p.mu.Lock()
	done := p.adopted
	p.mu.Unlock()
	if done {
		return
	}
	found, err := p.be.adopt(ctx)
	if err != nil {
		p.log.Warn("aio: adoption postponed", "err", err.Error())
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.adopted {
		return
	}
	p.adopted = true
	now := p.now()
	for _, a := range found {
		in := &instance{slot: a.h.slot, session: a.session, ws: a.ws, state: stateIdle, created: a.created, lastUsed: now,
			adopted: true, h: a.h, client: a.client, ready: closedChan()}
		p.all[in.slot] = in
		if a.session == "" {
			p.unbound[in.slot] = in
		} else if prev := p.bySession[a.session]; prev != nil {
			p.destroyLocked(in) // two containers for one session: keep one
		} else {
			p.bySession[a.session] = in
		}
	}
	p.shrinkLocked()
	if len(found) > 0 {
		p.log.Info("aio: adopted running instances", "count", len(found))
	}
	p.broadcastLocked()
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// lease is one run's hold on an instance.
type lease struct {
	p    *pool
	in   *instance
	once sync.Once
}

func (l *lease) client() *Client { return l.in.client }

// release ends the hold. broken recycles the instance once no other run
// holds it.
func (l *lease) release(broken bool) {
	l.once.Do(func() { l.p.release(l.in, broken) })
}

// acquire returns a lease on the session's instance, binding a warm one
// or creating one when the session has none. When the pool is full it
// evicts the least recently used idle instance; when every instance is
// busy it waits, at most AcquireTimeout, and then fails with
// ErrPoolExhausted.
func (p *pool) acquire(ctx context.Context, b binding) (*lease, error) {
	return p.acquireFor(ctx, b, true)
}

// acquireExisting is acquire for a session that must already have an
// instance (the CDP forwarder): it never creates one.
func (p *pool) acquireExisting(ctx context.Context, session string) (*lease, error) {
	return p.acquireFor(ctx, binding{session: session}, false)
}

func (p *pool) acquireFor(ctx context.Context, b binding, mayCreate bool) (*lease, error) {
	var fullSince time.Time
	p.mu.Lock()
	defer p.mu.Unlock()
	defer func() {
		if !fullSince.IsZero() {
			p.slotWaiters--
		}
	}()
	for {
		if p.closed {
			return nil, unavailable("pool closed", nil)
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if in := p.bySession[b.session]; in != nil {
			switch {
			case in.state == stateAcquiring:
				if err := p.waitReadyLocked(ctx, in); err != nil {
					return nil, err
				}
				continue
			case (in.state == stateIdle || in.state == stateBusy) && !in.broken && in.uses < p.cfg.MaxUses:
				in.state = stateBusy
				in.refs++
				in.uses++
				in.lastUsed = p.now()
				return &lease{p: p, in: in}, nil
			case in.state == stateIdle:
				p.destroyLocked(in) // spent or broken, and nobody holds it
				continue
			}
			// BUSY but spent or broken, or DESTROYING: wait for it to go,
			// as long as for a slot.
			if err := p.waitSlotLocked(ctx, &fullSince, false); err != nil {
				return nil, err
			}
			continue
		}
		if !mayCreate {
			return nil, errNoInstance
		}
		if p.destroyingForLocked(b.session) {
			// The session's previous container still holds its
			// deterministic name: wait until it is gone.
			if err := p.waitSlotLocked(ctx, &fullSince, false); err != nil {
				return nil, err
			}
			continue
		}
		if u := p.pickUnboundLocked(); u != nil {
			p.startAcquireLocked(u, b)
			continue
		}
		if len(p.all) < p.cfg.MaxInstances {
			in := &instance{slot: newSlot(), created: p.now()}
			p.all[in.slot] = in
			p.startAcquireLocked(in, b)
			continue
		}
		// Full: wait for a slot, bounded by AcquireTimeout, evicting the
		// least recently used idle instance unless enough removals are
		// already under way for the acquires waiting.
		if err := p.waitSlotLocked(ctx, &fullSince, true); err != nil {
			return nil, err
		}
	}
}

// waitSlotLocked waits for the next transition, at most AcquireTimeout
// from the first wait of this acquire (*since), and then fails with
// ErrPoolExhausted. With evict, the acquire counts as waiting for a slot
// and may start one eviction.
func (p *pool) waitSlotLocked(ctx context.Context, since *time.Time, evict bool) error {
	if since.IsZero() {
		*since = p.now()
		p.slotWaiters++
	}
	if evict && p.destroyingLocked() < p.slotWaiters {
		if v := p.lruIdleLocked(); v != nil {
			p.destroyLocked(v) // its slot frees when the container is gone
		}
	}
	wctx, cancel := context.WithDeadline(ctx, since.Add(p.cfg.AcquireTimeout))
	err := p.waitLocked(wctx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("aio: %w (max_instances %d, waited %s)", ErrPoolExhausted, p.cfg.MaxInstances, p.cfg.AcquireTimeout)
	}
	return nil
}

// startAcquireLocked marks in ACQUIRING for session b and starts its
// creation (when it has no container yet) and binding in the background.
// The work is detached from the caller: a caller that gives up does not
// fail the other callers waiting for the same instance.
func (p *pool) startAcquireLocked(in *instance, b binding) {
	delete(p.unbound, in.slot)
	p.lastBind = p.now()
	in.session, in.ws, in.state, in.ready, in.err = b.session, b.ws, stateAcquiring, make(chan struct{}), nil
	p.bySession[b.session] = in
	p.bg.Go(func() {
		ctx, cancel := context.WithTimeout(p.life, p.cfg.ReadyTimeout)
		defer cancel()
		h, err := in.h, error(nil)
		if h == nil {
			p.creates.Add(1)
			h, err = p.be.create(ctx, in.slot, b.session)
		}
		var c *Client
		if err == nil {
			c, err = p.be.bind(ctx, h, b)
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		in.h = h
		if err != nil {
			in.err = err
			p.log.Warn("aio: instance start failed", "instance", instanceID(p.cfg.Instance, b.session), "err", err.Error())
			close(in.ready)
			p.destroyLocked(in)
			return
		}
		in.client, in.state, in.lastUsed = c, stateIdle, p.now()
		close(in.ready)
		if p.closed || in.broken { // closing, or its session was deleted meanwhile
			p.destroyLocked(in)
			return
		}
		p.broadcastLocked() // its replacement starts after the run (release)
	})
}

// waitReadyLocked waits until in leaves ACQUIRING; its failure is the
// waiter's failure too.
func (p *pool) waitReadyLocked(ctx context.Context, in *instance) error {
	ch := in.ready
	p.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
	}
	p.mu.Lock()
	if err := ctx.Err(); err != nil {
		return err
	}
	return in.err
}

// waitLocked waits for the next transition.
func (p *pool) waitLocked(ctx context.Context) error {
	ch := p.changed
	p.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
	}
	p.mu.Lock()
	return ctx.Err()
}

func (p *pool) broadcastLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *pool) pickUnboundLocked() *instance {
	var best *instance
	for _, u := range p.unbound {
		if u.state == stateIdle && (best == nil || u.created.Before(best.created)) {
			best = u
		}
	}
	return best
}

func (p *pool) destroyingLocked() int {
	n := 0
	for _, in := range p.all {
		if in.state == stateDestroying {
			n++
		}
	}
	return n
}

func (p *pool) destroyingForLocked(session string) bool {
	for _, in := range p.all {
		if in.state == stateDestroying && in.session == session {
			return true
		}
	}
	return false
}

// freshGrace protects an instance that was just bound from eviction until
// the runs waiting for it have taken it.
const freshGrace = 10 * time.Second

// lruIdleLocked returns the idle instance used least recently, passing
// over one just made for a session whose runs have not taken it yet.
func (p *pool) lruIdleLocked() *instance {
	var v *instance
	now := p.now()
	for _, in := range p.all {
		if in.state != stateIdle || (in.session != "" && in.uses == 0 && now.Sub(in.lastUsed) < freshGrace) {
			continue
		}
		if v == nil || in.lastUsed.Before(v.lastUsed) {
			v = in
		}
	}
	return v
}

func (p *pool) release(in *instance, broken bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	in.refs--
	in.lastUsed = p.now()
	if broken {
		in.broken = true
	}
	if in.refs == 0 && in.state == stateBusy {
		if in.broken || in.uses >= p.cfg.MaxUses || p.closed {
			p.destroyLocked(in)
			return
		}
		in.state = stateIdle
	}
	p.broadcastLocked()
	// The instances started ahead that claims took are replaced when a
	// run ends, not at the claim (or at the loop's next tick if the run is
	// long): a container start takes a 2-core machine's CPU for a few
	// hundred ms, and overlapping it with the claiming run slows that run.
	if p.shortLocked() {
		p.kick()
	}
}

// destroyLocked takes in out of service and removes its container in the
// background; its slot stays counted until the container is gone, so the
// pool never holds more than MaxInstances containers.
func (p *pool) destroyLocked(in *instance) {
	if in.state == stateDestroying && in.h == nil {
		return
	}
	in.state = stateDestroying
	if p.bySession[in.session] == in {
		delete(p.bySession, in.session)
	}
	delete(p.unbound, in.slot)
	p.broadcastLocked()
	h, c := in.h, in.client
	in.h = nil
	if c != nil {
		c.Close()
	}
	if h == nil {
		delete(p.all, in.slot)
		return
	}
	p.bg.Go(func() {
		p.destroyRetrying(in.slot, h)
		p.mu.Lock()
		delete(p.all, in.slot)
		p.broadcastLocked()
		p.mu.Unlock()
		p.kick()
	})
}

// releaseSession takes the session's instance out of service: at once
// when idle, when its last run ends otherwise.
func (p *pool) releaseSession(session string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	in := p.bySession[session]
	if in == nil {
		return
	}
	in.broken = true
	if in.state == stateIdle {
		p.destroyLocked(in)
	}
}

func (p *pool) kick() {
	select {
	case p.kickCh <- struct{}{}:
	default:
	}
}

// destroyRetryEvery and destroyRetryFor pace the retries of a removal
// the engine refused (down, restarting): variables so that tests can
// shorten them.
var (
	destroyRetryEvery = 2 * time.Second
	destroyRetryFor   = 2 * time.Minute
)

// destroyRetrying removes h, retrying while the pool lives: one attempt
// made while the engine restarts would otherwise leave the container and
// its state behind for good (issue 21's soak found created and exited aio
// containers after an engine restart). After close, one attempt; the next
// start adopts or reaps what is left.
func (p *pool) destroyRetrying(slot string, h *handle) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.life), destroyRetryFor)
	defer cancel()
	for {
		err := p.be.destroy(ctx, h)
		if err == nil {
			return
		}
		select {
		case <-p.life.Done():
			p.log.Warn("aio: destroy failed", "slot", slot, "err", err.Error())
			return
		case <-ctx.Done():
			p.log.Warn("aio: destroy failed; giving up", "slot", slot, "err", err.Error())
			return
		case <-time.After(destroyRetryEvery):
			p.log.Warn("aio: destroy failed; retrying", "slot", slot, "err", err.Error())
		}
	}
}

// goneCheckEvery bounds the loop's period, and so how long an instance
// whose container died stays in the pool.
const goneCheckEvery = 5 * time.Second

// loop reaps idle instances (timed out, or whose container is gone) and
// starts instances ahead.
func (p *pool) loop() {
	tick := time.NewTicker(min(max(p.cfg.IdleTimeout/4, 50*time.Millisecond), goneCheckEvery))
	defer tick.Stop()
	for {
		select {
		case <-p.life.Done():
			return
		case <-tick.C:
		case <-p.kickCh:
		}
		p.tryAdopt(p.life)
		p.reapGone()
		p.mu.Lock()
		if !p.closed {
			p.reapLocked()
			p.replenishLocked()
		}
		p.mu.Unlock()
	}
}

// reapGone destroys the idle instances whose container died or was
// removed from outside (an engine restart, docker rm, an OOM kill):
// without it a dead instance stays in the pool, its container and state
// left behind, until its session's next run or its idle timeout (issue
// 21's soak counted them after an engine restart). The inspections run
// outside the lock; an instance used meanwhile is left to its run, which
// finds out itself.
func (p *pool) reapGone() {
	type idleInstance struct {
		in *instance
		h  *handle // read under the lock: destroyLocked clears in.h
	}
	p.mu.Lock()
	var idle []idleInstance
	for _, in := range p.all {
		if in.state == stateIdle && in.h != nil {
			idle = append(idle, idleInstance{in, in.h})
		}
	}
	p.mu.Unlock()
	var dead []idleInstance
	for _, c := range idle {
		ctx, cancel := context.WithTimeout(p.life, 5*time.Second)
		if p.be.gone(ctx, c.h) {
			dead = append(dead, c)
		}
		cancel()
	}
	if len(dead) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range dead {
		if in := c.in; !p.closed && in.state == stateIdle && in.h == c.h {
			p.log.Warn("aio: instance container gone; removing it", "slot", in.slot)
			p.destroyLocked(in)
		}
	}
}

// reapLocked destroys instances idle for IdleTimeout; unbound ones only
// beyond MinInstances.
func (p *pool) reapLocked() {
	now := p.now()
	var spareUnbound []*instance
	for _, in := range p.all {
		if in.state != stateIdle || now.Sub(in.lastUsed) < p.cfg.IdleTimeout {
			continue
		}
		if in.session == "" {
			spareUnbound = append(spareUnbound, in)
			continue
		}
		p.destroyLocked(in)
	}
	sort.Slice(spareUnbound, func(i, j int) bool { return spareUnbound[i].lastUsed.Before(spareUnbound[j].lastUsed) })
	if extra := len(p.unbound) - p.wantUnboundLocked(); extra > 0 {
		for _, in := range spareUnbound[:min(extra, len(spareUnbound))] {
			p.destroyLocked(in)
		}
	}
}

// wantUnboundLocked is how many instances to keep started ahead:
// MinInstances, and with AheadOnDemand at least one while sessions
// arrive (one took an instance within IdleTimeout).
func (p *pool) wantUnboundLocked() int {
	if p.cfg.AheadOnDemand && !p.lastBind.IsZero() && p.now().Sub(p.lastBind) < p.cfg.IdleTimeout {
		return max(p.cfg.MinInstances, 1)
	}
	return p.cfg.MinInstances
}

// shortLocked reports whether the pool has fewer instances started ahead
// than it wants and room for another.
func (p *pool) shortLocked() bool {
	return len(p.unbound) < p.wantUnboundLocked() && len(p.all) < p.cfg.MaxInstances
}

// replenishLocked starts unbound instances up to wantUnboundLocked, as
// far as MaxInstances allows.
func (p *pool) replenishLocked() {
	for p.shortLocked() {
		in := &instance{slot: newSlot(), state: stateAcquiring, created: p.now(), ready: make(chan struct{})}
		p.all[in.slot] = in
		p.unbound[in.slot] = in
		p.bg.Go(func() {
			ctx, cancel := context.WithTimeout(p.life, p.cfg.ReadyTimeout)
			defer cancel()
			p.creates.Add(1)
			h, err := p.be.create(ctx, in.slot, "")
			p.mu.Lock()
			defer p.mu.Unlock()
			in.h = h
			close(in.ready)
			if err != nil {
				p.log.Warn("aio: starting an instance ahead failed", "err", err.Error())
				in.err = err
				p.destroyLocked(in)
				return
			}
			if p.closed {
				p.destroyLocked(in)
				return
			}
			in.state, in.lastUsed = stateIdle, p.now()
			p.broadcastLocked()
		})
	}
}

// shrinkLocked destroys idle instances beyond MaxInstances (adoption may
// find more than a smaller new configuration allows).
func (p *pool) shrinkLocked() {
	for len(p.all) > p.cfg.MaxInstances {
		v := p.lruIdleLocked()
		if v == nil {
			return
		}
		p.destroyLocked(v)
		delete(p.all, v.slot) // counted as gone for the loop's sake
	}
}

// close stops the loop and, unless keep, destroys every instance, waiting
// for the removals.
func (p *pool) close(ctx context.Context, keep bool) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	for _, in := range p.all {
		if keep {
			if in.client != nil {
				in.client.Close()
			}
			continue
		}
		if in.state != stateAcquiring {
			p.destroyLocked(in)
		}
	}
	p.broadcastLocked()
	p.mu.Unlock()
	done := make(chan struct{})
	go func() {
		// Acquisitions in flight end (their contexts derive from life
		// only after the loop stops) and destroy what they made.
		p.stop()
		p.bg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if !keep {
		p.mu.Lock()
		left := len(p.all)
		p.mu.Unlock()
		if left > 0 {
			return fmt.Errorf("aio: %d instances could not be removed", left)
		}
	}
	return nil
}

// Info describes a session's instance, for GET /v1/sessions/{id}.
type Info struct {
	// ID is the instance's deterministic id, derived from the session id.
	ID string `json:"id"`
	// State is idle, acquiring, busy or destroying.
	State      string    `json:"state"`
	Uses       int       `json:"uses"`
	MaxUses    int       `json:"max_uses"`
	Running    int       `json:"running"`
	CreatedAt  time.Time `json:"created_at"`
	LastUsedAt time.Time `json:"last_used_at"`
	// Container is the short container id ("" while it is being created).
	Container string `json:"container,omitempty"`
	Image     string `json:"image"`
	Network   string `json:"network"`
	// Adopted is set for an instance this process found running at start.
	Adopted bool `json:"adopted"`
}

func (p *pool) info(session string) (Info, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	in := p.bySession[session]
	if in == nil {
		return Info{}, false
	}
	inf := Info{ID: instanceID(p.cfg.Instance, session), State: in.state.String(), Uses: in.uses, MaxUses: p.cfg.MaxUses,
		Running: in.refs, CreatedAt: in.created, LastUsedAt: in.lastUsed, Image: p.cfg.Image, Network: p.cfg.Network,
		Adopted: in.adopted}
	if in.h != nil {
		inf.Container = shortID(in.h.containerID)
	}
	return inf, true
}

// stats counts the pool's instances by state (tests).
func (p *pool) stats() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{"total": len(p.all), "unbound": len(p.unbound)}
	for _, in := range p.all {
		out[in.state.String()]++
	}
	return out
}

func newToken() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
