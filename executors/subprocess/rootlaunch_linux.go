package subprocess

import (
	"fmt"
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"
)

// startInRoot starts cmd from a new OS thread that has a mount namespace
// of its own, turned into plan's minimal root (rootPlan.build), and
// no_new_privs. The child inherits the thread's mount namespace, root and
// cwd, so the launch chain execs the root's /bin/sh and interpreter and
// cannot reach a host path. The Go runtime offers no hook between fork and
// exec, and a helper binary to build the root would cost milliseconds per
// run (see "Launch chain"); a thread costs a few mount(2) calls.
//
// The thread lives until release is closed, which the caller does once
// the child is reaped: Pdeathsig fires when the thread that forked the
// child exits. The goroutine then returns still locked, so the runtime
// destroys the thread and its namespace with it instead of reusing it.
func startInRoot(cmd *exec.Cmd, plan rootPlan, stage string) (release chan struct{}, err error) {
	release = make(chan struct{})
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread must not be reused
		if err := enterPrivateRoot(plan, stage); err != nil {
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

func enterPrivateRoot(plan rootPlan, stage string) error {
	if err := unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_FS); err != nil {
		return fmt.Errorf("%w: unshare: %w", errRootBuild, err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	return plan.build(stage)
}
