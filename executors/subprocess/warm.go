package subprocess

import (
	"container/list"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/process"
)

// WarmStats counts what the warm pool did since New. Hits+Misses is the
// number of runs that named a session.
type WarmStats struct {
	// Idle is the number of warm interpreters waiting now.
	Idle int
	// Spawned counts warm interpreters started.
	Spawned uint64
	// SpawnFailed counts warm interpreters that could not be started.
	SpawnFailed uint64
	// Hits counts runs served by a warm interpreter.
	Hits uint64
	// Misses counts session runs that started cold, for any reason: no warm
	// interpreter yet, one that did not match, or one that died.
	Misses uint64
	// Mismatched counts warm interpreters killed because the run's
	// parameters differed from theirs.
	Mismatched uint64
	// Died counts warm interpreters found dead, or that died before
	// running their program (the run then went cold).
	Died uint64
	// Evicted, Expired and Released count warm interpreters killed to make
	// room (WarmMax), after WarmIdleTTL, and by ReleaseSession or Close.
	Evicted, Expired, Released uint64
	// Zygotes is the number of Python zygotes alive now. Every other field
	// counts zygotes and their runs together with warm interpreters: a run
	// served by a zygote is a hit, a zygote started is spawned.
	Zygotes int
}

// add returns the field-wise sum of s and o.
func (s WarmStats) add(o WarmStats) WarmStats {
	s.Idle += o.Idle
	s.Spawned += o.Spawned
	s.SpawnFailed += o.SpawnFailed
	s.Hits += o.Hits
	s.Misses += o.Misses
	s.Mismatched += o.Mismatched
	s.Died += o.Died
	s.Evicted += o.Evicted
	s.Expired += o.Expired
	s.Released += o.Released
	s.Zygotes += o.Zygotes
	return s
}

// warmKey is everything a warm interpreter was started with that a run
// could differ in. Output caps are not in it: they are the run's, applied
// from the hand-off.
type warmKey struct {
	lang     string
	interp   string
	interpID fileID // the binary on disk, so an upgrade is not hidden
	uid, gid int
	dir      string
	dirID    fileID // the workspace directory itself (dev, inode)
	egress   string // launch.egressID
	limits   process.Rlimits
	heapMB   int // node's --max-old-space-size
	// layout is the run's path layout: its mounts, cwd and HOME.
	layout executors.Layout
}

type fileID struct {
	dev, ino uint64
	size     int64
	mtimeNs  int64
}

func statID(fi os.FileInfo, withContent bool) fileID {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}
	}
	id := fileID{dev: st.Dev, ino: st.Ino}
	if withContent {
		id.size, id.mtimeNs = st.Size, st.Mtim.Nano()
	}
	return id
}

// warmProc is one warm interpreter: a launch chain whose interpreter waits
// in its bootstrap for the path of the code to run.
type warmProc struct {
	key         warmKey
	session     string
	proc        *proc
	ctl         *os.File // the gateway's end of the hand-off socket
	out         *handoff
	placeholder string // node: the main path to point at the code file
	// bridge is the warm interpreter's own egress bridge when it was
	// started for runs granted network: the namespace it waits in. Its
	// listener serves the run it is handed to, with that run's Egress.
	bridge *netBridge

	ready   chan struct{} // the bootstrap said "R"
	started chan struct{} // the bootstrap said "G": the program is running
	ctlEnd  chan struct{} // the socket ended before "G"
	ctlDone chan struct{} // readCtl returned (after "G" or the end)

	// Guarded by the pool's mutex.
	elem  *list.Element // in the pool's idle list, nil once taken
	timer *time.Timer
}

// readCtl follows the bootstrap's side of the protocol.
func (w *warmProc) readCtl(onEnd func()) {
	defer close(w.ctlDone)
	var b [1]byte
	readySeen := false
	for {
		n, err := w.ctl.Read(b[:])
		if n == 1 && b[0] == 'R' && !readySeen {
			readySeen = true
			close(w.ready)
			continue
		}
		if n == 1 && b[0] == 'G' {
			close(w.started)
			return
		}
		if err != nil {
			close(w.ctlEnd)
			onEnd()
			return
		}
	}
}

