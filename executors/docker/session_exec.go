package docker

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"strconv"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/output"
)

// sessionRunEnv is the variable every process of one command in a
// session sandbox inherits (its value the request id): the kill sweep
// finds the command's processes by it.
const sessionRunEnv = "SANDGATE_RUN"

// sessionScript is the exec of one command in a session sandbox: the run
// boot script's, with the program read by its length ($2) so that the
// rest of stdin can be the program's ($3 = stdin), and the program file
// removed afterwards (the sandbox outlives many commands). $1 is Node's
// heap cap in MB.
const sessionScript = `umask 022
n=$2 in=$3
IFS=' ' read -r lang id || exit 125
case "$lang" in
python) f=/run/sandgate/code/$id.py; set -- python3 -I -u ;;
bash) f=/run/sandgate/code/$id.sh; set -- bash --noprofile --norc ;;
javascript) f=/run/sandgate/code/$id.js; set -- node --max-old-space-size="$1" ;;
*) echo "sandgate: unknown language" >&2; exit 125 ;;
esac
head -c "$n" >"$f" || exit 125
if [ "$in" = stdin ]; then "$@" "$f"; else "$@" "$f" </dev/null; fi
s=$?
rm -f "$f"
printf '\0\036sandgate-exit:%d\036\0' "$s"
printf '\0\036sandgate-exit:%d\036\0' "$s" >&2
exit "$s"`

// sessionScriptRelay is sessionScript under a runtime with its own
// kernel: the program writes into FIFOs relayed by cat, as
// bootScriptRelay does and for the same reason (gVisor's short writes to
// host pipes). The program's leftovers are not killed here (they are the
// session's now); a leftover that keeps the FIFOs open (a server started
// with `&` and its output not redirected) holds the relays, which are
// stopped two seconds after the program exited, so the command still
// ends: that leftover's later writes to its output then fail (SIGPIPE),
// as they would after a terminal closed. Start background processes with
// their output redirected (nohup cmd >log 2>&1 &), or detached.
const sessionScriptRelay = `umask 022
n=$2 in=$3
IFS=' ' read -r lang id || exit 125
case "$lang" in
python) f=/run/sandgate/code/$id.py; set -- python3 -I -u ;;
bash) f=/run/sandgate/code/$id.sh; set -- bash --noprofile --norc ;;
javascript) f=/run/sandgate/code/$id.js; set -- node --max-old-space-size="$1" ;;
*) echo "sandgate: unknown language" >&2; exit 125 ;;
esac
o=/run/sandgate/code/$id.out e=/run/sandgate/code/$id.err
rm -f "$o" "$e"
mkfifo -m 600 "$o" "$e" || exit 125
cat "$o" & r1=$!
cat "$e" >&2 & r2=$!
head -c "$n" >"$f" || exit 125
if [ "$in" = stdin ]; then "$@" "$f" >"$o" 2>"$e"; else "$@" "$f" </dev/null >"$o" 2>"$e"; fi
s=$?
( sleep 2; kill "$r1" "$r2" ) </dev/null >/dev/null 2>&1 & w=$!
wait "$r1" "$r2"
kill "$w" 2>/dev/null
rm -f "$f" "$o" "$e"
printf '\0\036sandgate-exit:%d\036\0' "$s"
printf '\0\036sandgate-exit:%d\036\0' "$s" >&2
exit "$s"`

// sessionKillScript kills one command's processes in a session sandbox
// (argv[1] its request id): every process whose environment carries its
// marker, every descendant of one, and every process that started since
// the command did (its oldest marked process) and carries no other
// command's marker, which catches a double-forked process that also
// cleared its environment. PID 1 (docker-init) and the sweep itself are
// spared; passes repeat until one kills nothing (a fork racing a pass is
// caught by the next). It removes the command's program and FIFOs.
const sessionKillScript = `import os, signal, sys, glob
run = sys.argv[1]
mark = ("` + sessionRunEnv + `=" + run).encode()
other = b"` + sessionRunEnv + `="
me = os.getpid()
def procs():
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            st = open("/proc/%s/stat" % d, "rb").read()
            f = st[st.rindex(b")") + 2:].split()
            try:
                env = open("/proc/%s/environ" % d, "rb").read().split(b"\0")
            except OSError:
                env = []
            out[int(d)] = (int(f[1]), int(f[19]), env)
        except (OSError, ValueError, IndexError):
            pass
    return out
start = None
for _ in range(10):
    ps = procs()
    ours = {p for p, (pp, t, env) in ps.items() if mark in env}
    if start is None and ours:
        start = min(ps[p][1] for p in ours)
    grew = True
    while grew:
        grew = False
        for p, (pp, t, env) in ps.items():
            if p not in ours and pp in ours:
                ours.add(p); grew = True
    if start is not None:
        for p, (pp, t, env) in ps.items():
            if t >= start and not any(v.startswith(other) for v in env):
                ours.add(p)
    ours -= {1, me}
    killed = 0
    for p in ours:
        try:
            os.kill(p, signal.SIGKILL); killed += 1
        except OSError:
            pass
    if not killed:
        break
for f in glob.glob("/run/sandgate/code/%s.*" % run):
    try:
        os.remove(f)
    except OSError:
        pass
`

// sessionInput is what one command in a session sandbox needs.
type sessionInput struct {
	runInput
	stdinMode bool // the rest of stdin is the program's (a detached run's input)
}

