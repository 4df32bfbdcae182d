package main

import (
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// execTrap sets a run's rlimits between its exec and its first instruction.
//
// A program run from its file reads no stdin before it runs, so the
// prlimit(2) gate of a program read from stdin does not apply to it, and
// prlimit after the start could come after the agent's code had run. It
// used to go through a /bin/sh that ran ulimit and then exec'd it: a second
// exec on every run, about a millisecond of a warm run. Instead the child
// asks to be traced (PTRACE_TRACEME) just before its exec; the kernel stops
// it at the exec, when the new program is loaded and has run nothing;
// sandboxd sets the limits and detaches, delivering no signal. The program
// then runs untraced, exactly as it would have: TracerPid is 0, and it may
// itself use ptrace.
//
// A sandbox whose seccomp profile refuses ptrace(2) keeps the shell: probe
// finds that out once, off any run's path, and until it has, runs take the
// shell as before.
type execTrap struct {
	state atomic.Int32 // trapUnknown, trapWorks or trapRefused
}

const (
	trapUnknown int32 = iota
	trapWorks
	trapRefused
)

// works reports whether runs may be stopped at their exec.
func (x *execTrap) works() bool { return x.state.Load() == trapWorks }

// probe stops /bin/true at its exec, detaches, and records whether that
// worked.
func (x *execTrap) probe() {
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err := startTrapped(cmd, func(int) error { return nil })
	if err == nil {
		err = cmd.Wait()
	}
	if err != nil {
		x.state.Store(trapRefused)
		return
	}
	x.state.Store(trapWorks)
}

// startTrapped starts cmd stopped at its exec, calls set with its pid, and
// lets it run. When set or the stop fails, the process is killed and
// reaped, and the error returned.
func startTrapped(cmd *exec.Cmd, set func(pid int) error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := startStopped(cmd, set); err != nil {
		return err
	}
	return resumeStopped(cmd, nil)
}

// startStopped starts cmd, waits for its stop at the exec and calls set
// with its pid; the child stays stopped, traced by this thread, until
// resumeStopped. ptrace's requests are answered only from the thread that
// started the child (the tracer), so the caller locks its OS thread across
// both. When set or the stop fails, the process is killed and reaped, and
// the error returned.
func startStopped(cmd *exec.Cmd, set func(pid int) error) error {
	cmd.SysProcAttr.Ptrace = true
	if err := cmd.Start(); err != nil {
		return err
	}
	err := awaitExecStop(cmd.Process.Pid)
	if err == nil {
		err = set(cmd.Process.Pid)
	}
	if err != nil {
		abandon(cmd)
		return fmt.Errorf("start %s at its exec: %w", cmd.Path, err)
	}
	return nil
}

// resumeStopped lets a child of startStopped run, once hold (when not nil)
// returns nil: it detaches, delivering no signal. When hold fails the child
// is killed and reaped before it has run anything, and the error returned.
func resumeStopped(cmd *exec.Cmd, hold func() error) error {
	if hold != nil {
		if err := hold(); err != nil {
			abandon(cmd)
			return err
		}
	}
	if err := unix.PtraceDetach(cmd.Process.Pid); err != nil {
		abandon(cmd)
		return fmt.Errorf("start %s at its exec: %w", cmd.Path, err)
	}
	return nil
}

// abandon kills and reaps a child that never ran.
func abandon(cmd *exec.Cmd) {
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
}

var errNoExecStop = errors.New("no stop at the exec")

// awaitExecStop waits for the SIGTRAP stop a traced child enters at a
// successful exec. A child killed before it (a sweep) is reaped here and
// reported as an error; the caller's Kill then goes through the process's
// pidfd, so it cannot reach a reused pid.
func awaitExecStop(pid int) error {
	for {
		var ws unix.WaitStatus
		_, err := unix.Wait4(pid, &ws, unix.WALL, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if ws.Stopped() && ws.StopSignal() == unix.SIGTRAP {
			return nil
		}
		return fmt.Errorf("%w: status %#x", errNoExecStop, uint32(ws))
	}
}