// kill kills the warm tree and drops its output. The reaper finishes in
// the background; wait on w.proc.done to know it is gone.
func (w *warmProc) kill() {
	w.out.drop()
	w.proc.kill()
	_ = w.ctl.Close()
	if w.bridge != nil {
		w.bridge.close()
	}
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// handoff is a warm process's stdout and stderr sink. Until a run is
// attached it keeps what arrives (an interpreter's start-up warning would
// be part of a cold run's output too), in arrival order across the two
// streams, up to a small bound; from the hand-off on it writes straight
// into the run's output.
type handoff struct {
	mu       sync.Mutex
	out      *output
	dropped  bool
	journal  []handoffChunk
	size     int
	overflow bool
}

type handoffChunk struct {
	stderr bool
	b      []byte
}

// maxPreHandoff bounds what a warm process may write before its hand-off.
// The bootstraps write nothing; more than this means something is wrong
// and the process is not used.
const maxPreHandoff = 64 << 10

func (h *handoff) write(stderr bool, p []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.out != nil:
		h.out.write(stderr, p)
	case h.dropped:
	case h.size+len(p) > maxPreHandoff:
		h.overflow = true
	default:
		h.journal = append(h.journal, handoffChunk{stderr, append([]byte(nil), p...)})
		h.size += len(p)
	}
}

// attach sends the journal and everything after it to out. It reports
// false, attaching nothing, when the journal overflowed.
func (h *handoff) attach(out *output) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.overflow || h.dropped {
		return false
	}
	for _, c := range h.journal {
		out.write(c.stderr, c.b)
	}
	h.journal, h.out = nil, out
	return true
}

func (h *handoff) drop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dropped, h.journal, h.out = true, nil, nil
}

type handoffWriter struct {
	h      *handoff
	stderr bool
}

func (w handoffWriter) Write(p []byte) (int, error) {
	w.h.write(w.stderr, p)
	return len(p), nil
}

// warmPool holds at most max idle-or-starting warm interpreters, at most
// one per session, each killed after ttl unused. A warm interpreter is
// taken out of the pool by the run it serves and never comes back.
type warmPool struct {
	e   *Executor
	max int
	ttl time.Duration

	mu       sync.Mutex
	closed   bool
	sessions map[string]*warmSession
	idle     *list.List // *warmProc, oldest first
	spawning int
	stats    WarmStats
	wg       sync.WaitGroup // spawns and kills in flight
}

type warmSession struct {
	warm     *warmProc     // waiting for this session's next run
	active   int           // runs in progress
	spawning chan struct{} // closed when the spawn in flight has settled
	released bool          // ReleaseSession came while runs were active
}

func newWarmPool(e *Executor) *warmPool {
	return &warmPool{e: e, max: e.cfg.WarmMax, ttl: e.cfg.WarmIdleTTL,
		sessions: map[string]*warmSession{}, idle: list.New()}
}

// session returns id's state, creating it. Called with mu held.
func (p *warmPool) session(id string) *warmSession {
	s := p.sessions[id]
	if s == nil {
		s = &warmSession{}
		p.sessions[id] = s
	}
	return s
}

// tidy forgets id's state when nothing refers to it. Called with mu held.
func (p *warmPool) tidy(id string) {
	if s := p.sessions[id]; s != nil && s.warm == nil && s.active == 0 && s.spawning == nil {
		delete(p.sessions, id)
	}
}

// detach takes w out of the idle list. Called with mu held.
func (p *warmPool) detach(w *warmProc) {
	if w.elem != nil {
		p.idle.Remove(w.elem)
		w.elem = nil
	}
	if w.timer != nil {
		w.timer.Stop()
	}
	if s := p.sessions[w.session]; s != nil && s.warm == w {
		s.warm = nil
	}
}

