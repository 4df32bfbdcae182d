package subprocess

import (
	"errors"
	"fmt"
	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/process"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// initScript is the init step between fork and the interpreter. The shell
// runs as root, as PID 1 of the run's new PID namespace (with Pdeathsig set
// by Go, so it dies with the gateway): it sets the rlimits on itself so
// every descendant inherits them, then forks unshare(1), which makes a new
// mount namespace (propagation private), mounts a fresh /proc for the new
// PID namespace and drops to the sandbox uid/gid before exec'ing the
// interpreter. The shell stays as PID 1 on purpose: the uid change clears
// the interpreter's Pdeathsig, and when PID 1 dies the kernel kills every
// process of the namespace, setsid'd and double-forked ones included.
// "exit $?" keeps the shell from replacing itself with its last command.
// RLIMIT_NPROC is -p in dash and -u in bash; ulimit's units (-v KiB, -f
// 512-byte blocks) are what New's probe checks against /proc/self/limits.
const initScript = `umask 022
ulimit -c 0 && ulimit -t "$1" && ulimit -v "$2" && ulimit -n "$3" && ulimit -f "$5" || exit 125
ulimit -p "$4" 2>/dev/null || ulimit -u "$4" || exit 125
shift 5
"$@"
exit $?`

// execScript is the init step in user-namespace mode: the same rlimits
// but RLIMIT_NPROC ($4 is skipped), then the shell replaces itself with
// bubblewrap (no credential change happens after Go's fork, so Pdeathsig
// survives the exec, and bubblewrap's --die-with-parent carries it on).
// RLIMIT_NPROC is set inside the run's user namespace instead (nprocScript):
// out here it would count every task of the gateway's uid, the gateway's
// own threads and every other run, and bubblewrap could not even make the
// namespaces under a small budget. Inside, the kernel counts the sandbox
// uid's tasks of that namespace only: the run's own.
const execScript = `umask 022
ulimit -c 0 && ulimit -t "$1" && ulimit -v "$2" && ulimit -n "$3" && ulimit -f "$5" || exit 125
shift 5
exec "$@"`

// nprocScript runs inside the user namespace, before the interpreter: it
// sets RLIMIT_NPROC ($1) and replaces itself with argv.
// With "egress" as $2 (a run granted network, IsolationUserNS), it
// starts the egress forwarder and waits until it listens first.
var nprocScript = `ulimit -p "$1" 2>/dev/null || ulimit -u "$1" || exit 125
if [ "$2" = egress ]; then
` + executors.EgressForwarderStart + executors.EgressForwarderReady + `fi
shift 2
exec "$@"`

// initArg0 names the init step in ps output and lets the probe recognise it.
const initArg0 = "sandgate-init"

// launch describes one process to start.
type launch struct {
	argv   []string // interpreter and its arguments
	limits process.Rlimits
	dir    string
	env    []string
	// bridge, when set, is the network namespace the launch joins: the
	// run's egress bridge (egress_linux.go). Otherwise the launch gets a
	// new network namespace with only lo, down.
	bridge *netBridge
	// egress is the run's way to the egress proxy and egressID what the
	// launch's environment and root say about it ("" without network):
	// the warm and zygote matches compare egressID, since an interpreter
	// read its environment when it started.
	egress   executors.Egress
	egressID string
	uid      int // sandbox identity of this run
	gid      int
	// root is the run's minimal root: built by startInRoot in namespaces
	// mode, by bubblewrap (rootPlan.bwrapArgs) in user-namespace mode.
	root *rootPlan
	// zygote starts a session's zygote: root, a private mount namespace
	// of its own but no /proc of its own (each run mounts one), and
	// unlimited rlimits except open files (each run sets its own).
	zygote bool
	// slot, for a pooled zygote, stands in for the workspace and the
	// program directory until a claim (zygote_pool_slots_linux.go); its
	// mount namespace keeps the slot's mounts slaves, so the claim's
	// mounts reach it.
	slot *zslot
}

// command builds the exec.Cmd for l under the executor's isolation. The
// caller sets Stdout, Stderr, WaitDelay and, for a warm process,
// ExtraFiles; killing is proc's job.
func (e *Executor) command(l launch) *exec.Cmd {
	if e.isolation == IsolationUserNS {
		cmd := e.bwrapCommand(l)
		cmd.Env = l.env
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		return cmd
	}
	args := []string{"-c", initScript, initArg0}
	args = append(args, l.limits.UlimitValues()...)
	if l.zygote && l.slot != nil {
		args = append(args, e.unshare, "--mount", "--propagation", "slave", "--")
	} else if l.zygote {
		args = append(args, e.unshare, "--mount", "--")
	} else {
		args = append(args, e.unshare, "--mount-proc",
			"--setuid", strconv.Itoa(l.uid), "--setgid", strconv.Itoa(l.gid), "--")
	}
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Cloneflags: syscall.CLONE_NEWPID}
	if l.bridge == nil {
		attr.Cloneflags |= syscall.CLONE_NEWNET
	}
	args = append(args, l.argv...)
	cmd := exec.Command(e.cfg.Shell, args...)
	cmd.Args[0] = initArg0
	cmd.Dir = workspaceMount // inside the run's root (startInRoot)
	if l.root != nil {
		cmd.Dir = l.root.layout.Dir()
	}
	cmd.Env = l.env
	cmd.SysProcAttr = attr
	return cmd
}

