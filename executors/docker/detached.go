package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandgate/sandgate/executors"
)

// Detached runs (executors.DetachedHost): a run that outlives the request
// that started it, such as an agent's server that its later commands
// call over loopback.
//
// A session with a session sandbox (Layout.SessionSandbox: E2B's) runs
// its detached runs there instead, as execs beside its other commands
// (session.go); what follows is every other session's way.
//
// Each detached run still gets a container of its own, created like a
// run's (read-only root, every capability dropped, the session's uid, the
// workspace at /workspace, the limits of its decision), so a kill or its
// timeout kills its whole process tree, double-forked processes
// included (kill_detached holds), and nothing it starts outlives it.
//
// What it shares is the session's network namespace. The first detached
// run of a session creates the session's network holder: a container
// with no network but its own loopback, whose only process sleeps. Every
// later container of the session, detached or not, joins the holder's
// namespace (shape.netns), so a server a detached run listens with on
// 127.0.0.1 is reachable from the session's other commands, and from
// nobody else's. The holder is removed when the session is released (or
// at Close); a run's container never holds the namespace, so a server
// that is killed takes nothing else down.
//
// Under a runtime with its own kernel (gVisor) every container has its
// own network stack, loopback included, whatever namespace it joins:
// there a detached run has its own loopback, which the session's other
// commands cannot reach. It is still a detached run (killable, with its
// input and buffered output); the isolation the policy chose for it is
// kept, not traded for the shared loopback.
//
// A run that takes input gets a container of its own whose boot script
// reads exactly the program's length (Cmd's third argument) from stdin
// and hands the rest to the program. One that does not (E2B's default)
// is served like a blocking run, from the session's warm containers when
// it has one ready: only its life differs.

// detachedScript is the boot script of a detached run under runc: the
// run's (bootScript) with the program text read by length, so that the
// rest of stdin is the program's, and stdin inherited.
const detachedScript = `umask 022
n=$3
IFS=' ' read -r lang id || exit 125
case "$lang" in
python) f=/run/sandgate/code/$id.py; set -- python3 -I -u ;;
bash) f=/run/sandgate/code/$id.sh; set -- bash --noprofile --norc ;;
javascript) f=/run/sandgate/code/$id.js; set -- node --max-old-space-size="$1" ;;
*) echo "sandgate: unknown language" >&2; exit 125 ;;
esac
head -c "$n" >"$f" || exit 125
"$@" "$f"
s=$?
printf '\0\036sandgate-exit:%d\036\0' "$s"
printf '\0\036sandgate-exit:%d\036\0' "$s" >&2
exit "$s"`

// detachedScriptRelay is detachedScript for a runtime with its own
// kernel: bootScriptRelay's FIFO relays, for the same reason.
const detachedScriptRelay = `umask 022
n=$3
o=/run/sandgate/code/.out e=/run/sandgate/code/.err
mkfifo -m 600 "$o" "$e" || exit 125
cat "$o" & r1=$!
cat "$e" >&2 & r2=$!
IFS=' ' read -r lang id || exit 125
case "$lang" in
python) f=/run/sandgate/code/$id.py; set -- python3 -I -u ;;
bash) f=/run/sandgate/code/$id.sh; set -- bash --noprofile --norc ;;
javascript) f=/run/sandgate/code/$id.js; set -- node --max-old-space-size="$1" ;;
*) echo "sandgate: unknown language" >&2; exit 125 ;;
esac
head -c "$n" >"$f" || exit 125
"$@" "$f" >"$o" 2>"$e"
s=$?
for _ in 1 2 3 4 5 6 7 8; do
n=0
for d in /proc/[0-9]*; do
p=${d#/proc/}
case "$p" in 1|"$r1"|"$r2") ;; *) kill -9 "$p" 2>/dev/null && n=1 ;; esac
done
[ "$n" = 0 ] && break
done
wait "$r1" "$r2"
printf '\0\036sandgate-exit:%d\036\0' "$s"
printf '\0\036sandgate-exit:%d\036\0' "$s" >&2
exit "$s"`

// Limits of a session's network holder: one sleeping process.
const (
	holderMemoryMB = 16
	holderProcs    = 4
	labelNetHolder = labelPrefix + "netholder"
)

// detachedRuns holds, by session, the network holder and the live
// detached runs.
type detachedRuns struct {
	mu       sync.Mutex
	holders  map[string]*box
	runs     map[string]map[*detachedRun]bool
	starting sync.Mutex // serialises holder creation
	closed   bool
}

func newDetachedRuns() *detachedRuns {
	return &detachedRuns{holders: map[string]*box{}, runs: map[string]map[*detachedRun]bool{}}
}