// kill kills w in the background, counted by wg so Close can wait.
// Called with mu held.
func (p *warmPool) killLocked(w *warmProc) {
	p.detach(w)
	w.kill()
	p.wg.Go(func() { <-w.proc.done })
}

// begin is called when a run of session id starts. It returns the
// session's warm interpreter, now the caller's, or nil. When the
// session's next interpreter is still being started (a request right on
// the heels of the previous run), it waits for that start, which takes
// about a fork and an exec: the run is then handed to an interpreter part
// way through its start-up, which is still sooner than starting cold.
func (p *warmPool) begin(ctx context.Context, id string) *warmProc {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.session(id)
	s.active++
	if s.warm == nil && s.spawning != nil {
		spawning := s.spawning
		p.mu.Unlock()
		select {
		case <-spawning:
		case <-ctx.Done():
		}
		p.mu.Lock()
	}
	w := s.warm
	if w != nil {
		p.detach(w)
	}
	return w
}

// end is called when a run of session id ended; next describes the warm
// interpreter to start for the session's next run (nil: none).
func (p *warmPool) end(id string, next *warmSpec) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.session(id)
	s.active--
	if next == nil || !p.reserveLocked(s) {
		p.tidy(id)
		return
	}
	done := s.spawning
	p.wg.Go(func() { _ = p.spawn(id, next, done) })
}

// reserveLocked decides whether a spawn for s may start and, if so, marks
// it in flight, evicting the oldest idle interpreter when the pool is full.
func (p *warmPool) reserveLocked(s *warmSession) bool {
	if p.closed || s.released || s.warm != nil || s.spawning != nil {
		return false
	}
	if p.idle.Len()+p.spawning >= p.max {
		front := p.idle.Front()
		if front == nil {
			return false // every slot is a spawn in flight
		}
		victim := front.Value.(*warmProc)
		p.stats.Evicted++
		p.killLocked(victim)
		p.tidy(victim.session)
	}
	s.spawning = make(chan struct{})
	p.spawning++
	return true
}

// spawn starts the warm interpreter described by ws for session id and
// puts it in the pool, unless the session was released or the pool closed
// meanwhile. done is closed when that is settled (and, if the new
// interpreter had to be killed, once it is gone).
func (p *warmPool) spawn(id string, ws *warmSpec, done chan struct{}) error {
	defer close(done)
	w, err := p.e.spawnWarm(ws, id)
	p.mu.Lock()
	p.spawning--
	s := p.session(id)
	s.spawning = nil
	if err != nil {
		p.stats.SpawnFailed++
		p.tidy(id)
		p.mu.Unlock()
		level := slog.LevelWarn
		if errors.Is(err, fs.ErrNotExist) {
			level = slog.LevelDebug // the workspace went away after its run
		}
		p.e.log.Log(context.Background(), level, "warm interpreter: start failed",
			"session_id", id, "language", ws.key.lang, "error", err.Error())
		return err
	}
	p.stats.Spawned++
	if p.closed || s.released {
		p.stats.Released++
		p.tidy(id)
		p.mu.Unlock()
		w.kill()
		<-w.proc.done
		return nil
	}
	s.warm = w
	w.elem = p.idle.PushBack(w)
	w.timer = time.AfterFunc(p.ttl, func() { p.expire(w) })
	p.mu.Unlock()
	return nil
}

// prewarm makes sure session id has a warm interpreter for ws, starting
// it now (synchronously) if needed.
func (p *warmPool) prewarm(id string, ws *warmSpec) error {
	p.mu.Lock()
	s := p.session(id)
	if s.warm != nil && s.warm.key == ws.key {
		p.mu.Unlock()
		return nil
	}
	if s.warm != nil {
		p.stats.Mismatched++
		p.killLocked(s.warm)
	}
	if !p.reserveLocked(s) {
		p.tidy(id)
		p.mu.Unlock()
		return nil
	}
	done := s.spawning
	p.wg.Add(1)
	p.mu.Unlock()
	defer p.wg.Done()
	return p.spawn(id, ws, done)
}

