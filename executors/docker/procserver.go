package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"
)

// The process server of a session sandbox (issue 34). A session
// sandbox's commands were each a `docker exec`: about 50 ms of the
// engine's and runc's on the path of every E2B command, the first one
// included. Under runc, the sandbox's main process is now a small
// server (procServerPython) that starts each command itself, as E2B's
// envd does: the gateway connects to its Unix socket, passes the
// command's stdin, stdout and stderr (pipes of its own) with SCM_RIGHTS,
// and the server forks, takes the command's identity and execs it. The
// command sees what an exec gave it: the container's environment with
// the request's on top, the uid and gid with the gid as its only
// supplementary group, no capability in any set, no signal ignored or
// blocked, a session of its own (setsid, as runc's exec makes one), the
// working directory asked for. Its parent is the server (an exec's is
// outside the sandbox: pid 0), which is the one difference a command can
// observe; the conformance suite's checks hold in both.
//
// The server runs as root with CAP_SETUID, CAP_SETGID and CAP_SETPCAP
// only (what the identity change needs), under docker-init, for the
// sandbox's life; a command's uid can neither signal nor trace it. Its
// socket is in a directory of the gateway's (the slot's ctl directory,
// mode 0700, owned by root) mounted at procServerDir: no command can
// reach it, and the server also refuses any peer but root. It refuses a
// request for uid or gid 0.
//
// Under a runtime with its own kernel (gVisor) a file descriptor cannot
// cross into the sandbox, and a gateway that is not root cannot make
// the slot: those sandboxes keep `sleep infinity` and an exec per
// command (session_exec.go).

// procServerDir is where a sandbox sees its server's directory.
const procServerDir = "/run/sandgate/ctl"

// procServerReady is the line the server writes to its stdout once it
// listens; then it closes its streams.
const procServerReady = "sandgate-procserver-ready"

// procServerPython is the server, fixed text. argv[1] is its directory.
// One connection is one command: a request line of JSON (uid, gid, cwd,
// env, argv) sent with three descriptors (stdin, stdout, stderr); the
// answer is one line, "exit N" when the command ended (128+n for a
// signal), "fail <reason>" when it could not start (nothing ran), or
// "bad" for a request it refuses. A child reports a failure before its
// exec on a close-on-exec pipe, as subprocess does.
const procServerPython = `import ctypes, json, os, signal, socket, struct, sys, threading
import warnings  # os.execvpe imports it: a child no longer root may not read the library
libc = ctypes.CDLL(None, use_errno=True)
ENV = dict(os.environ)
` + pyIdentity + `def child(req, fds, w):
    try:
        for i, fd in enumerate(fds):
            os.dup2(fd, i)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        os.setsid()
        drop(libc, ctypes, req["uid"], req["gid"])
        defaults(libc, ctypes, signal)
        env = dict(ENV)
        env.update(kv.split("=", 1) for kv in req["env"])
        os.chdir(req["cwd"])
        os.execvpe(req["argv"][0], req["argv"], env)
    except BaseException as e:
        try:
            os.write(w, (type(e).__name__ + ": " + str(e))[:200].encode("utf-8", "replace"))
        finally:
            os._exit(127)
def valid(req):
    ok = lambda v: isinstance(v, str) and "\0" not in v
    return (isinstance(req, dict) and all(type(req.get(k)) is int and 0 < req[k] < 2**31 for k in ("uid", "gid"))
            and ok(req.get("cwd")) and req["cwd"].startswith("/")
            and isinstance(req.get("argv"), list) and req["argv"] and all(ok(a) for a in req["argv"])
            and isinstance(req.get("env"), list) and all(ok(a) and "=" in a for a in req["env"]))
def serve(c):
    fds = []
    try:
        pid, uid, gid = struct.unpack("3i", c.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        if uid != 0:
            return
        buf = b""
        while not buf.endswith(b"\n") and len(buf) < 1 << 20:
            data, got, _, _ = socket.recv_fds(c, 65536, 3)
            fds += got
            if not data:
                return
            buf += data
        try:
            req = json.loads(buf)
        except ValueError:
            req = None
        if len(fds) != 3 or not valid(req):
            c.sendall(b"bad\n")
            return
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            child(req, fds, w)
        os.close(w)
        for fd in fds:
            os.close(fd)
        fds = []
        err = b""
        while True:
            b = os.read(r, 256)
            if not b:
                break
            err += b
        os.close(r)
        _, status = os.waitpid(pid, 0)
        if err:
            c.sendall(b"fail " + err.replace(b"\n", b" ") + b"\n")
            return
        code = os.waitstatus_to_exitcode(status)
        c.sendall(b"exit %d\n" % (128 - code if code < 0 else code))
    except OSError:
        pass
    finally:
        for fd in fds:
            os.close(fd)
        c.close()
os.umask(0o077)
path = os.path.join(sys.argv[1], "s")
try:
    os.unlink(path)
except FileNotFoundError:
    pass
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(path)
srv.listen(64)
os.write(1, b"` + procServerReady + `\n")
null = os.open("/dev/null", os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
os.close(null)
while True:
    c, _ = srv.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
`

