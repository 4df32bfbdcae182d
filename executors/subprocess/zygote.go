package subprocess

import (
	"bytes"
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/executors"
	runout "github.com/sandgate/sandgate/executors/output"
	"github.com/sandgate/sandgate/executors/process"
)

// zygote is one session's Python zygote process (see zygoteBoot): an
// interpreter that has already started, in the session's namespaces, and
// forks a fresh process tree for each run instead of starting a new
// interpreter. A run then costs three forks (about 1 ms each here) instead
// of the init chain plus an interpreter start-up (about 12 ms of CPU), so
// Python runs of a session cost a fraction of a cold start in latency and
// in CPU, which is what bounds throughput under concurrency.
type zygote struct {
	key     warmKey // limits zero: each run sets its own
	session string
	proc    *proc
	conn    *net.UnixConn // SOCK_SEQPACKET, the zygote's descriptor 100
	ready   chan struct{} // it said "R"
	gone    chan struct{} // its socket ended: dead or dying

	// Guarded by the pool's mutex.
	active   int           // runs using it now
	elem     *list.Element // in the pool's idle list when active == 0
	timer    *time.Timer
	idleGen  uint64 // which idle period timer belongs to
	dropped  bool   // out of the pool: killed when its last run ends
	judged   bool   // counted as broken or working already
	noStarts int    // runs in a row it took but did not start

	// slot is a pooled zygote's (zygote_pool_idle.go): removed once the
	// zygote is gone.
	slot    *zslot
	claimed atomic.Bool // a pooled zygote given to its session
}

// zygoteLimits are the zygote's own rlimits: the gateway's hard limits,
// since a run (root until it drops to the sandbox uid, but perhaps without
// CAP_SYS_RESOURCE) can only lower what it inherits, and each run sets
// its own.
func zygoteLimits() process.Rlimits {
	hard := func(res int) int {
		var r unix.Rlimit
		if err := unix.Getrlimit(res, &r); err != nil || r.Max == unix.RLIM_INFINITY || r.Max > math.MaxInt32 {
			return process.Unlimited
		}
		return int(r.Max)
	}
	return process.Rlimits{CPUSeconds: hard(unix.RLIMIT_CPU), AddressSpaceBytes: hard(unix.RLIMIT_AS),
		OpenFiles: hard(unix.RLIMIT_NOFILE), Procs: hard(unix.RLIMIT_NPROC), FileSizeBytes: hard(unix.RLIMIT_FSIZE)}
}

// zygoteReadyTimeout bounds the wait for a new zygote's "R"; a zygote
// slower than that is killed and the run goes cold.
const zygoteReadyTimeout = 10 * time.Second

// startZygote starts the zygote for runs like ws in session; key is ws's
// key without the limits. It returns once the process is started; ready
// closes when it can serve.
func (e *Executor) startZygote(ws *warmSpec, key warmKey, session string) (*zygote, error) {
	return e.launchZygote(ws.l, key, session, e.zygotes.died)
}

// launchZygote starts a zygote through l's launch chain; onEnd is called
// when its socket ends.
func (e *Executor) launchZygote(l launch, key warmKey, session string, onEnd func(*zygote)) (*zygote, error) {
	l.argv = []string{key.interp, "-I", "-u", "-c", e.zygotes.program}
	l.zygote = true
	l.limits = zygoteLimits()
	conn, child, err := socketPair(unix.SOCK_SEQPACKET, "zygote")
	if err != nil {
		return nil, err
	}
	cmd := e.command(l)
	cmd.WaitDelay = e.cfg.KillGrace
	cmd.ExtraFiles = make([]*os.File, handoffFD-2) // nil entries are closed in the child
	cmd.ExtraFiles[handoffFD-3] = child
	z := &zygote{key: key, session: session, conn: conn,
		ready: make(chan struct{}), gone: make(chan struct{})}
	z.proc, err = e.startLaunch(cmd, l)
	child.Close()
	if err != nil {
		conn.Close()
		return nil, err
	}
	go z.readCtl(func() { onEnd(z) })
	return z, nil
}

