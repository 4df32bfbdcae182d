# sandgate kernel driver (executors/kernel, see doc.go).
#
# Runs inside the sandbox, as the sandbox's user, next to one IPython
# kernel it starts itself. It speaks the Jupyter messaging protocol to the
# kernel over ZeroMQ (Debian's python3-zmq, see class Kernel) and JSON
# lines to the executor on its own stdin and stdout:
#
#   in:  {"op": "execute", "code": "...", "timeout_ms": 30000, "max_result_bytes": N}
#        {"op": "interrupt"}   (only meaningful while a cell runs)
#        {"op": "restart"}
#   out: {"ev": "ready"} once, when the first kernel answers
#        {"ev": "stream", "name": "stdout"|"stderr", "text": "..."}
#        {"ev": "display", "data": {mime: value}}   (display_data, execute_result)
#        {"ev": "dropped", "bytes": N}               (a bundle over the cell's result budget)
#        {"ev": "error", "ename": "...", "evalue": "...", "traceback": ["..."]}
#        {"ev": "done", "status": "ok"|"error"|"died", "timed_out": b,
#         "restarted": b, "exit_status": N, "execution_count": N}
#        {"ev": "restarted"}  (answer to op restart)
#        {"ev": "fatal", "message": "..."}  then exit
#
# The code of a cell only ever travels to the kernel; this file is fixed
# text. Nothing here listens on a network: the kernel's ZeroMQ sockets
# are on the sandbox's own loopback, and the sandbox has no other
# interface.
import json
import os
import queue
import sys
import threading
import time
import traceback

# The protocol owns fd 1. Everything else the driver (or a library) prints
# goes to stderr, which the executor logs.
_proto = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
os.dup2(2, 1)
sys.stdout = sys.stderr

# Writable state lives on the sandbox's private /tmp, never in the
# workspace (HOME is /workspace). The inline backend turns figures open at
# the end of a cell into image/png.
for _k, _v in (
    ("IPYTHONDIR", "/tmp/.sandgate-kernel/ipython"),
    ("JUPYTER_RUNTIME_DIR", "/tmp/.sandgate-kernel/runtime"),
    ("JUPYTER_DATA_DIR", "/tmp/.sandgate-kernel/data"),
    ("JUPYTER_CONFIG_DIR", "/tmp/.sandgate-kernel/config"),
    ("MPLCONFIGDIR", "/tmp/.sandgate-kernel/mpl"),
    ("MPLBACKEND", "module://matplotlib_inline.backend_inline"),
    ("JUPYTER_PLATFORM_DIRS", "1"),
    ("PYDEVD_DISABLE_FILE_VALIDATION", "1"),
):
    os.environ.setdefault(_k, _v)
os.makedirs(os.environ["JUPYTER_RUNTIME_DIR"], mode=0o700, exist_ok=True)

try:
    import zmq  # noqa: E402
except ImportError:
    emit_early = '{"ev":"fatal","message":"pyzmq is missing from the image (make images)"}\n'
    _proto.write(emit_early)
    _proto.flush()
    sys.exit(1)
import hashlib  # noqa: E402
import hmac  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import uuid  # noqa: E402
from datetime import datetime, timezone  # noqa: E402

# The kernel's command line, as Debian's python3 kernelspec gives it.
KERNEL_CMD = ["/usr/bin/python3", "-m", "ipykernel_launcher", "-f"]
KERNEL_ARGS = [
    "--InteractiveShell.colors=NoColor",  # tracebacks as plain text
    "--HistoryManager.enabled=False",  # no sqlite file; _ and Out still work
    "--IPKernelApp.quiet=True",
]
# Seconds a cell has to stop after KeyboardInterrupt before the kernel is
# restarted; renewed when its traceback or a status change comes (on a
# loaded machine the way to idle may take a while).
INTERRUPT_GRACE = 5.0
START_TIMEOUT = 120.0
POLL = 0.05
DELIM = b"<IDS|MSG>"


def emit(ev, **kw):
    kw["ev"] = ev
    _proto.write(json.dumps(kw, separators=(",", ":")) + "\n")
    _proto.flush()


