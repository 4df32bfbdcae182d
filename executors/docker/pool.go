package docker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/internal/wsmount"
)

// sandboxPool keeps pre-started, never-used sandboxes that belong to no
// session, so that a session's first run (and any run its own warm
// containers cannot serve) finds one ready and the container start leaves
// the request's path (issue 34).
//
// A pooled container is created with everything a run of its shape fixes
// at creation (image, limits, layout, runtime) except the three things
// only a claim knows: the workspace, the uid and the gid. Its boot step
// runs as root with CAP_SETUID, CAP_SETGID and CAP_SETPCAP only (and, under
// a runtime with its own kernel, CAP_SYS_ADMIN inside that kernel), no
// program of anyone in it, and waits on stdin. A claim:
//
//  1. bind-mounts the session's workspace, from the host, onto the
//     container's slot directory (poolmount.go); mount propagation
//     (the slot is an rslave bind of a shared host directory) carries it
//     into the container at /workspace and the layout's root. Under
//     gVisor, whose gofer keeps the mount's original directory open, the
//     slot's parent is mounted in the sandbox and the boot step binds its
//     workspace in the sandbox's own kernel instead;
//  2. writes the session's uid and gid as the first line of stdin: the
//     boot step (poolBootPrefix) checks them, makes the binds, and execs
//     setpriv, which sets the uid, the gid, no supplementary groups, and
//     clears every capability set, including the bounding set, before it
//     execs the ordinary boot script; from then on the container is the
//     same as a fresh one of the session (no-new-privileges, read-only
//     root, its own PID namespace), and the program arrives as in any run.
//
// So the program never runs as root and never shares its container: a
// pooled container serves exactly one run of one session (the claim
// removes it from the pool), and no run touched it before. Root exists
// in it only while it idles with nothing of anyone inside, and never with
// CAP_DAC_OVERRIDE: the boot step cannot even read the workspace.
//
// Pools are kept per shape (poolKeyOf), a few shapes at a time (the most
// recently claimed); a shape's pool exists once a run of that shape asked
// for one. Its size follows demand: Config.Pool.Size sandboxes idle,
// more while sessions arrive faster than those can be replaced (twice the
// claims expected during one start, see want), and never more than
// Config.Pool.Max in all, which the memory
// of the machine bounds (poolconfig.go). Preparations run one at a time,
// in the background: on a 2-core machine a container start beside a run
// slows the run down. A claim that finds none ready is not held: the run
// prepares its own container as before, so a burst larger than the pool
// loses nothing, it only waits for container starts.
//
// Every pooled container carries the sandgate.pool label and its
// instance's labels: the orphan reaper removes those a crashed gateway
// left, and the pool's start unmounts and removes the slot directories
// it left (poolmount.go). The engine cannot relabel a container, so a
// claimed one has no sandgate.session or sandgate.request label: an
// operator filtering the engine's containers by session does not see a
// run served from the pool (its audit record names the session and the
// request; the executor itself tracks it in memory).
type sandboxPool struct {
	e *Executor

	// off is why the pool is disabled ("" when it serves claims).
	off string
	// root is this executor's slot directory (<Dir>/<kind>-<instance>).
	root string
	// slots says root is ready for slots: the gateway is root and the
	// engine local. Session sandboxes need one for their process server
	// (procserver.go) also when the pool is disabled.
	slots bool

	mu     sync.Mutex
	keys   map[shape]*poolKey
	pairs  map[shape]*pairKey // holder and sandbox pairs (poolpair.go)
	total  int                // idle and being prepared, every key
	closed bool
	wake   chan struct{} // tells the filler that a key wants more

	prep time.Duration // moving average of a pooled sandbox's start; guarded by mu

	seq                        atomic.Int64
	claims, misses, made, lost atomic.Int64
}

// poolKey is one shape's pool.
type poolKey struct {
	idle      []*box // prepared, oldest first
	preparing int
	used      time.Time   // last claim, for the choice of shapes kept
	recent    []time.Time // claims within poolWindow
}

// poolWindow is how far back claims count toward a pool's size.
const poolWindow = 10 * time.Second

// labelPool marks a pooled container (it has no session until claimed).
const labelPool = labelPrefix + "pool"