// socketPair returns the gateway's end of a new AF_UNIX socket pair as a
// connection and the other end as a file to pass on.
func socketPair(typ int, name string) (*net.UnixConn, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	f := os.NewFile(uintptr(fds[0]), name)
	c, err := net.FileConn(f) // dups the descriptor
	f.Close()
	if err != nil {
		unix.Close(fds[1])
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	return c.(*net.UnixConn), os.NewFile(uintptr(fds[1]), name+"-child"), nil
}

// readCtl waits for "R" and then for the end of the socket.
func (z *zygote) readCtl(onEnd func()) {
	var b [16]byte
	for {
		n, err := z.conn.Read(b[:])
		if n == 1 && b[0] == 'R' && !closed(z.ready) {
			close(z.ready)
		}
		if err != nil || n == 0 {
			close(z.gone)
			onEnd()
			return
		}
	}
}

// kill kills the zygote and every run still in it (they are all in its
// PID namespace). The reaper finishes in the background.
func (z *zygote) kill() {
	_ = z.conn.Close()
	z.proc.kill()
}

// runInZygote runs the code file rel in z with l's rlimits and identity.
// served is false when the program did not start (nothing of it ran): the
// caller then runs it cold. healthy is false when z should not serve
// again.
func (e *Executor) runInZygote(ctx context.Context, z *zygote, rel string, l launch, newOut func() *output, timeout time.Duration) (res executors.Result, served, healthy bool, err error) {
	limit := min(timeout, zygoteReadyTimeout)
	if ok, err := z.awaitReady(ctx, limit); !ok {
		// A zygote still starting is kept when this run gave up early (its
		// ctx ended, or its timeout is shorter than a start-up's allowance).
		keep := !closed(z.gone) && (err != nil || limit < zygoteReadyTimeout)
		return executors.Result{}, err != nil, keep, err
	}
	stopBridge, err := e.openBridge(ctx, &l)
	if err != nil {
		return executors.Result{}, true, true, err
	}
	defer stopBridge()
	r, err := z.send(rel, l)
	if err != nil {
		e.log.Warn("zygote: cannot start run", "session_id", z.session, "error", err.Error())
		return executors.Result{}, false, false, nil
	}
	defer r.close()
	out := newOut()
	r.copyOutput(out)
	began := time.Now() // before the deadline is set: a timed-out run's Duration is never below its timeout
	runCtx, cancel := context.WithTimeoutCause(ctx, timeout, errTimedOut)
	defer cancel()
	msgs, deadlineHit, healthy := e.awaitZygoteRun(runCtx, z, r)
	r.drain(e.cfg.KillGrace)
	started, code, ok := parseZygoteCtl(msgs)
	if !started && !deadlineHit {
		out.finish()
		return executors.Result{}, false, healthy && !closed(z.gone), nil
	}
	res = executors.Result{Duration: time.Since(began)}
	res.Stdout, res.Stderr, res.Truncated, res.OutputPath = out.finish()
	switch {
	case deadlineHit && ctx.Err() != nil:
		return res, true, healthy, fmt.Errorf("subprocess: run aborted: %w", context.Cause(ctx))
	case deadlineHit:
		res.ExitCode, res.TimedOut = executors.ExitCodeTimeout, true
	case !ok:
		return res, true, false, errors.New("subprocess: zygote run ended without an exit status")
	default:
		res.ExitCode = code
	}
	return res, true, healthy, nil
}

// awaitReady waits for a new zygote's "R", at most limit. ok is false when
// it died or was too slow (err is nil: the run goes cold) or ctx ended
// (err set).
func (z *zygote) awaitReady(ctx context.Context, limit time.Duration) (ok bool, err error) {
	select {
	case <-z.ready:
		return !closed(z.gone), nil
	default:
	}
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-z.ready:
		return !closed(z.gone), nil
	case <-z.gone:
		return false, nil
	case <-t.C:
		return false, nil
	case <-ctx.Done():
		return false, fmt.Errorf("subprocess: run aborted: %w", context.Cause(ctx))
	}
}

// awaitZygoteRun waits for the end of run r: end-of-file on its control
// socket, which comes once every process of the run is gone. When runCtx
// ends first, it shuts the socket's write side, on which the run's init
// exits and the kernel kills the rest; if that does not end the run within
// KillGrace, the whole zygote is killed. healthy is false then.
func (e *Executor) awaitZygoteRun(runCtx context.Context, z *zygote, r *zygoteRun) (msgs []byte, deadlineHit, healthy bool) {
	select {
	case msgs = <-r.ctlDone:
		return msgs, false, true
	case <-runCtx.Done():
	}
	_ = r.ctl.CloseWrite()
	t := time.NewTimer(e.cfg.KillGrace)
	defer t.Stop()
	select {
	case msgs = <-r.ctlDone:
		return msgs, true, true
	case <-t.C:
	}
	e.log.Warn("zygote: run did not end when cancelled; killing the session's zygote", "session_id", z.session)
	z.kill()
	return <-r.ctlDone, true, false
}