def free_ports(n):
    """n distinct free loopback ports: every socket stays bound until all
    are chosen, so no two channels get the same one."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            socks.append(s)
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class Kernel:
    """One IPython kernel and the Jupyter messaging the driver needs of
    it: execute requests on the shell channel, their output on iopub,
    interrupts as SIGINT to the kernel's process group, and kill. It is
    written on pyzmq alone: jupyter_client's KernelManager and client
    held about 40 MB more of the driver's memory, which every pause's
    checkpoint image carried and every resume read back."""

    ctx = zmq.Context.instance()

    def __init__(self):
        self.proc = None
        self.shell = self.iopub = None
        self.conn_file = None
        self.dead = False

    def start(self):
        key = uuid.uuid4().hex
        self.key = key.encode()
        self.session = uuid.uuid4().hex
        names = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")
        ports = dict(zip(names, free_ports(len(names))))
        info = dict(ports, ip="127.0.0.1", key=key, transport="tcp", signature_scheme="hmac-sha256", kernel_name="python3")
        self.conn_file = os.path.join(os.environ["JUPYTER_RUNTIME_DIR"], "kernel-%s.json" % self.session)
        env = dict(os.environ)
        env["JPY_PARENT_PID"] = str(os.getpid())  # the kernel exits with the driver
        try:
            fd = os.open(self.conn_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(info, f)
            with open(os.devnull, "r+b") as devnull:
                self.proc = subprocess.Popen(
                    KERNEL_CMD + [self.conn_file] + KERNEL_ARGS,
                    cwd=os.getcwd(), env=env, stdin=devnull, stdout=devnull, stderr=devnull, start_new_session=True,
                )
        except Exception:
            self.stop()
            raise
        self.shell = self.ctx.socket(zmq.DEALER)
        self.shell.linger = 0
        self.shell.connect("tcp://127.0.0.1:%d" % ports["shell_port"])
        self.iopub = self.ctx.socket(zmq.SUB)
        self.iopub.linger = 0
        self.iopub.setsockopt(zmq.SUBSCRIBE, b"")
        self.iopub.connect("tcp://127.0.0.1:%d" % ports["iopub_port"])
        self.dead = False
        try:
            self.wait_for_ready()
        except Exception:
            self.stop()
            raise

    def wait_for_ready(self):
        """Ready is a kernel_info reply on shell and its status on iopub:
        a SUB socket misses what is published before its subscription has
        reached the kernel, so the first cell's output would be lost."""
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if not self.is_alive():
                raise RuntimeError("the kernel exited while starting")
            msg_id = self.send("kernel_info_request", {})
            if not self._reply_to(msg_id, 1.0):
                continue
            end = time.monotonic() + 0.5
            while time.monotonic() < end:
                try:
                    m = self.get_iopub_msg(timeout=0.1)
                except queue.Empty:
                    continue
                if m["parent_header"].get("msg_id") == msg_id:
                    self._drain_iopub()
                    return
        raise RuntimeError("the kernel did not answer in %d s" % START_TIMEOUT)

    def _reply_to(self, msg_id, timeout):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                m = self.get_shell_msg(timeout=max(end - time.monotonic(), 0))
            except queue.Empty:
                return False
            if m["parent_header"].get("msg_id") == msg_id:
                return True
        return False

    def _drain_iopub(self):
        while True:
            try:
                self.get_iopub_msg(timeout=0)
            except queue.Empty:
                return

    def sign(self, frames):
        h = hmac.new(self.key, digestmod=hashlib.sha256)
        for f in frames:
            h.update(f)
        return h.hexdigest().encode()

    def send(self, msg_type, content):
        msg_id = uuid.uuid4().hex
        header = {"msg_id": msg_id, "msg_type": msg_type, "username": "sandgate", "session": self.session,
                  "date": datetime.now(timezone.utc).isoformat(), "version": "5.3"}
        frames = [json.dumps(x, ensure_ascii=False).encode("utf-8", "surrogateescape") for x in (header, {}, {}, content)]
        self.shell.send_multipart([DELIM, self.sign(frames)] + frames)
        return msg_id

    def execute(self, code):
        return self.send("execute_request", {"code": code, "silent": False, "store_history": True,
                                             "user_expressions": {}, "allow_stdin": False, "stop_on_error": False})

    def _recv(self, sock, timeout):
        if not sock.poll(int(timeout * 1000)):
            raise queue.Empty
        frames = sock.recv_multipart()
        i = frames.index(DELIM) if DELIM in frames else len(frames)
        sig, rest = frames[i + 1:i + 2], frames[i + 2:i + 6]
        if len(rest) != 4 or not hmac.compare_digest(sig[0], self.sign(rest)):
            raise queue.Empty  # malformed or not signed with the key: ignored
        # ipykernel encodes with surrogateescape: a cell may send bytes
        # that are not UTF-8 (a file name, os.fsdecode), shown replaced.
        header, parent, _meta, content = (json.loads(f.decode("utf-8", "replace")) for f in rest)
        return {"header": header, "parent_header": parent, "msg_type": header.get("msg_type"), "content": content}

    def get_shell_msg(self, timeout):
        return self._recv(self.shell, timeout)

    def get_iopub_msg(self, timeout):
        return self._recv(self.iopub, timeout)

    def signal(self, signum):
        try:
            os.killpg(self.proc.pid, signum)
        except OSError:
            try:
                self.proc.send_signal(signum)
            except OSError:
                pass

    def interrupt(self):
        self.signal(signal.SIGINT)

    def is_alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        for s in (self.shell, self.iopub):
            if s is not None:
                s.close()
        self.shell = self.iopub = None
        if self.proc is not None:
            self.signal(signal.SIGKILL)
            try:
                self.proc.wait(timeout=5)
            except Exception:
                pass
        if self.conn_file:
            try:
                os.unlink(self.conn_file)
            except OSError:
                pass
        self.conn_file = None

    def restart(self):
        self.stop()
        self.proc = None
        self.start()

    def alive(self):
        return self.proc is not None and not self.dead and self.is_alive()

    def exit_status(self):
        code = self.proc.poll() if self.proc is not None else None
        if code is None:
            return -1
        return 128 - code if code < 0 else code