// expire kills w after the idle TTL, if it is still waiting.
func (p *warmPool) expire(w *warmProc) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w.elem != nil {
		p.stats.Expired++
		p.killLocked(w)
		p.tidy(w.session)
	}
}

// died drops w when its socket ended while it was still waiting.
func (p *warmPool) died(w *warmProc) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w.elem != nil {
		p.stats.Died++
		p.killLocked(w)
		p.tidy(w.session)
	}
}

// count adds one run's outcome to the stats.
func (p *warmPool) count(hit, mismatched, died bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if hit {
		p.stats.Hits++
	} else {
		p.stats.Misses++
	}
	if mismatched {
		p.stats.Mismatched++
	}
	if died {
		p.stats.Died++
	}
}

// release kills session id's warm interpreter and waits until it, and one
// still being started, are gone.
func (p *warmPool) release(ctx context.Context, id string) error {
	p.mu.Lock()
	s := p.sessions[id]
	if s == nil {
		p.mu.Unlock()
		return nil
	}
	if s.active > 0 || s.spawning != nil {
		s.released = true
	}
	w, spawning := s.warm, s.spawning
	if w != nil {
		p.stats.Released++
		p.detach(w)
		w.kill()
	}
	p.tidy(id)
	p.mu.Unlock()
	if w != nil {
		if err := w.proc.waitDone(ctx); err != nil {
			return err
		}
	}
	if spawning != nil {
		select {
		case <-spawning:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// close kills every warm interpreter, refuses new ones and waits until
// all are gone.
func (p *warmPool) close(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	for e := p.idle.Front(); e != nil; {
		next := e.Next()
		p.stats.Released++
		w := e.Value.(*warmProc)
		p.killLocked(w)
		p.tidy(w.session)
		e = next
	}
	p.mu.Unlock()
	return waitCtx(ctx, p.wg.Wait)
}

// waitCtx runs wait and returns when it has returned, or with ctx's error
// when ctx ends first (wait then finishes in the background).
func waitCtx(ctx context.Context, wait func()) error {
	done := make(chan struct{})
	go func() {
		wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// activeRuns counts session runs in progress.
func (p *warmPool) activeRuns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, s := range p.sessions {
		n += s.active
	}
	return n
}

func (p *warmPool) snapshot() WarmStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.stats
	st.Idle = p.idle.Len()
	return st
}

// Prewarm starts the warm interpreter for the first run of session
// spec.SessionID ahead of it, with spec's parameters (language, identity,
// workspace, network, limits; Code and RequestID are ignored). It
// validates spec and prepares the workspace as Execute does, and returns
// once the interpreter process is started, not when it is ready. It does
// nothing when warm interpreters are disabled, the session already has a
// matching one, or the pool is full of interpreters still starting. Runs
// after the first one need no Prewarm: each run of a session starts the
// session's next interpreter when it ends.
func (e *Executor) Prewarm(ctx context.Context, spec executors.Spec) error {
	if e.warm == nil {
		return nil
	}
	if spec.SessionID == "" {
		return errors.New("subprocess: prewarm: no session id")
	}
	spec, err := e.prologue.Resolve(spec)
	if err != nil {
		return err
	}
	interp, err := e.interpreter(spec.Language)
	if err != nil {
		return err
	}
	if e.isolation == IsolationNone {
		return e.unavailable(e.noIsolationReason, e.noIsolation)
	}
	ws, err := e.openWorkspace(spec.WorkspaceDir, spec.UID, spec.GID)
	if err != nil {
		return err
	}
	defer ws.Close()
	lim, dir := spec.Limits, spec.WorkspaceDir
	l := launch{limits: e.limitsFor(spec.Language, lim), dir: dir, env: e.env(spec.Layout), root: e.rootFor(dir, spec.Layout),
		uid: spec.UID, gid: spec.GID}
	if err := e.grantNetwork(spec, &l); err != nil {
		return err
	}
	next, err := e.warmSpecFor(spec.Language, interp, ws, l, lim)
	if err != nil {
		return fmt.Errorf("subprocess: prewarm: %w", err)
	}
	if e.useZygote(spec.Language) {
		return e.prewarmZygote(ctx, spec.SessionID, next)
	}
	if err := e.warm.prewarm(spec.SessionID, next); err != nil {
		return fmt.Errorf("subprocess: prewarm: %w", err)
	}
	return nil
}

// ReleaseSession implements executors.SessionReleaser: it kills the
// session's warm interpreter (and one being started) and returns once
// they are gone. Runs of the session still in progress are not touched
// (their ctx is the caller's to cancel), but start no successor.
func (e *Executor) ReleaseSession(ctx context.Context, sessionID string) error {
	var errs []error
	if e.zygotes != nil {
		errs = append(errs, e.zygotes.release(ctx, sessionID))
	}
	if e.warm != nil {
		errs = append(errs, e.warm.release(ctx, sessionID))
	}
	return errors.Join(errs...)
}

// Close implements executors.Closer: it kills every warm interpreter,
// starts no more, waits until they are gone (or ctx is done) and removes
// the warm directory. Execute keeps working afterwards, cold.
func (e *Executor) Close(ctx context.Context) error {
	var err error
	if e.zygotes != nil {
		err = e.zygotes.close(ctx)
	}
	err = errors.Join(err, e.idle.close(ctx))
	if e.warm != nil {
		err = errors.Join(err, e.warm.close(ctx))
		if e.warm.activeRuns() > 0 {
			// A run in its hand-off may still need its placeholder, its
			// program file and the base root; they are tiny and left
			// behind then.
			return err
		}
		e.nodeBoot.remove()
	}
	e.base.close()
	if e.runDir != "" {
		err = errors.Join(err, os.RemoveAll(e.runDir))
	}
	if e.rootLock != nil {
		e.rootLock.Close()
	}
	return err
}

// WarmStats reports what the warm pool did; the zero value when it is
// disabled.
func (e *Executor) WarmStats() WarmStats {
	var st WarmStats
	if e.warm != nil {
		st = e.warm.snapshot()
	}
	if e.zygotes != nil {
		st = st.add(e.zygotes.snapshot())
	}
	return st
}

// warmSpec is what spawnWarm needs: the key and the cold launch it mirrors.
type warmSpec struct {
	key warmKey
	l   launch // the cold launch of a run with these parameters (argv unused)
	lim executors.Limits
}

// warmSpecFor describes the warm interpreter for runs like l. It stats
// the interpreter and the workspace; ws is the open workspace.
func (e *Executor) warmSpecFor(lang, interp string, ws *os.Root, l launch, lim executors.Limits) (*warmSpec, error) {
	ifi, err := e.statInterp(interp)
	if err != nil {
		return nil, err
	}
	dfi, err := ws.Stat(".")
	if err != nil {
		return nil, err
	}
	k := warmKey{lang: lang, interp: interp, interpID: statID(ifi, true), uid: l.uid, gid: l.gid,
		dir: l.dir, dirID: statID(dfi, false), egress: l.egressID, limits: l.limits}
	if l.root != nil {
		k.layout = l.root.layout
	}
	if lang == executors.LangJavaScript {
		k.heapMB = lim.MemoryMB
	}
	return &warmSpec{key: k, l: l, lim: lim}, nil
}

// spawnWarm starts a warm interpreter through the same launch chain as a
// cold run of ws (same namespaces, rlimits, ids, cwd, environment and
// stdin), with the hand-off socket as descriptor handoffFD.
func (e *Executor) spawnWarm(ws *warmSpec, session string) (*warmProc, error) {
	w := &warmProc{key: ws.key, session: session, out: &handoff{},
		ready: make(chan struct{}), started: make(chan struct{}), ctlEnd: make(chan struct{}),
		ctlDone: make(chan struct{})}
	l := ws.l
	var preload, shown string
	if ws.key.lang == executors.LangJavaScript {
		var mainDir string
		var err error
		if preload, mainDir, err = e.nodeBoot.ensure(e.dropUID); err != nil {
			return nil, err
		}
		var b [12]byte
		_, _ = rand.Read(b[:])
		name := hex.EncodeToString(b[:]) + ".js"
		w.placeholder = filepath.Join(mainDir, name)
		// The run sees the warm directory at preloadMount (rootPlan).
		root := *l.root
		root.preload = filepath.Dir(preload)
		l.root = &root
		preload = path.Join(preloadMount, filepath.Base(preload))
		shown = path.Join(preloadMount, filepath.Base(mainDir), name)
	}
	argv, ok := e.warmArgs(ws.key.lang, ws.key.interp, ws.lim, preload, shown)
	if !ok {
		return nil, errors.New("language cannot be warmed here")
	}
	l.argv = argv
	l.egress = nil // the run it is handed to brings its own
	if ws.key.egress != "" {
		b, err := e.newBridge(l.caDir())
		if err != nil {
			return nil, err
		}
		w.bridge, l.bridge = b, b
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	w.ctl = os.NewFile(uintptr(fds[0]), "warm-ctl")
	child := os.NewFile(uintptr(fds[1]), "warm-ctl-child")
	cmd := e.command(l)
	cmd.Stdout, cmd.Stderr = handoffWriter{w.out, false}, handoffWriter{w.out, true}
	cmd.WaitDelay = e.cfg.KillGrace
	cmd.ExtraFiles = make([]*os.File, handoffFD-2) // nil entries are closed in the child
	cmd.ExtraFiles[handoffFD-3] = child
	w.proc, err = e.startLaunch(cmd, l)
	child.Close()
	if err != nil {
		w.ctl.Close()
		if w.bridge != nil {
			w.bridge.close()
		}
		return nil, err
	}
	go w.readCtl(func() { e.warm.died(w) })
	return w, nil
}

// runWarm hands rel to w and waits for the run as a cold run would, with
// the timeout counted from the hand-off. newOut makes the run's output.
// served is false when w could not run the program (it did not match, was
// dead, or ended without its bootstrap letting go of the program, which it
// says with "G" before anything of the program runs): the caller then runs
// the program cold, with an output of its own. Whether "G" came is only
// looked at once the tree is gone, so the round trip is not on the run's
// critical path.
func (e *Executor) runWarm(ctx context.Context, w *warmProc, want *warmSpec, rel string, newOut func() *output, timeout time.Duration) (res executors.Result, served bool, err error) {
	fail := func(mismatched bool) (executors.Result, bool, error) {
		w.kill()
		<-w.proc.done
		e.warm.count(false, mismatched, !mismatched)
		return executors.Result{}, false, nil
	}
	if want == nil || w.key != want.key {
		return fail(true)
	}
	if closed(w.ctlEnd) || closed(w.proc.exited) {
		return fail(false)
	}
	if w.placeholder != "" {
		if err := os.Symlink(rel, w.placeholder); err != nil {
			return fail(false)
		}
		defer os.Remove(w.placeholder)
	}
	out := newOut()
	if !w.out.attach(out) {
		out.finish()
		return fail(false)
	}
	if w.bridge != nil {
		defer w.bridge.serve(ctx, want.l.egress)()
	}
	began := time.Now() // before the deadline is set: a timed-out run's Duration is never below its timeout
	runCtx, cancel := context.WithTimeoutCause(ctx, timeout, errTimedOut)
	defer cancel()
	if _, err := w.ctl.Write([]byte(rel + "\n")); err != nil {
		out.finish()
		return fail(false)
	}
	res, err = e.await(ctx, runCtx, w.proc, out, began)
	<-w.ctlDone // the tree is gone: "G" was read, or the socket ended
	_ = w.ctl.Close()
	if !closed(w.started) && !res.TimedOut && err == nil {
		e.warm.count(false, false, true)
		return executors.Result{}, false, nil
	}
	e.warm.count(true, false, false)
	return res, true, err
}
