package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/sandgate/sandgate/executors/process"
	"github.com/sandgate/sandgate/internal/procfs"
)

// markerEnv is the variable every process of one run inherits. It lets the
// kill sweep find descendants that left the run's process group (setsid)
// and were re-parented (double fork). Code can clear it; the orphan rule
// below covers that case inside a container.
const markerEnv = "SANDBOXD_RUN"

// proc is what the kill sweep needs of one process.
type proc struct {
	pid, ppid, pgid, sid int
	start                uint64 // clock ticks since boot
	uid                  int
	threads              int // what RLIMIT_NPROC counts of it
}

// readProc parses /proc/<pid>/stat. ok is false for processes that are
// gone or unreadable.
func readProc(pid int) (p proc, ok bool) {
	s, err := procfs.ReadStat(pid)
	if err != nil {
		return p, false
	}
	p = proc{pid: pid, ppid: s.PPID, pgid: s.PGID, sid: s.SID, threads: s.Threads, start: s.Start}
	fi, err := os.Stat("/proc/" + strconv.Itoa(pid))
	if err != nil {
		return p, false
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		p.uid = int(st.Uid)
	}
	return p, !s.Gone()
}

// listProcs returns every live process this /proc shows.
func listProcs() map[int]proc {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	out := make(map[int]proc, len(dirs))
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		if p, ok := readProc(pid); ok {
			out[pid] = p
		}
	}
	return out
}

// runMarker returns the value of markerEnv in pid's environment ("" for
// none). settled is false while the environment reads empty: a process in
// the middle of execve shows none until the new program's is set up (the
// kernel's environ read returns nothing while the new mm has no env_end),
// nor does one that is exiting. A setsid'd child of a killed run, caught
// in its exec of the program it detaches (a 1 in 12 chance for a tight
// exec loop, measured), would otherwise seem not to be the run's, and the
// sweep ended with it alive (CI).
func runMarker(pid int) (m string, settled bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return "", true // gone, or not ours to read
	}
	if len(b) == 0 {
		return "", false
	}
	for _, kv := range bytes.Split(b, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte(markerEnv+"=")); ok {
			return string(v), true
		}
	}
	return "", true
}

// descends reports whether pid has root among its ancestors (or is root).
func descends(procs map[int]proc, pid, root int) bool {
	for seen := 0; pid > 1 && seen < 4096; seen++ {
		if pid == root {
			return true
		}
		p, ok := procs[pid]
		if !ok {
			return false
		}
		pid = p.ppid
	}
	return false
}

// treeRoot is the identity of one run's process tree.
type treeRoot struct {
	pid    int
	start  uint64
	marker string
}

// sweep describes the processes one kill must reach.
type sweep struct {
	target treeRoot
	// others are the trees of the other live runs and of the browser: never
	// killed by this sweep.
	others []treeRoot
	// live, when set, gives others afresh for each scan of kill, read
	// after the scan's listing: a run that started while the sweep went
	// on (its root mid-exec reads no marker) was otherwise an orphan of
	// the target's to the orphan rule, and killed.
	live func() []treeRoot
	// orphans enables the rule for processes that left the tree and
	// cleared the marker: any process that started during the run, is not
	// sandboxd or one of its ancestors, and belongs to no other tree.
	orphans bool
	self    int
	uid     int
	// marker reads a process's run marker (runMarker; replaced in tests).
	marker func(pid int) (m string, settled bool)
}

// victims returns the pids the sweep kills now. unsure is true when a
// process that may be the run's could not be told yet (its environment
// reads empty: it is exec'ing); the sweep is not over while one is.
func (s sweep) victims(procs map[int]proc) (out []int, unsure bool) {
	byPID := !s.recycled(procs)
	for pid, p := range procs {
		if pid == s.self || pid == 1 || descends(procs, s.self, pid) {
			continue // sandboxd, the init and sandboxd's own ancestors
		}
		switch s.owns(procs, p, byPID) {
		case yes:
			out = append(out, pid)
		case maybe:
			unsure = true
		}
	}
	return out, unsure
}

// recycled reports whether the target's pid now belongs to another
// process (another start time): once the run's root has exited and been
// reaped, the kernel may give its pid to any new process (pid_max can be
// as low as 32768), whose group and children are not the run's. The
// sweep then finds the run's processes by their marker only. A pid that
// is free, or still a process group's id, is not recycled: the kernel
// does not reuse a pid while a group of that id has members.
func (s sweep) recycled(procs map[int]proc) bool {
	p, ok := procs[s.target.pid]
	return ok && p.start != s.target.start
}

type verdict int

const (
	no verdict = iota
	yes
	maybe // started during the run, and its marker cannot be read yet
)

// owns tells whether p is the target run's. byPID allows the rules that
// go by the root's pid (its group, its descendants).
func (s sweep) owns(procs map[int]proc, p proc, byPID bool) verdict {
	t := s.target
	if byPID && (p.pgid == t.pid || descends(procs, p.pid, t.pid)) {
		return yes
	}
	if p.start < t.start {
		// Older than the run's root: not the run's, whatever its
		// environment says (a scan reads no environment of the
		// host's older processes, which are most of them).
		return no
	}
	read := s.marker
	if read == nil {
		read = runMarker
	}
	m, settled := read(p.pid)
	switch {
	case m == t.marker:
		return yes
	case m != "":
		return no // another run's, or the browser's
	}
	if p.uid != s.uid || p.ppid == kthreadd || p.pid == kthreadd {
		return no
	}
	for _, o := range s.others {
		if p.pgid == o.pid || descends(procs, p.pid, o.pid) {
			return no
		}
	}
	switch {
	case s.orphans:
		return yes
	case !settled:
		return maybe
	}
	return no
}

// kthreadd is the parent of the kernel's threads, which have no
// environment and may start at any time: never a run's.
const kthreadd = 2

// kill SIGKILLs the sweep's victims until none is left (a fork racing the
// scan is caught by the next round), for at most budget.
func (s sweep) kill(budget time.Duration) {
	// One /proc read, not a scan: the group kill must come at once, while
	// the root still lives and its descendants are still found below it.
	if p, ok := readProc(s.target.pid); !ok || p.start == s.target.start {
		_ = process.KillGroup(s.target.pid)
	}
	deadline := time.Now().Add(budget)
	for {
		procs := listProcs()
		if s.live != nil {
			s.others = s.live()
		}
		v, unsure := s.victims(procs)
		// What a scan found is killed even when the scan ran past the
		// budget: on a loaded host one scan can take that long, and
		// giving up first left the run's detached processes alive (CI).
		for _, pid := range v {
			_ = syscall.Kill(pid, syscall.SIGKILL) // ESRCH: already gone
		}
		if (len(v) == 0 && !unsure) || time.Now().After(deadline) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}