// newSandboxPool prepares the pool: when it can serve, the slot directory
// is made (and what a crashed predecessor left there is removed), and the
// filler starts.
func newSandboxPool(e *Executor) *sandboxPool {
	p := &sandboxPool{e: e, keys: map[shape]*poolKey{}, pairs: map[shape]*pairKey{}, wake: make(chan struct{}, 1)}
	cfg := e.cfg.Pool
	p.root = filepath.Join(cfg.Dir, string(e.cfg.Kind)+"-"+e.cfg.Instance)
	if os.Geteuid() == 0 {
		// Also with the pool disabled now: a predecessor may have had one.
		if n := reapSlots(p.root, e.boot); n > 0 {
			e.log.Info("removed the slots of an earlier process's pool", "count", n)
		}
	}
	if os.Geteuid() == 0 && localEngine(e.cfg.Host) {
		if err := preparePoolRoot(cfg.Dir, p.root); err != nil {
			p.off = "slot directory: " + err.Error()
			e.log.Warn("sandbox pool disabled", "err", err.Error())
			return p
		}
		p.slots = true
	}
	switch {
	case cfg.Max <= 0:
		p.off = "disabled by configuration"
	case os.Geteuid() != 0:
		p.off = "the gateway is not root: a claim mounts the workspace into a pooled sandbox"
	case !localEngine(e.cfg.Host):
		p.off = "the engine is not on this host's Unix socket: a claim's mount would not reach its containers"
	}
	if p.off != "" {
		return p
	}
	e.goBackground(p.fillLoop)
	return p
}

// localEngine reports whether the engine is reached over a Unix socket
// (host, else DOCKER_HOST, else the default socket): only then can it be
// on this host, where a claim mounts. An engine in another mount
// namespace behind a local socket is caught by each claim instead (the
// boot step refuses a workspace that is still the empty slot).
func localEngine(host string) bool {
	if host == "" {
		host = os.Getenv("DOCKER_HOST")
	}
	return host == "" || strings.HasPrefix(host, "unix://")
}

// poolKeyOf is sh without what a claim brings (workspace and identity).
func poolKeyOf(sh shape) shape {
	sh.dir, sh.uid, sh.gid = "", 0, 0
	return sh
}

// poolable reports whether a run of shape sh can be served from a pool:
// not one granted network (its socket and CA are fixed at creation) nor
// one joining a session's network holder.
func poolable(sh shape) bool { return !sh.egress && sh.ca == "" && sh.netns == "" }

// claim hands a pooled sandbox to a run of shape sh, with the workspace
// mounted and the identity set, or nil when none is ready (the caller
// prepares one). A pool for sh's shape is made by the first claim.
func (p *sandboxPool) claim(ctx context.Context, sh shape) *box {
	if p.off != "" || !poolable(sh) || ctx.Err() != nil {
		return nil
	}
	key := poolKeyOf(sh)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	k := p.keyFor(key)
	now := time.Now()
	k.used = now
	k.recent = append(slices.DeleteFunc(k.recent, func(t time.Time) bool { return now.Sub(t) > poolWindow }), now)
	var b *box
	for len(k.idle) > 0 && b == nil {
		b, k.idle = k.idle[0], k.idle[1:]
		p.total--
		if b.exit.exited() { // died waiting (engine restart, killed from outside)
			p.lost.Add(1)
			p.e.discard(b)
			b = nil
		}
	}
	empty := len(k.idle) == 0
	p.mu.Unlock()
	if b == nil || empty {
		// Otherwise the refill waits for the run's end (attach): a
		// container start beside the run slows the run down on a small
		// machine, and the pool still has one ready for the next claim.
		p.kick()
	}
	if b == nil {
		p.misses.Add(1)
		return nil
	}
	if err := p.attach(b, sh); err != nil {
		p.e.log.Warn("pooled sandbox: attach", "container", shortID(b.id), "err", err.Error())
		p.e.discard(b)
		p.misses.Add(1)
		return nil
	}
	p.claims.Add(1)
	return b
}

// attach gives b to a run of shape sh: the workspace mounted onto its
// slot, then the identity written to its boot step.
func (p *sandboxPool) attach(b *box, sh shape) error {
	slot := b.slot
	if err := wsmount.Bind(sh.dir, slotWorkspace(slot)); err != nil {
		return err
	}
	b.release = func() {
		removeSlot(slot)
		p.kick() // the refill claim deferred
	}
	b.shape = sh
	if sh.sandbox {
		return nil // its commands are execs as the session's uid (poolsandbox.go)
	}
	if _, err := fmt.Fprintf(b.conn.Conn, "%d %d\n", sh.uid, sh.gid); err != nil {
		return fmt.Errorf("write identity: %w", err)
	}
	return nil
}

