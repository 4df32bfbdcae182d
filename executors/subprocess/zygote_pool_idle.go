package subprocess

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/executors"
)

// idleZygotes keeps pre-started Python zygotes that belong to no session
// (issue 34), so that a session's first run finds its zygote ready, with
// its spare run forked ahead, instead of starting an interpreter on the
// request's path (about 30 ms of a 2-core machine's CPU under load, plus
// the first run forked on demand).
//
// A zygote is uid-agnostic already: it runs as root and each run drops
// to the uid its message names (zygoteBoot). What ties it to a session is
// its root's workspace and program directory, so a pooled zygote is
// started with its slot's empty directories there instead
// (zygote_pool_slots_linux.go), and a claim:
//
//  1. takes the zygote out of the pool (it never goes back: released,
//     it is killed, and its slot unmounted and removed);
//  2. mounts the session's workspace and program directory onto the
//     slot, which the kernel propagates into the zygote's namespaces,
//     and checks through /proc/<pid>/root that the zygote now sees the
//     session's workspace directory (device and inode) at the layout's
//     cwd and its program directory at codeMount; a zygote that does not
//     is killed and the run starts its own;
//  3. gives it the session's key, from when on it is that session's
//     zygote like any other (zygotePool).
//
// So a pooled zygote serves one session and no run of anyone touched it
// before: until the claim, nothing of any session is in its root, and
// its processes (the zygote and its spare, all root) never run a program.
//
// Pools are kept per shape (the layout and the interpreter binary), for
// runs without network only (a run granted network has a namespace of its
// own and a key that names its grant). A shape's pool exists once a run
// of that shape missed; Config.ZygotePool.Size zygotes are kept ready per
// shape, at most Max in all (the memory of the machine bounds the
// default), for at most Shapes shapes (the most recently used).
// Zygotes are started one at a time, in the background, after the run
// that claimed one: a start beside a run slows the run down on a small
// machine.
//
// Only as root, with namespaces (IsolationNamespaces), as zygotes
// themselves: a rootless gateway keeps today's path, and says so in
// PoolStatus.
type idleZygotes struct {
	e     *Executor
	off   string // why the pool does not serve; "" when it does
	slots *slotNS
	cfg   ZygotePoolConfig

	mu     sync.Mutex
	shapes map[zygoteShape]*shapePool
	total  int // idle and starting, every shape
	closed bool
	wake   chan struct{}
	filler sync.WaitGroup
	reaps  sync.WaitGroup // slots of dead zygotes being removed

	claims, misses, made, lost atomic.Int64
}

// zygoteShape is what a pooled zygote is started with that a session's
// runs could differ in: everything of its key but the session's identity,
// workspace and limits.
type zygoteShape struct {
	interp   string
	interpID fileID
	layout   executors.Layout
}

type shapePool struct {
	idle     []*zygote // oldest first
	starting int
	used     time.Time
}

func newIdleZygotes(e *Executor) *idleZygotes {
	p := &idleZygotes{e: e, cfg: e.cfg.ZygotePool, shapes: map[zygoteShape]*shapePool{}, wake: make(chan struct{}, 1)}
	switch {
	case e.isolation != IsolationNamespaces:
		p.off = "the gateway is not root: zygotes and a claim's mounts need it; sessions use warm interpreters"
	case e.zygotes == nil:
		p.off = "zygotes are disabled"
	case p.cfg.Max < 0:
		p.off = "disabled by configuration"
	}
	if p.off != "" {
		return p
	}
	dir := filepath.Join(e.runDir, "slots")
	s, err := func() (*slotNS, error) {
		if err := os.Mkdir(dir, 0o700); err != nil {
			return nil, err
		}
		return newSlotNS(dir)
	}()
	if err != nil {
		p.off = "slot namespace: " + err.Error()
		e.log.Warn("zygote pool disabled", "err", err.Error())
		return p
	}
	p.slots = s
	p.filler.Add(1)
	go p.fill()
	return p
}