// execInSandbox runs one command in the session's sandbox sb: an exec of
// sessionScript, its streams collected like a run's, killed (the
// command's tree, sessionKillScript) at the timeout or when ctx ends.
func (e *Executor) execInSandbox(ctx context.Context, sb *sessionBox, in sessionInput) (executors.Result, error) {
	script := sessionScript
	if e.cfg.OwnKernel {
		script = sessionScriptRelay
	}
	mode := "-"
	if in.stdinMode {
		mode = "stdin"
	}
	sh := sb.sh
	cmd, err := e.startInSandbox(ctx, sb, append(sandboxEnv(sh), sessionRunEnv+"="+in.requestID),
		[]string{"/bin/sh", "-c", script, "sandgate-run", strconv.Itoa(sh.limits.MemoryMB), strconv.Itoa(len(in.code)), mode})
	if err != nil {
		return executors.Result{}, err
	}
	defer cmd.close()

	rel, shown := output.SpillPaths(in.requestID)
	out := newRunOutput(output.Options{
		Limit: in.limits.MaxOutputBytes, Mask: output.HostPaths(in.dir), SpillPath: shown, Tap: in.tap,
		Spill: output.Spill{
			Limit:   in.limits.MaxSpillBytes,
			Open:    func() (io.WriteCloser, error) { return output.CreateIn(in.dir, rel) },
			OnError: func(err error) { in.log.Warn("spill file", "err", err.Error()) },
		},
	})
	began := time.Now()
	copied := make(chan error, 1)
	go func() { copied <- cmd.copyOut(out.Stdout(), out.Stderr()) }()
	go feedExec(cmd, in.runInput, in.log)

	killedFor, copyErr := e.awaitExec(ctx, sb, in.requestID, in.timeout, copied, out.ended, cmd.stop)
	if sb.b.refill != nil {
		sb.b.refill()
	}
	res, settled, err := runEnd(out, began, killedFor, copyErr)
	if settled {
		return res, err
	}
	code, err := cmd.exit()
	if err != nil {
		return res, e.engineError(ctx, "exit status", errors.Join(err, copyErr))
	}
	res.ExitCode = code
	if code == exitSIGKILL {
		res.OOMKilled = e.oomKilled(sb.b.id)
	}
	return res, nil
}

// feedExec writes the header, the program and (for a detached run with
// input) the rest of stdin to the command, then closes its stdin.
func feedExec(cmd sandboxCmd, in runInput, log *slog.Logger) {
	r := io.MultiReader(bytes.NewReader(stdinHeader(in.lang, in.requestID)), bytes.NewReader([]byte(in.code)))
	if in.stdin != nil {
		r = io.MultiReader(r, in.stdin)
	}
	if _, err := io.Copy(cmd.stdin, r); err != nil {
		log.Debug("write program", "err", err.Error())
	}
	if err := cmd.closeIn(); err != nil {
		log.Debug("close stdin", "err", err.Error())
	}
}

// awaitExec is await for an exec: the kill is the command's tree in the
// sandbox, never the sandbox.
func (e *Executor) awaitExec(ctx context.Context, sb *sessionBox, run string, timeout time.Duration,
	copied <-chan error, ended <-chan struct{}, stop func()) (killedFor, copyErr error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	done := ctx.Done()
	var grace <-chan time.Time
	kill := func(why error) {
		killedFor = why
		deadline.Stop()
		done = nil
		e.killInSandbox(sb, run)
		grace = time.After(e.cfg.KillGrace)
	}
	for {
		select {
		case copyErr = <-copied:
			return killedFor, copyErr
		case <-ended:
			return killedFor, nil
		case <-deadline.C:
			kill(errTimedOut)
		case <-done:
			kill(context.Cause(ctx))
		case <-grace:
			stop() // unblocks the copy
			grace = nil
		}
	}
}

// killInSandbox runs sessionKillScript for one command, as the
// sandbox's uid, and waits for it.
func (e *Executor) killInSandbox(sb *sessionBox, run string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(e.life), e.cfg.EngineTimeout)
	defer cancel()
	// A marker of its own: a sweep another command's timeout runs at the
	// same time leaves this one alone.
	cmd, err := e.startInSandbox(ctx, sb, []string{sessionRunEnv + "=sweep:" + run},
		[]string{"python3", "-I", "-c", sessionKillScript, run})
	if err == nil {
		_ = cmd.closeIn()
		err = cmd.copyOut(io.Discard, io.Discard) // ends when the sweep has
		cmd.close()
	}
	switch {
	case err == nil:
	case sb.b.exit.exited() || errors.Is(err, fs.ErrNotExist):
		// The sandbox was released (its slot and socket removed) or died
		// while the command ran, which a session's delete right after its
		// command does: the command's processes went with it.
		e.log.Debug("kill a command in its session sandbox: the sandbox is gone", "request_id", run, "err", err.Error())
	default:
		e.log.Warn("kill a command in its session sandbox", "request_id", run, "err", err.Error())
	}
}

// execExitCode asks the engine for an exec's exit code once it has ended.
func (e *Executor) execExitCode(id string) (int, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(e.life), e.cfg.EngineTimeout)
	defer cancel()
	for {
		r, err := e.cli.ExecInspect(ctx, id, client.ExecInspectOptions{})
		if err != nil {
			return 0, err
		}
		if !r.Running {
			return r.ExitCode, nil
		}
		select {
		case <-ctx.Done():
			return 0, errors.New("no exit status from the engine")
		case <-time.After(20 * time.Millisecond):
		}
	}
}