// slotCtl is slot's directory for the process server's socket.
func slotCtl(slot string) string { return filepath.Join(slot, "ctl") }

// procServerSocket is the host path of the server's socket in slot.
func procServerSocket(slot string) string { return filepath.Join(slotCtl(slot), "s") }

// makeCtl makes slot's ctl directory: root's alone.
func makeCtl(slot string) error {
	if err := os.Mkdir(slotCtl(slot), 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return nil
}

// removeCtl removes slot's ctl directory and the socket in it.
func removeCtl(slot string) {
	_ = os.Remove(procServerSocket(slot))
	_ = os.Remove(slotCtl(slot))
}

// procServerCommand makes o a session sandbox's container whose main
// process is the process server, its directory slot's ctl.
func procServerCommand(slot string) func(*client.ContainerCreateOptions) {
	return func(o *client.ContainerCreateOptions) {
		o.HostConfig.Mounts = append(o.HostConfig.Mounts, mount.Mount{Type: mount.TypeBind, Source: slotCtl(slot), Target: procServerDir})
		o.HostConfig.CapAdd = []string{"SETUID", "SETGID", "SETPCAP"}
		o.Config.User = "0:0"
		o.Config.WorkingDir = "/"
		o.Config.Entrypoint = []string{"python3", "-I", "-S", "-c", procServerPython, procServerDir}
		o.Config.Cmd = nil
		o.Config.StdinOnce = false
		o.Config.OpenStdin = false
		o.Config.AttachStdin = false
	}
}

// awaitProcServer reads b's stdout until the server says it listens,
// then closes the container's streams (nothing else travels on them) and
// sets b.procSock. A server that exits first (an image without python3
// or ctypes) is an error with what it wrote.
func (e *Executor) awaitProcServer(ctx context.Context, b *box) error {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.EngineTimeout)
	defer cancel()
	conn := b.conn
	b.conn = client.HijackedResponse{}
	defer conn.Close()
	w := &readyWriter{ready: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		// The stream is multiplexed (no TTY); it ends when the server
		// exits or the streams are closed below.
		_, err := stdcopy.StdCopy(w, w, conn.Reader)
		done <- fmt.Errorf("process server did not start: %.200q: %w", w.seen(), errors.Join(err, io.EOF))
	}()
	select {
	case <-w.ready:
		b.procSock = procServerSocket(b.slot)
		return nil
	case err := <-done:
		return e.unavailable("session sandbox", err)
	case <-ctx.Done():
		return e.unavailable("session sandbox: the process server did not start", context.Cause(ctx))
	}
}

// readyWriter collects what the process server writes before it
// listens and closes ready at its ready line.
type readyWriter struct {
	mu    sync.Mutex
	buf   []byte
	ready chan struct{}
}

func (w *readyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) < 4096 {
		w.buf = append(w.buf, p...)
	}
	if bytes.Contains(w.buf, []byte(procServerReady+"\n")) {
		select {
		case <-w.ready:
		default:
			close(w.ready)
		}
	}
	return len(p), nil
}

func (w *readyWriter) seen() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.buf)
}

// procServers reports whether session sandboxes run a process server:
// under runc, with slots (a root gateway and a local engine).
func (e *Executor) procServers() bool { return !e.cfg.OwnKernel && e.pool.slots }

// launchProcServer creates and starts a session sandbox whose main
// process is the process server, in a slot of its own, and waits until
// the server listens.
func (e *Executor) launchProcServer(ctx context.Context, sh shape, labels map[string]string) (*box, error) {
	slot, err := e.pool.newSlot()
	if err != nil {
		return nil, e.unavailable("session sandbox slot", err)
	}
	b, err := e.launch(ctx, sh, labels, procServerCommand(slot))
	if err != nil {
		removeSlot(slot)
		return nil, err
	}
	b.slot = slot
	b.release = func() { removeSlot(slot) }
	if err := e.awaitProcServer(ctx, b); err != nil {
		e.discard(b)
		return nil, err
	}
	return b, nil
}
