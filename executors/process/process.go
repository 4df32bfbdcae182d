// Package process is the process control the subprocess executor and
// cmd/sandboxd share (DESIGN.md §6): one representation of a run's
// resource limits, applied by a shell's ulimit builtin before exec or by
// prlimit(2) on a started process; the exit-code convention; and the
// kill of a run's process group. Each backend launches differently (the
// executor's init shell in new namespaces, sandboxd's jobs in a
// container), but what a limit means, how a status becomes an exit code
// and how a tree dies is decided here once.
package process

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Unlimited is the value of a limit that is explicitly lifted (a zygote,
// which each of its runs limits itself).
const Unlimited = -1

// NodeHeadroomMB is added to a node run's address-space limit: V8 reserves
// virtual memory far beyond what it uses (at RLIMIT_AS = 1 GiB Node 20
// starts but a 160 MB array already fails). The heap itself is bounded by
// --max-old-space-size (NodeHeapArgs), so the headroom buys address
// space, not resident memory. WebAssembly memories stay unavailable.
const NodeHeadroomMB = 3072

// NodeHeapArg caps node's old-generation heap at memoryMB.
func NodeHeapArg(memoryMB int) string {
	return "--max-old-space-size=" + strconv.Itoa(memoryMB)
}

// Rlimits are a run's resource limits in the kernel's units. A zero field
// is not set (inherited); Unlimited lifts it. Soft and hard limits are
// always set together, as ulimit does.
type Rlimits struct {
	CPUSeconds        int // RLIMIT_CPU
	AddressSpaceBytes int // RLIMIT_AS
	OpenFiles         int // RLIMIT_NOFILE
	Procs             int // RLIMIT_NPROC: counted per uid by the kernel
	FileSizeBytes     int // RLIMIT_FSIZE
}

// ulimitFlag is one limit as the shell's ulimit builtin takes it: the
// flag and the unit it counts in (-v in KiB, -f in 512-byte blocks).
type ulimitFlag struct {
	flag string
	unit int
	get  func(Rlimits) int
}

var ulimitFlags = []ulimitFlag{
	{"-t", 1, func(r Rlimits) int { return r.CPUSeconds }},
	{"-v", 1024, func(r Rlimits) int { return r.AddressSpaceBytes }},
	{"-n", 1, func(r Rlimits) int { return r.OpenFiles }},
	{"-f", 512, func(r Rlimits) int { return r.FileSizeBytes }},
}

// UlimitValues are CPUSeconds, AddressSpaceBytes, OpenFiles, Procs and
// FileSizeBytes in ulimit's units ("unlimited" where lifted), for a fixed
// script that takes them as positional arguments.
func (r Rlimits) UlimitValues() []string {
	vals := []int{r.CPUSeconds, ulimitUnits(r.AddressSpaceBytes, 1024), r.OpenFiles, r.Procs, ulimitUnits(r.FileSizeBytes, 512)}
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i] = ulimitValue(v)
	}
	return out
}

// UlimitScript is shell text that sets every field r sets, each followed
// by " && ", so that a command can follow; RLIMIT_NPROC is -p in dash and
// -u in bash, so both are tried.
func (r Rlimits) UlimitScript() string {
	var b strings.Builder
	for _, f := range ulimitFlags {
		if v := f.get(r); v != 0 {
			b.WriteString("ulimit " + f.flag + " " + ulimitValue(ulimitUnits(v, f.unit)) + " && ")
		}
	}
	if r.Procs != 0 {
		v := ulimitValue(r.Procs)
		b.WriteString("{ ulimit -p " + v + " 2>/dev/null || ulimit -u " + v + "; } && ")
	}
	return b.String()
}

func ulimitUnits(v, unit int) int {
	if v <= 0 {
		return v
	}
	return v / unit
}

func ulimitValue(v int) string {
	if v == Unlimited {
		return "unlimited"
	}
	return strconv.Itoa(v)
}

// Prlimit applies every field r sets to pid with prlimit(2): only lowering
// is possible without CAP_SYS_RESOURCE.
func (r Rlimits) Prlimit(pid int) error {
	var errs []error
	for _, l := range []struct {
		res int
		v   int
	}{{unix.RLIMIT_CPU, r.CPUSeconds}, {unix.RLIMIT_AS, r.AddressSpaceBytes}, {unix.RLIMIT_NOFILE, r.OpenFiles},
		{unix.RLIMIT_NPROC, r.Procs}, {unix.RLIMIT_FSIZE, r.FileSizeBytes}} {
		if l.v == 0 {
			continue
		}
		v := uint64(l.v)
		if l.v == Unlimited {
			v = unix.RLIM_INFINITY
		}
		if err := unix.Prlimit(pid, l.res, &unix.Rlimit{Cur: v, Max: v}, nil); err != nil {
			errs = append(errs, fmt.Errorf("prlimit %d: %w", l.res, err))
		}
	}
	return errors.Join(errs...)
}

// ExitCode maps a wait status to the shell convention: the exit status, or
// 128+signal for a process killed by a signal.
func ExitCode(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// KillGroup SIGKILLs the process group pid leads, and pid itself (a
// leader that changed its group). It must only be called while pid is not
// yet reaped, so the number cannot have been reused. Both gone is
// os.ErrProcessDone.
func KillGroup(pid int) error { return SignalGroup(pid, unix.SIGKILL) }

// SignalGroup sends sig to the process group pid leads and to pid, as
// KillGroup does.
func SignalGroup(pid int, sig syscall.Signal) error {
	errGroup := unix.Kill(-pid, sig)
	errLeader := unix.Kill(pid, sig)
	if errors.Is(errGroup, unix.ESRCH) && errors.Is(errLeader, unix.ESRCH) {
		return os.ErrProcessDone
	}
	if errLeader != nil && !errors.Is(errLeader, unix.ESRCH) {
		return fmt.Errorf("signal %d: %w", pid, errLeader)
	}
	return nil
}

// AwaitExit blocks until pid has exited without reaping it (WNOWAIT), so
// the caller can still kill its process group by the leader's pid.
func AwaitExit(pid int) error {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}