// sealInheritedFDs sets close-on-exec on every descriptor above 2 the
// gateway process holds without it. Go opens its own descriptors
// close-on-exec, but ones the gateway inherited from its parent (a
// supervisor's, a test runner's, socket activation's) are not, and
// os/exec passes every such descriptor on: without this, each run would
// get them, and a warm run (whose start-up closes 3..handoffFD-1) would
// not see the same ones as a cold run. The gateway's own use of them is
// unaffected. It runs once per process; first is true for that call.
func sealInheritedFDs() (fds []int, first bool) {
	sealOnce.Do(func() { fds, first = sealFDs(), true })
	return fds, first
}

var sealOnce sync.Once

func sealFDs() []int {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil
	}
	var sealed []int
	for _, ent := range entries {
		fd, err := strconv.Atoi(ent.Name())
		if err != nil || fd < 3 {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC != 0 {
			continue
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, flags|unix.FD_CLOEXEC); err == nil {
			sealed = append(sealed, fd)
		}
	}
	return sealed
}

// spawner starts every child from one dedicated OS thread that has
// PR_SET_NO_NEW_PRIVS set, so the sandboxed code inherits no_new_privs
// without an extra exec (setpriv --nnp would cost about 1.3 ms a run):
// setuid-root and file-capability binaries on the host cannot raise its
// privileges. no_new_privs is a per-thread attribute and the Go runtime
// never clones new threads from a locked one, so the rest of the gateway is
// unaffected. The thread is never released: Pdeathsig fires when the thread
// that forked a child exits, and this one lives as long as the gateway.
type spawner struct {
	reqs chan spawnReq
}

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

var sharedSpawner = sync.OnceValues(func() (*spawner, error) {
	s := &spawner{reqs: make(chan spawnReq)}
	ready := make(chan error, 1)
	go s.loop(ready)
	return s, <-ready
})

func (s *spawner) loop(ready chan<- error) {
	runtime.LockOSThread() // never unlocked, see spawner
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		ready <- fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", err)
		return // the locked thread exits with the goroutine
	}
	ready <- nil
	for r := range s.reqs {
		r.done <- r.cmd.Start()
	}
}

// start runs cmd.Start on the spawner thread.
func start(cmd *exec.Cmd) error {
	s, err := sharedSpawner()
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	s.reqs <- spawnReq{cmd: cmd, done: done}
	return <-done
}

// ErrWorkspaceUnreachable is returned when a directory above the workspace
// cannot be traversed by the sandbox uid. The run would start (the cwd is
// set while still root) but every absolute path into the workspace, and
// Node's module loader, would fail. The workspace root should be mode 0711:
// traversable, not listable.
var ErrWorkspaceUnreachable = errors.New("workspace ancestors not traversable by the sandbox uid")

func checkAncestors(dir string, uid, gid int) error {
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			return fmt.Errorf("stat %s: %w", p, err)
		}
		ok := st.Mode&0o001 != 0 ||
			(int(st.Uid) == uid && st.Mode&0o100 != 0) ||
			(int(st.Gid) == gid && st.Mode&0o010 != 0)
		if !ok {
			return fmt.Errorf("%w: %s (mode %#o)", ErrWorkspaceUnreachable, p, st.Mode&0o7777)
		}
		if p == "/" {
			return nil
		}
	}
}