// shapeOf is the shape of key; ok is false for a key no pool serves.
func shapeOf(key warmKey) (zygoteShape, bool) {
	if key.lang != executors.LangPython || key.egress != "" || (key.layout.Workdir != "" && key.layout.Workdir != key.layout.Root) {
		// A workdir below the workspace is made by the manager per
		// session; a pooled zygote's cwd must be a mount's root.
		return zygoteShape{}, false
	}
	return zygoteShape{interp: key.interp, interpID: key.interpID, layout: key.layout}, true
}

// claim returns a pooled zygote of key's shape with ws's workspace and
// program directory mounted, as session's, or nil (none ready, or the
// mount failed: the caller starts one). Called with the zygotePool's
// mutex held.
func (p *idleZygotes) claim(session string, ws *warmSpec, key warmKey) *zygote {
	if p == nil || p.off != "" || ws.l.bridge != nil {
		return nil
	}
	shape, ok := shapeOf(key)
	if !ok {
		return nil
	}
	z := p.take(shape)
	if z == nil {
		p.misses.Add(1)
		return nil
	}
	if err := p.attach(z, ws); err != nil {
		p.e.log.Warn("zygote pool: claim failed; the run starts its own", "session_id", session, "err", err.Error())
		p.lost.Add(1)
		z.kill()
		return nil
	}
	p.claims.Add(1)
	z.key, z.session = key, session
	z.claimed.Store(true)
	return z
}

// take removes a live zygote of shape from the pool, a ready one first,
// and marks the shape used (making its pool when it has none).
func (p *idleZygotes) take(shape zygoteShape) *zygote {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	sp := p.shapes[shape]
	if sp == nil {
		sp = &shapePool{}
		p.shapes[shape] = sp
		p.trimShapesLocked()
	}
	sp.used = time.Now()
	pick := -1
	for i, z := range sp.idle {
		if closed(z.gone) {
			continue
		}
		if closed(z.ready) {
			pick = i
			break
		}
		if pick < 0 {
			pick = i
		}
	}
	if pick < 0 {
		return nil
	}
	z := sp.idle[pick]
	sp.idle = append(sp.idle[:pick], sp.idle[pick+1:]...)
	p.total--
	return z
}

// attach mounts ws's workspace and program directory onto z's slot and
// checks that z sees them.
func (p *idleZygotes) attach(z *zygote, ws *warmSpec) error {
	code, err := p.e.ensureCodeDir(ws.l.dir)
	if err != nil {
		return err
	}
	if err := z.slot.attach(ws.l.dir, code); err != nil {
		return err
	}
	root := "/proc/" + strconv.Itoa(z.proc.cmd.Process.Pid) + "/root"
	for host, inside := range map[string]string{ws.l.dir: ws.key.layout.Dir(), code: codeMount} {
		if err := sameDir(host, root+inside); err != nil {
			return err
		}
	}
	return nil
}

// sameDir checks that a and b are one directory (device and inode).
func sameDir(a, b string) error {
	var sa, sb unix.Stat_t
	if err := unix.Stat(a, &sa); err != nil {
		return err
	}
	if err := unix.Stat(b, &sb); err != nil {
		return err
	}
	if sa.Dev != sb.Dev || sa.Ino != sb.Ino {
		return fmt.Errorf("the zygote does not see %s at %s", a, b)
	}
	return nil
}

// trimShapesLocked drops the least recently used shapes beyond Shapes,
// killing their zygotes.
func (p *idleZygotes) trimShapesLocked() {
	for len(p.shapes) > p.cfg.Shapes {
		var oldest zygoteShape
		var at time.Time
		first := true
		for s, sp := range p.shapes {
			if first || sp.used.Before(at) {
				oldest, at, first = s, sp.used, false
			}
		}
		for _, z := range p.shapes[oldest].idle {
			z.kill()
			p.total--
		}
		delete(p.shapes, oldest)
	}
}

