# sandgate kernel driver (executors/kernel, see doc.go).
#
# Runs inside the sandbox, as the sandbox's user, next to one IPython
# kernel it starts itself. It speaks the Jupyter messaging protocol to the
# kernel through jupyter_client (Debian's python3-jupyter-client) and JSON
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
    from jupyter_client.manager import KernelManager  # noqa: E402
except ImportError:
    emit_early = '{"ev":"fatal","message":"jupyter_client is missing from the image (make images)"}\n'
    _proto.write(emit_early)
    _proto.flush()
    sys.exit(1)

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


def emit(ev, **kw):
    kw["ev"] = ev
    _proto.write(json.dumps(kw, separators=(",", ":")) + "\n")
    _proto.flush()


class Kernel:
    def __init__(self):
        self.km = None
        self.kc = None
        self.dead = False

    def start(self):
        km = KernelManager(kernel_name="python3")
        devnull = open(os.devnull, "r+b")
        km.start_kernel(
            extra_arguments=KERNEL_ARGS,
            cwd=os.getcwd(),
            env=dict(os.environ),
            stdin=devnull,
            stdout=devnull,
            stderr=devnull,
        )
        kc = km.client()
        kc.start_channels()
        try:
            kc.wait_for_ready(timeout=START_TIMEOUT)
        except Exception:
            kc.stop_channels()
            km.shutdown_kernel(now=True)
            raise
        self.km, self.kc, self.dead = km, kc, False

    def stop(self):
        if self.kc is not None:
            try:
                self.kc.stop_channels()
            except Exception:
                pass
        if self.km is not None:
            try:
                self.km.shutdown_kernel(now=True)
            except Exception:
                pass
        self.km = self.kc = None

    def restart(self):
        self.stop()
        self.start()

    def alive(self):
        return self.km is not None and not self.dead and self.km.is_alive()

    def exit_status(self):
        try:
            code = self.km.provisioner.process.poll()
        except Exception:
            return -1
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
    msg_id = k.kc.execute(req.get("code", ""), store_history=True, allow_stdin=False, stop_on_error=False)
    deadline = time.monotonic() + timeout
    hard = None
    timed_out = False
    idle = False
    reply = None
    while not (idle and reply is not None):
        now = time.monotonic()
        if hard is None and (now >= deadline or interrupted(inbox)):
            timed_out = now >= deadline
            k.km.interrupt_kernel()
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
                m = k.kc.get_shell_msg(timeout=POLL if idle else 0)
                if m["parent_header"].get("msg_id") == msg_id:
                    reply = m["content"]
            except queue.Empty:
                if idle and not k.km.is_alive():
                    k.dead = True
                    emit("done", status="died", timed_out=timed_out, restarted=restarted, exit_status=k.exit_status(), execution_count=0)
                    return
            if idle:
                continue
        try:
            m = k.kc.get_iopub_msg(timeout=POLL)
        except queue.Empty:
            if not k.km.is_alive():
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
