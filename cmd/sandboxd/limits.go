package main

import (
	"github.com/sandgate/sandgate/executors/process"
	"os"

	"golang.org/x/sys/unix"
)

// nodeHeadroomMB is added to a node run's address-space limit. V8 reserves
// virtual memory far beyond what it uses (Node does not start under an
// RLIMIT_AS of a few hundred MB); the heap itself is capped at MemoryMB
// with --max-old-space-size. The subprocess executor uses the same figure
// (subprocess.DefaultNodeAddressSpaceHeadroomMB).
const nodeHeadroomMB = process.NodeHeadroomMB

// appliedLimits are the rlimits one run gets: the request's RunLimits
// (clamped to sandboxd's own hard limits) resolved into what the kernel
// takes.
//
// Memory is RLIMIT_AS on each process, as in the subprocess executor: a
// cgroup of its own per run would be exact, but the container's cgroup
// filesystem is read-only and sandboxd has no capability to change that.
//
// Processes are RLIMIT_NPROC, which the kernel counts per uid, not per
// run: every process and thread of the uid counts, sandboxd's own, the
// browser's included. The budget is therefore
// relative: the tasks of the uid that belong to no live run when the run
// starts, plus MaxProcs. Concurrent runs of the sandbox share that budget
// (each one's limit leaves MaxProcs for all runs together), as concurrent
// runs of one session share it in the subprocess executor, where the
// session's uid is what RLIMIT_NPROC counts. Two things can move it:
// long-lived tasks that start during a run (a browser launched meanwhile)
// tighten it, and ones that end loosen it by as many; the container's pids
// cgroup stays the hard bound. Tasks of the same uid outside this PID
// namespace (the session's runs in another executor) count for the kernel
// but cannot be seen here: they can only tighten it.
type appliedLimits struct {
	runLimits
	// addressSpaceMB is RLIMIT_AS in MiB (0: not set).
	addressSpaceMB int
	// nproc is RLIMIT_NPROC (0: not set).
	nproc int
}

// resolveLimits turns a request's limits into the run's rlimits. headroomMB
// is added to the address space (nodeHeadroomMB for node), and baseline is
// the uid's tasks outside every live run (procBaseline); it is only called
// when MaxProcs is set.
func resolveLimits(lim runLimits, headroomMB int, baseline func() int) appliedLimits {
	a := appliedLimits{runLimits: clampLimits(lim)}
	if lim.MemoryMB > 0 {
		a.addressSpaceMB = clampMB(lim.MemoryMB+headroomMB, unix.RLIMIT_AS)
	}
	if lim.MaxProcs > 0 {
		// Clamped like the address space: prlimit cannot raise a limit
		// past sandboxd's own hard one, and a failed prlimit kills the
		// run (a busy uid's baseline can reach it).
		a.nproc = clampCount(baseline()+lim.MaxProcs, unix.RLIMIT_NPROC)
	}
	return a
}

// clampMB lowers mb to sandboxd's own hard limit of res, in MiB.
// clampCount lowers n to sandboxd's own hard limit for res.
func clampCount(n, res int) int {
	var cur unix.Rlimit
	if unix.Getrlimit(res, &cur) != nil || cur.Max == unix.RLIM_INFINITY {
		return n
	}
	return int(min(uint64(n), cur.Max))
}

func clampMB(mb, res int) int {
	var cur unix.Rlimit
	if unix.Getrlimit(res, &cur) != nil || cur.Max == unix.RLIM_INFINITY {
		return mb
	}
	return int(min(uint64(mb), cur.Max>>20))
}

// procBaseline counts the tasks (threads) of uid in procs that belong to
// no live run: sandboxd itself, the browser, and whatever
// else the sandbox keeps alive. A task belongs to a run when it is in the
// run's process group or below its root, or carries the run's marker.
func procBaseline(procs map[int]proc, uid int, runs []treeRoot, marker func(pid int) (string, bool)) int {
	live := make(map[string]bool, len(runs))
	for _, r := range runs {
		live[r.marker] = true
	}
	n := 0
	for pid, p := range procs {
		if p.uid != uid || inRun(procs, pid, p, runs) {
			continue
		}
		if m, _ := marker(pid); m != "" && live[m] {
			continue
		}
		n += max(p.threads, 1)
	}
	return n
}

func inRun(procs map[int]proc, pid int, p proc, runs []treeRoot) bool {
	for _, r := range runs {
		if p.pgid == r.pid || descends(procs, pid, r.pid) {
			return true
		}
	}
	return false
}

// baselineLocked is procBaseline for this sandboxd's uid and live runs.
// t.mu is held, so no run starts or ends while it counts.
func (t *jobTable) baselineLocked() int {
	runs := make([]treeRoot, 0, len(t.live))
	for _, j := range t.live {
		runs = append(runs, j.root)
	}
	return procBaseline(listProcs(), os.Getuid(), runs, runMarker)
}

// withHeapCap adds --max-old-space-size to a node command line when the
// run has a memory limit: V8 then fails with a heap out-of-memory error at
// the limit instead of growing until the address space runs out.
func withHeapCap(argv []string, lim *runLimits) []string {
	if lim == nil || lim.MemoryMB <= 0 || len(argv) == 0 || argv[0] != "node" {
		return argv
	}
	return append([]string{argv[0], process.NodeHeapArg(lim.MemoryMB)}, argv[1:]...)
}
