package subprocess

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/executors"
)

// baseNS is the executor's base mount namespace (rootPlan.buildBase),
// held open by a descriptor. It is built on first use, and again after
// close (Executor.Close; a run after Close still works, as before).
type baseNS struct {
	mu sync.Mutex
	fd int // -1 or 0 before the first build: see ok
	ok bool
}

// get returns the base namespace, building it when there is none: on a
// thread of its own, which exits afterwards (the descriptor keeps the
// namespace). stage is made when missing.
func (b *baseNS) get(sys, stage string) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ok {
		return b.fd, nil
	}
	if err := os.MkdirAll(stage, 0o700); err != nil {
		return 0, fmt.Errorf("%w: stage: %w", errRootBuild, err)
	}
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread must not be reused
		if err = unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_FS); err != nil {
			err = fmt.Errorf("%w: unshare: %w", errRootBuild, err)
			return
		}
		fd, oerr := unix.Open("/proc/thread-self/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if oerr != nil {
			err = fmt.Errorf("%w: open namespace: %w", errRootBuild, oerr)
			return
		}
		if err = (rootPlan{sys: sys}).buildBase(stage); err != nil {
			unix.Close(fd)
			return
		}
		b.fd, b.ok = fd, true
	}()
	<-done
	return b.fd, err
}

// close releases the namespace; runs already started keep their copies.
func (b *baseNS) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ok {
		unix.Close(b.fd)
		b.ok = false
	}
}

// startInRoot starts cmd from a new OS thread that has a private copy of
// the base namespace, finished into plan's minimal root (enterRun), and
// no_new_privs. The child inherits the thread's mount namespace, root and
// cwd, so the launch chain execs the root's /bin/sh and interpreter and
// cannot reach a host path. The Go runtime offers no hook between fork and
// exec, and a helper binary to build the root would cost milliseconds per
// run (see "Launch chain"); a thread costs a setns, an unshare and a few
// mount(2) calls.
//
// The thread lives until release is closed, which the caller does once
// the child is reaped: Pdeathsig fires when the thread that forked the
// child exits. The goroutine then returns still locked, so the runtime
// destroys the thread and its namespace with it instead of reusing it.
func startInRoot(cmd *exec.Cmd, plan rootPlan, base, netns int, slot *zslot) (release chan struct{}, err error) {
	release = make(chan struct{})
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread must not be reused
		if err := joinNetNS(netns); err != nil {
			started <- err
			return
		}
		if err := enterPrivateRoot(plan, base, slot); err != nil {
			started <- err
			return
		}
		started <- cmd.Start()
		<-release
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return release, nil
}

// enterPrivateRoot finishes the calling thread in plan's root. With a
// slot (a pooled zygote), the workspace and program directory are the
// slot's (zslot.cloneInto), not plan's.
func enterPrivateRoot(plan rootPlan, base int, slot *zslot) error {
	if slot != nil {
		plan.workspace, plan.code = "", ""
	}
	trees, err := plan.cloneTrees()
	if err != nil {
		return err
	}
	defer trees.close()
	// setns into a mount namespace needs a thread that shares no
	// filesystem attributes; it then moves the thread's root and cwd to
	// the base's root.
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("%w: unshare fs: %w", errRootBuild, err)
	}
	if slot != nil {
		if err := slot.cloneInto(trees, plan); err != nil {
			return err
		}
	}
	if err := unix.Setns(base, unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("%w: setns: %w", errRootBuild, err)
	}
	// A UTS namespace of the run's own too: the hostname is the one every
	// sandbox reports (executors.Hostname), never the host's.
	if err := unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_NEWUTS); err != nil {
		return fmt.Errorf("%w: unshare: %w", errRootBuild, err)
	}
	if err := unix.Sethostname([]byte(executors.Hostname)); err != nil {
		return fmt.Errorf("%w: sethostname: %w", errRootBuild, err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	return plan.enterRun(trees)
}