// keyFor returns key's pool, making it (and dropping the least recently
// claimed shape's when there are Config.Pool.Shapes already). Call with
// p.mu held.
func (p *sandboxPool) keyFor(key shape) *poolKey {
	if k, ok := p.keys[key]; ok {
		return k
	}
	if len(p.keys) >= p.e.cfg.Pool.Shapes {
		var oldest shape
		var at time.Time
		for s, k := range p.keys {
			if at.IsZero() || k.used.Before(at) {
				oldest, at = s, k.used
			}
		}
		p.dropKey(oldest)
	}
	k := &poolKey{}
	p.keys[key] = k
	return k
}

// dropKey removes a shape's pool and its idle sandboxes (those being
// prepared are removed when ready). Call with p.mu held.
func (p *sandboxPool) dropKey(key shape) {
	k := p.keys[key]
	if k == nil {
		return
	}
	for _, b := range k.idle {
		p.e.discard(b)
	}
	p.total -= len(k.idle)
	k.idle = nil
	delete(p.keys, key)
}

// want is how many sandboxes key's pool should hold: Size, or, when
// sessions arrive faster than Size sandboxes can be replaced, twice the
// claims expected while one sandbox starts (the claim rate of the last
// poolWindow times the measured start time). Call with p.mu held.
func (p *sandboxPool) want(k *poolKey) int {
	now := time.Now()
	n := 0
	for _, t := range k.recent {
		if now.Sub(t) <= poolWindow {
			n++
		}
	}
	prep := p.prep
	if prep <= 0 {
		prep = prepGuess
	}
	demand := int((2*time.Duration(n)*prep + poolWindow - 1) / poolWindow)
	return max(p.e.cfg.Pool.Size, min(demand, p.e.cfg.Pool.Max))
}

// kick wakes the filler.
func (p *sandboxPool) kick() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// next picks the shape whose pool lacks the most, reserving one
// preparation for it, or reports none. Call with p.mu held.
func (p *sandboxPool) next() (shape, bool) {
	if p.closed || p.total >= p.e.cfg.Pool.Max {
		return shape{}, false
	}
	var best shape
	gap := 0
	for s, k := range p.keys {
		if g := p.want(k) - len(k.idle) - k.preparing; g > gap {
			best, gap = s, g
		}
	}
	if gap == 0 {
		return shape{}, false
	}
	p.keys[best].preparing++
	p.total++
	return best, true
}

// fillLoop prepares sandboxes one at a time while a pool wants more, and
// sleeps until a claim, a death or Close otherwise. A failed preparation
// (engine down) pauses it for a second.
func (p *sandboxPool) fillLoop() {
	p.mu.Lock()
	p.keyFor(p.defaultKey()) // the likeliest shape is ready from the start
	p.mu.Unlock()
	for {
		p.mu.Lock()
		key, ok := p.next()
		pair := false
		if !ok {
			key, ok = p.nextPair()
			pair = ok
		}
		closed := p.closed
		p.mu.Unlock()
		if closed {
			_ = os.Remove(p.root) // when empty: no claimed run still holds a slot
			return
		}
		if pair {
			b, err := p.preparePair(key)
			p.mu.Lock()
			p.fillPair(key, b, err)
			p.mu.Unlock()
			if err != nil && !p.pause(err) {
				return
			}
			continue
		}
		if !ok {
			select {
			case <-p.wake:
				continue
			case <-p.e.life.Done():
				return
			}
		}
		b, err := p.prepare(key)
		p.mu.Lock()
		k := p.keys[key]
		if k != nil {
			k.preparing--
		}
		switch {
		case err != nil:
			p.total--
		case k == nil || p.closed:
			p.total--
			p.e.discard(b)
		default:
			k.idle = append(k.idle, b)
			go p.watch(key, b)
		}
		p.mu.Unlock()
		if err != nil && !p.pause(err) {
			return
		}
	}
}