def run_cell(k, req, inbox):
    restarted = False
    if not k.alive():
        k.restart()
        restarted = True
    budget = int(req.get("max_result_bytes") or 0)
    timeout = max(float(req.get("timeout_ms") or 30000) / 1000.0, 0.001)
    msg_id = k.execute(req.get("code", ""))
    deadline = time.monotonic() + timeout
    hard = None
    timed_out = False
    idle = False
    reply = None
    while not (idle and reply is not None):
        now = time.monotonic()
        if hard is None and (now >= deadline or interrupted(inbox)):
            timed_out = now >= deadline
            k.interrupt()
            hard = now + INTERRUPT_GRACE
        if hard is not None and now >= hard:
            # The cell ignored KeyboardInterrupt: the kernel is restarted
            # now (its state is lost) so the session stays usable.
            k.restart()
            emit("stream", name="stderr", text="sandgate: the cell did not stop when interrupted; the kernel was restarted\n")
            emit("done", status="error", timed_out=timed_out, restarted=restarted, lost=True, exit_status=-1, execution_count=0)
            return
        if reply is None:
            # Once the kernel has gone idle only its reply is missing, and
            # nothing more comes on iopub: wait on the shell channel then.
            # (Polling it while blocking on iopub stalled about one cell in
            # two by a whole POLL, when idle was read before the reply.)
            try:
                m = k.get_shell_msg(timeout=POLL if idle else 0)
                if m["parent_header"].get("msg_id") == msg_id:
                    reply = m["content"]
            except queue.Empty:
                if idle and not k.is_alive():
                    k.dead = True
                    emit("done", status="died", timed_out=timed_out, restarted=restarted, exit_status=k.exit_status(), execution_count=0)
                    return
            if idle:
                continue
        try:
            m = k.get_iopub_msg(timeout=POLL)
        except queue.Empty:
            if not k.is_alive():
                k.dead = True
                emit("done", status="died", timed_out=timed_out, restarted=restarted, exit_status=k.exit_status(), execution_count=0)
                return
            continue
        if m["parent_header"].get("msg_id") != msg_id:
            continue
        if hard is not None and m["msg_type"] in ("error", "status"):
            # The interrupt landed (its traceback) or the kernel is going
            # idle: it is stopping, only slowly. A cell that keeps printing
            # instead does not renew its grace.
            hard = time.monotonic() + INTERRUPT_GRACE
        budget = forward(m, budget)
        if m["msg_type"] == "status" and m["content"].get("execution_state") == "idle":
            idle = True
    emit(
        "done",
        status=reply.get("status", "error"),
        timed_out=timed_out,
        restarted=restarted,
        exit_status=0,
        execution_count=reply.get("execution_count") or 0,
    )


def forward(m, budget):
    t, c = m["msg_type"], m["content"]
    if t == "stream":
        emit("stream", name=c.get("name", "stdout"), text=c.get("text", ""))
    elif t in ("display_data", "execute_result", "update_display_data"):
        data = c.get("data") or {}
        size = len(json.dumps(data))
        if size > budget:
            emit("dropped", bytes=size)
            return budget
        emit("display", data=data)
        return budget - size
    elif t == "error":
        emit("error", ename=c.get("ename", ""), evalue=c.get("evalue", ""), traceback=c.get("traceback", []))
    return budget


def interrupted(inbox):
    """Reports whether an interrupt arrived while a cell runs; any other
    request (or the end of stdin) is kept for the main loop."""
    seen = False
    while True:
        try:
            req = inbox.q.get_nowait()
        except queue.Empty:
            return seen
        if req is not None and req.get("op") == "interrupt":
            seen = True
        else:
            inbox.later.append(req)


class Inbox:
    def __init__(self):
        self.q = queue.Queue()
        self.later = []

    def get(self):
        if self.later:
            return self.later.pop(0)
        return self.q.get()


def read_requests(inbox):
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            inbox.q.put(json.loads(line))
        except ValueError:
            inbox.q.put({"op": "invalid"})
    inbox.q.put(None)


def main():
    k = Kernel()
    try:
        k.start()
    except Exception as e:
        emit("fatal", message="kernel start: %s" % type(e).__name__)
        return 1
    emit("ready")
    inbox = Inbox()
    threading.Thread(target=read_requests, args=(inbox,), daemon=True).start()
    while True:
        req = inbox.get()
        if req is None:
            break
        op = req.get("op")
        try:
            if op == "execute":
                run_cell(k, req, inbox)
            elif op == "restart":
                k.restart()
                emit("restarted")
            # interrupt between cells: nothing runs, nothing to do
        except Exception as e:
            traceback.print_exc()
            emit("fatal", message="%s: %s" % (op, type(e).__name__))
            break
    k.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