// netns is the container whose network namespace the session's
// containers join, "" when the session has no holder.
func (d *detachedRuns) netns(session string) string {
	if session == "" {
		return ""
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if b := d.holders[session]; b != nil && !b.exit.exited() {
		return b.id
	}
	return ""
}

// holder returns the session's network holder, creating it on first use.
func (e *Executor) holder(ctx context.Context, session string, sh shape) (string, error) {
	d := e.detached
	d.starting.Lock()
	defer d.starting.Unlock()
	if id := d.netns(session); id != "" {
		return id, nil
	}
	sh.limits.MemoryMB, sh.limits.MaxProcs = holderMemoryMB, holderProcs
	sh.egress, sh.ca, sh.netns = false, "", ""
	labels := e.labels(session, "")
	delete(labels, labelWarm)
	labels[labelNetHolder] = "true"
	b, err := e.launch(ctx, sh, labels, func(o *client.ContainerCreateOptions) {
		o.Config.Entrypoint = []string{"sleep", "infinity"}
		o.Config.Cmd = nil
		o.Config.StdinOnce = false
	})
	if err != nil {
		return "", err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		e.discard(b)
		return "", e.unavailable("executor closed", nil)
	}
	if old := d.holders[session]; old != nil {
		e.discard(old) // it had exited
	}
	d.holders[session] = b
	return b.id, nil
}

// detachedRun is one started detached run.
type detachedRun struct {
	e      *Executor
	stdin  *io.PipeWriter
	cancel context.CancelFunc
	done   chan struct{}
	res    executors.Result
	err    error

	mu     sync.Mutex
	killed bool
}

func (r *detachedRun) Stdin() io.WriteCloser { return r.stdin }

func (r *detachedRun) Kill() {
	r.mu.Lock()
	r.killed = true
	r.mu.Unlock()
	r.cancel()
}

func (r *detachedRun) Wait() (executors.Result, error) {
	<-r.done
	return r.res, r.err
}

// StartDetached implements executors.DetachedHost.
func (e *Executor) StartDetached(ctx context.Context, spec executors.Spec, stdin bool) (executors.Detached, error) {
	if e.closed.Load() {
		return nil, e.unavailable("executor closed", nil)
	}
	if spec.Stateful {
		return nil, fmt.Errorf("%s: a stateful run cannot be detached", e.cfg.Kind)
	}
	if spec.Network {
		// The egress bridge listens on the sandbox's loopback, which a
		// session's detached runs share: fail closed, with the reason.
		return nil, &executors.CapabilityError{Kind: e.cfg.Kind, Missing: []string{executors.CapNetworkGrant},
			Isolation: "detached run"}
	}
	spec, err := e.prologue.Resolve(spec)
	if err != nil {
		return nil, err
	}
	dir, err := checkWorkspace(spec.WorkspaceDir, spec.UID, spec.GID)
	if err != nil {
		return nil, err
	}
	if wantsSandbox(spec) {
		return e.startDetachedInSandbox(ctx, spec, dir, stdin) // session.go
	}
	sh := newShape(e.cfg.Images[spec.Language], dir, spec.UID, spec.GID, spec.Limits, e.cfg.Runtime).withLayout(spec.Layout)
	var b *box
	later := false
	if !e.cfg.OwnKernel && spec.SessionID != "" && !stdin && e.detached.netns(spec.SessionID) == "" {
		b = e.pool.claimPair(ctx, spec.SessionID, sh) // holder and sandbox pre-started (poolpair.go)
	}
	if b == nil {
		if !e.cfg.OwnKernel && spec.SessionID != "" {
			if sh.netns, err = e.holder(ctx, spec.SessionID, sh); err != nil {
				return nil, err
			}
		}
		if b, later, err = e.detachedBox(ctx, spec, sh, stdin); err != nil {
			return nil, err
		}
	} else {
		sh = b.shape
	}
	return e.goDetached(spec, stdin, func(life context.Context, in io.Reader, log *slog.Logger) (executors.Result, error) {
		return e.run(life, b, runInput{
			lang: spec.Language, code: spec.Code, timeout: spec.Timeout, limits: spec.Limits,
			dir: dir, requestID: spec.RequestID, log: log, tap: spec.Output, stdin: in,
		})
	}, func(err error) {
		e.discard(b)
		if later && err == nil {
			e.warm.topUp(spec.SessionID, sh)
		}
	})
}

// goDetached registers a detached run with its session and starts it:
// run does the work with the run's own life (ended by Kill, the
// session's release or Close) and its input, a pipe closed at once
// without stdin so that the program reads EOF and later writes fail.
// after, when not nil, follows the run's end and its feed's. A run
// killed or cancelled ends as SIGKILL (exit 137), not as an error. While
// the executor closes it is refused, and what was made for it is left to
// Close's sweep.
func (e *Executor) goDetached(spec executors.Spec, stdin bool,
	run func(life context.Context, in io.Reader, log *slog.Logger) (executors.Result, error), after func(err error)) (executors.Detached, error) {
	pr, pw := io.Pipe()
	var in io.Reader = pr
	if !stdin {
		in = nil
		_ = pr.CloseWithError(io.ErrClosedPipe)
	}
	life, cancel := context.WithCancel(e.life)
	r := &detachedRun{e: e, stdin: pw, cancel: cancel, done: make(chan struct{})}
	if !e.detached.add(spec.SessionID, r, &e.bg) {
		cancel()
		return nil, e.unavailable("executor closed", nil)
	}
	log := e.log.With("request_id", spec.RequestID, "session_id", spec.SessionID)
	go func() {
		defer e.bg.Done()
		defer close(r.done)
		defer e.detached.remove(spec.SessionID, r)
		res, err := run(life, in, log)
		_ = pr.CloseWithError(io.ErrClosedPipe) // the feed stops; later writes fail
		cancel()
		if after != nil {
			after(err)
		}
		r.mu.Lock()
		killed := r.killed
		r.mu.Unlock()
		if err != nil && (killed || errors.Is(err, context.Canceled)) {
			// Kill, or the session's release: the run was killed.
			res.ExitCode, err = exitSIGKILL, nil
		}
		r.res, r.err = res, err
	}()
	return r, nil
}

// detachedBox is the container of a detached run: with its input, one
// made for it whose boot script hands the program the rest of stdin;
// without, a run's container, warm when the session has one ready, and
// the warm pool is told of the run as Execute tells it (later: top it
// up after the run).
func (e *Executor) detachedBox(ctx context.Context, spec executors.Spec, sh shape, stdin bool) (*box, bool, error) {
	if !stdin {
		arrived := time.Now()
		b, _, err := e.acquire(ctx, spec.SessionID, spec.RequestID, sh)
		if err != nil {
			return nil, false, err
		}
		return b, spec.SessionID != "" && e.warm.replenish(spec.SessionID, arrived, sh), nil
	}
	script := detachedScript
	if e.cfg.OwnKernel {
		script = detachedScriptRelay
	}
	b, err := e.launch(ctx, sh, e.labels(spec.SessionID, spec.RequestID), func(o *client.ContainerCreateOptions) {
		o.Config.Entrypoint = []string{"/bin/sh", "-c", script, bootArg0}
		o.Config.Cmd = []string{strconv.Itoa(sh.limits.MemoryMB), "-", strconv.Itoa(len(spec.Code))}
	})
	return b, false, err
}

// add registers r, and counts the goroutine that will run it in bg,
// unless the executor is closing. Both happen under the lock closeDetached
// takes to mark the set closed, so every run Close does not kill was
// counted before Close waits on bg (a goroutine started after that wait
// began, whose removals then called bg.Add, was a data race: CI trial of
// TestPoolPairServesFirstDetachedRun). false: closed, nothing registered.
func (d *detachedRuns) add(session string, r *detachedRun, bg *sync.WaitGroup) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false
	}
	bg.Add(1)
	if d.runs[session] == nil {
		d.runs[session] = map[*detachedRun]bool{}
	}
	d.runs[session][r] = true
	return true
}

func (d *detachedRuns) remove(session string, r *detachedRun) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.runs[session], r)
	if len(d.runs[session]) == 0 {
		delete(d.runs, session)
	}
}

// release kills the session's detached runs and removes its holder.
func (e *Executor) releaseDetached(session string) {
	d := e.detached
	d.mu.Lock()
	runs := d.runs[session]
	delete(d.runs, session)
	h := d.holders[session]
	delete(d.holders, session)
	d.mu.Unlock()
	for r := range runs {
		r.Kill()
	}
	if h != nil {
		e.discard(h)
	}
}

// closeAll kills every detached run and removes every holder (Close).
func (e *Executor) closeDetached() {
	d := e.detached
	d.mu.Lock()
	d.closed = true
	sessions := make([]string, 0, len(d.holders)+len(d.runs))
	for s := range d.holders {
		sessions = append(sessions, s)
	}
	for s := range d.runs {
		sessions = append(sessions, s)
	}
	d.mu.Unlock()
	for _, s := range sessions {
		e.releaseDetached(s)
	}
}