// pause waits a second after a failed preparation (engine down); false
// when the executor is closing.
func (p *sandboxPool) pause(err error) bool {
	if p.e.life.Err() != nil {
		return false
	}
	p.e.log.Debug("pooled sandbox", "err", err.Error())
	select {
	case <-time.After(time.Second):
		return true
	case <-p.e.life.Done():
		return false
	}
}

// defaultKey is the shape of a run with the configured defaults: Python
// in the default layout, the likeliest first run.
func (p *sandboxPool) defaultKey() shape {
	return poolKeyOf(newShape(p.e.cfg.Images["python"], "", 0, 0, p.e.cfg.Limits.Or(DefaultLimits), p.e.cfg.Runtime))
}

// prepare creates and starts one pooled sandbox of shape key.
func (p *sandboxPool) prepare(key shape) (*box, error) {
	slot, err := p.newSlot()
	if err != nil {
		return nil, err
	}
	labels := p.e.labels("", "")
	labels[labelPool] = "true"
	if key.sandbox {
		labels[labelSandbox] = "true"
	}
	t0 := time.Now()
	b, err := p.e.launch(p.e.life, key, labels, p.adjust(slot, key))
	if err != nil {
		removeSlot(slot)
		return nil, err
	}
	p.mu.Lock()
	p.prep = ewma(p.prep, time.Since(t0))
	p.mu.Unlock()
	b.slot = slot
	b.release = func() { removeSlot(slot) }
	if key.sandbox && p.e.procServers() {
		if err := p.e.awaitProcServer(p.e.life, b); err != nil {
			p.e.discard(b)
			return nil, err
		}
	}
	p.made.Add(1)
	return b, nil
}

// newSlot makes a slot directory, with its ctl directory for a process
// server.
func (p *sandboxPool) newSlot() (string, error) {
	slot := filepath.Join(p.root, p.e.boot+"-"+strconv.FormatInt(p.seq.Add(1), 10))
	if err := makeSlot(slot); err != nil {
		return "", err
	}
	if err := makeCtl(slot); err != nil {
		removeSlot(slot)
		return "", err
	}
	return slot, nil
}

// watch removes b from its pool as soon as its container exits while it
// waits (killed from outside, or stopped with its engine).
func (p *sandboxPool) watch(key shape, b *box) {
	select {
	case <-b.exit.done:
	case <-p.e.life.Done():
		return
	}
	p.mu.Lock()
	k := p.keys[key]
	found := false
	if k != nil {
		if i := slices.Index(k.idle, b); i >= 0 {
			k.idle = slices.Delete(k.idle, i, i+1)
			p.total--
			found = true
		}
	}
	p.mu.Unlock()
	if found {
		p.lost.Add(1)
		p.e.discard(b)
		p.kick()
	}
}

// closeAll removes every idle pooled sandbox and stops the filler (with
// the executor's life).
func (p *sandboxPool) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for key := range p.keys {
		p.dropKey(key)
	}
	for key, k := range p.pairs {
		for _, b := range k.idle {
			p.discardPair(b)
		}
		p.total -= 2 * len(k.idle)
		delete(p.pairs, key)
	}
	p.kick()
}

// PoolStatus is what /readyz and the metrics show of the pool.
type PoolStatus = executors.PoolStatus

var _ executors.Pooler = (*Executor)(nil)

// PoolStatus reports the pool of pre-started sandboxes.
func (e *Executor) PoolStatus() PoolStatus {
	p := e.pool
	st := PoolStatus{Enabled: p.off == "", Reason: p.off, Max: e.cfg.Pool.Max, Size: e.cfg.Pool.Size,
		Claims: p.claims.Load(), Misses: p.misses.Load(), Made: p.made.Load(), Lost: p.lost.Load()}
	p.mu.Lock()
	defer p.mu.Unlock()
	st.Shapes = len(p.keys)
	for _, k := range p.keys {
		st.Idle += len(k.idle)
		st.Preparing += k.preparing
	}
	for _, k := range p.pairs {
		st.Idle += 2 * len(k.idle)
		st.Preparing += 2 * k.preparing
	}
	return st
}

// waitPoolReady waits until the pool of the default shape holds n idle
// sandboxes, for tests and benchmarks.
func (e *Executor) waitPoolReady(ctx context.Context, n int) bool {
	for {
		if e.PoolStatus().Idle >= n {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
}