// kick tells the filler that a pool may want more.
func (p *idleZygotes) kick() {
	if p == nil || p.off != "" {
		return
	}
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// fill starts zygotes, one at a time, while a shape has fewer than Size
// ready or starting and the pool is under Max.
func (p *idleZygotes) fill() {
	defer p.filler.Done()
	for range p.wake {
		for {
			shape, ok := p.wantOne()
			if !ok {
				break
			}
			p.startOne(shape)
		}
	}
}

// wantOne picks the shape to start a zygote for and counts it starting.
func (p *idleZygotes) wantOne() (zygoteShape, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.total >= p.cfg.Max {
		return zygoteShape{}, false
	}
	for s, sp := range p.shapes {
		if len(sp.idle)+sp.starting < p.cfg.Size {
			sp.starting++
			p.total++
			return s, true
		}
	}
	return zygoteShape{}, false
}

// startOne starts one zygote of shape and waits until it is ready and
// has its spare asked for.
func (p *idleZygotes) startOne(shape zygoteShape) {
	z, err := p.start(shape)
	p.mu.Lock()
	sp := p.shapes[shape]
	if sp != nil {
		sp.starting--
	}
	if err != nil || sp == nil || p.closed {
		p.total--
		p.mu.Unlock()
		if err != nil {
			p.e.log.Warn("zygote pool: start failed", "err", err.Error())
			p.lost.Add(1)
			time.Sleep(time.Second) // a broken host does not spin
		} else {
			z.kill()
		}
		return
	}
	sp.idle = append(sp.idle, z)
	p.mu.Unlock()
	p.made.Add(1)
	ok, _ := z.awaitReady(context.Background(), zygoteReadyTimeout)
	if ok {
		// The spare: the first run then pays no fork.
		tmp := strconv.FormatInt(int64(p.e.cfg.TmpMB)<<20, 10)
		_, _, _ = z.conn.WriteMsgUnix([]byte("\x00\x00\x00\x00\x00\x00\x00\x00"+tmp), nil, nil)
	}
}

// start launches a zygote of shape in a new slot.
func (p *idleZygotes) start(shape zygoteShape) (*zygote, error) {
	sl, err := p.slots.newSlot()
	if err != nil {
		return nil, err
	}
	l := launch{env: p.e.env(shape.layout), slot: sl,
		root: &rootPlan{sys: p.e.sysRoot, preload: p.e.nodeBoot.current(), tmpBytes: int64(p.e.cfg.TmpMB) << 20, layout: shape.layout}}
	key := warmKey{lang: executors.LangPython, interp: shape.interp, interpID: shape.interpID, layout: shape.layout}
	z, err := p.e.launchZygote(l, key, "", p.died)
	if err != nil {
		sl.remove()
		return nil, err
	}
	z.slot = sl
	p.reaps.Add(1)
	go func() {
		defer p.reaps.Done()
		<-z.proc.done
		sl.remove()
	}()
	return z, nil
}

// died handles the end of z's socket: a pooled zygote is dropped from the
// pool; a claimed one is its session's (zygotePool.died).
func (p *idleZygotes) died(z *zygote) {
	if z.claimed.Load() {
		p.e.zygotes.died(z)
		return
	}
	p.mu.Lock()
	for _, sp := range p.shapes {
		for i, y := range sp.idle {
			if y == z {
				sp.idle = append(sp.idle[:i], sp.idle[i+1:]...)
				p.total--
				p.mu.Unlock()
				p.lost.Add(1)
				z.kill()
				p.kick()
				return
			}
		}
	}
	p.mu.Unlock() // killed by the pool, or being claimed (the claim finds it gone)
}

// close kills the pooled zygotes and waits until they and their slots
// are gone; the slot namespace goes with them.
func (p *idleZygotes) close(ctx context.Context) error {
	if p == nil || p.off != "" {
		return nil
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	var zs []*zygote
	for _, sp := range p.shapes {
		zs = append(zs, sp.idle...)
		sp.idle = nil
	}
	p.total = 0
	close(p.wake)
	p.mu.Unlock()
	for _, z := range zs {
		z.kill()
	}
	err := waitCtx(ctx, func() {
		p.filler.Wait()
		p.reaps.Wait()
	})
	if err != nil {
		return errors.Join(errors.New("zygote pool: zygotes still running at close"), err)
	}
	p.slots.close()
	return nil
}

// status is the pool as PoolStatus shows it.
func (p *idleZygotes) status() executors.PoolStatus {
	st := executors.PoolStatus{Enabled: p.off == "", Reason: p.off, Size: p.cfg.Size, Max: max(p.cfg.Max, 0),
		Claims: p.claims.Load(), Misses: p.misses.Load(), Made: p.made.Load(), Lost: p.lost.Load()}
	p.mu.Lock()
	defer p.mu.Unlock()
	st.Shapes = len(p.shapes)
	for _, sp := range p.shapes {
		st.Preparing += sp.starting
		for _, z := range sp.idle {
			if closed(z.ready) {
				st.Idle++
			} else {
				st.Preparing++
			}
		}
	}
	return st
}

var _ executors.Pooler = (*Executor)(nil)

// ZygotePoolConfig sizes the pool of pre-started zygotes of no session
// (idleZygotes). The zero value takes the defaults below.
type ZygotePoolConfig struct {
	// Size is how many zygotes each shape's pool keeps ready. Default
	// DefaultZygotePoolSize.
	Size int `yaml:"size"`
	// Max bounds the pooled zygotes (ready and starting) across shapes.
	// Zero: what the machine's memory allows (defaultZygotePoolMax);
	// negative disables the pool.
	Max int `yaml:"max"`
	// Shapes bounds the shapes (layout, interpreter) pooled at once, the
	// most recently used ones. Default DefaultZygotePoolShapes.
	Shapes int `yaml:"shapes"`
}

// Pool defaults. A pooled zygote costs what a session's idle zygote does
// with its spare: the interpreter, its init shell, and the spare's C, P1
// and R (see "Zygotes" in the package documentation). Measured on the
// reference VM (python3.11, the runtime root): the five processes of a
// ready pooled zygote hold 12.1 MiB PSS (37 MiB RSS summed, shared pages
// counted in each); zygoteCostMiB keeps twice the PSS. On a 2-core,
// 24 GiB machine the defaults keep 2 per shape and at most 4 (1/64 of the
// memory, 376 MiB, would allow 15).
const (
	DefaultZygotePoolSize   = 2
	DefaultZygotePoolShapes = 2
	// zygotePoolMaxCap bounds the default Max whatever the memory: each
	// start is an interpreter start-up on the machine whose CPU runs share.
	zygotePoolMaxCap = 4
	// zygotePoolMemShare is the share of the machine's memory pooled
	// zygotes may take by default (1/64), zygoteCostMiB what one costs.
	zygotePoolMemShare = 64
	zygoteCostMiB      = 24
)

func (c ZygotePoolConfig) withDefaults() ZygotePoolConfig {
	c.Size = orInt(c.Size, DefaultZygotePoolSize)
	c.Shapes = orInt(c.Shapes, DefaultZygotePoolShapes)
	if c.Max == 0 {
		c.Max = max(1, min(zygotePoolMaxCap, memTotalMiB()/zygotePoolMemShare/zygoteCostMiB))
	}
	if c.Max > 0 {
		c.Size = min(c.Size, c.Max)
	}
	return c
}

// memTotalMiB reads MemTotal from /proc/meminfo; 4 GiB when it cannot.
func memTotalMiB() int {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 4096
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			if kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB"))); err == nil {
				return kb / 1024
			}
		}
	}
	return 4096
}

// PoolStatus implements executors.Pooler: the pool of pre-started Python
// zygotes, for /readyz and the metrics.
func (e *Executor) PoolStatus() executors.PoolStatus {
	if e.idle == nil {
		return executors.PoolStatus{Reason: "zygotes are disabled"}
	}
	return e.idle.status()
}