// zygoteRun is the gateway's side of one run in a zygote.
type zygoteRun struct {
	ctl     *net.UnixConn
	pipes   [2]*os.File // read ends of stdout and stderr
	copies  sync.WaitGroup
	ctlDone chan []byte // everything the run's control socket said, at its end
}

// send asks z for a run: the message and the three descriptors.
func (z *zygote) send(rel string, l launch) (*zygoteRun, error) {
	r := &zygoteRun{ctlDone: make(chan []byte, 1)}
	var give []*os.File
	defer func() {
		for _, f := range give {
			f.Close()
		}
	}()
	for i := range r.pipes {
		pr, pw, err := os.Pipe()
		if err != nil {
			r.close()
			return nil, fmt.Errorf("pipe: %w", err)
		}
		r.pipes[i] = pr
		give = append(give, pw)
	}
	ctl, child, err := socketPair(unix.SOCK_STREAM, "zygote-run")
	if err != nil {
		r.close()
		return nil, err
	}
	r.ctl = ctl
	give = append(give, child)
	lim := l.limits
	msg := rel + "\x00" + strconv.Itoa(lim.CPUSeconds) + "\x00" + strconv.Itoa(lim.AddressSpaceBytes) + "\x00" +
		strconv.Itoa(lim.OpenFiles) + "\x00" + strconv.Itoa(lim.Procs) + "\x00" + strconv.Itoa(lim.FileSizeBytes) +
		"\x00" + strconv.Itoa(l.uid) + "\x00" + strconv.Itoa(l.gid) + "\x00" + strconv.FormatInt(l.root.tmpBytes, 10)
	fds := []int{int(give[0].Fd()), int(give[1].Fd()), int(give[2].Fd())}
	if l.bridge != nil {
		fds = append(fds, l.bridge.fd()) // C joins the run's egress bridge
	}
	rights := unix.UnixRights(fds...)
	if _, _, err := z.conn.WriteMsgUnix([]byte(msg), rights, nil); err != nil {
		r.close()
		return nil, fmt.Errorf("send: %w", err)
	}
	go func() { r.ctlDone <- readUntilEOF(r.ctl, 64) }()
	return r, nil
}

// copyOutput copies the run's pipes into out until every writer is gone.
func (r *zygoteRun) copyOutput(out *output) {
	for i, w := range []io.Writer{out.Stdout(), out.Stderr()} {
		r.copies.Add(1)
		go func() {
			defer r.copies.Done()
			_, _ = runout.Copy(w, r.pipes[i])
		}()
	}
}

// drain waits for the output copies, at most grace: once the run's tree
// is gone only a process the run handed a pipe to (in another run of the
// same session) can hold it open, and that must not hold up this run.
func (r *zygoteRun) drain(grace time.Duration) {
	done := make(chan struct{})
	go func() {
		r.copies.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(grace):
		for _, p := range r.pipes {
			p.Close()
		}
		<-done
	}
}

func (r *zygoteRun) close() {
	if r.ctl != nil {
		r.ctl.Close()
	}
	for _, p := range r.pipes {
		if p != nil {
			p.Close()
		}
	}
}

// readUntilEOF reads c to its end, keeping at most keep bytes.
func readUntilEOF(c io.Reader, keep int) []byte {
	var got []byte
	buf := make([]byte, 64)
	for {
		n, err := c.Read(buf)
		if room := keep - len(got); room > 0 {
			got = append(got, buf[:min(n, room)]...)
		}
		if err != nil {
			return got
		}
	}
}

// parseZygoteCtl reads what a run's control socket said: "G" when the
// program started, then "X<status>\n" when it ended.
func parseZygoteCtl(b []byte) (started bool, code int, ok bool) {
	started = bytes.HasPrefix(b, []byte("G"))
	rest, found := bytes.CutPrefix(bytes.TrimPrefix(b, []byte("G")), []byte("X"))
	if !started || !found {
		return started, 0, false
	}
	n, err := strconv.Atoi(string(bytes.TrimSuffix(rest, []byte("\n"))))
	return started, n, err == nil
}
