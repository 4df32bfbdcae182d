package main

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"
)

// TestSweepRules checks which processes one run's kill reaches, on a
// synthetic process table (the orphan rule is only ever enabled inside a
// container, so it cannot be exercised on the host).
func TestSweepRules(t *testing.T) {
	const uid = 1000
	procs := map[int]proc{
		1:  {pid: 1, ppid: 0, pgid: 1, start: 1, uid: 0},       // the container's init
		10: {pid: 10, ppid: 0, pgid: 10, start: 5, uid: uid},   // sandboxd
		20: {pid: 20, ppid: 10, pgid: 20, start: 50, uid: uid}, // target run root
		21: {pid: 21, ppid: 20, pgid: 20, start: 51, uid: uid}, // in-group child
		22: {pid: 22, ppid: 20, pgid: 22, start: 52, uid: uid}, // setsid child, still a descendant
		23: {pid: 23, ppid: 1, pgid: 23, start: 53, uid: uid},  // double-forked daemon with the marker
		24: {pid: 24, ppid: 1, pgid: 24, start: 54, uid: uid},  // double-forked, marker cleared
		25: {pid: 25, ppid: 1, pgid: 25, start: 30, uid: uid},  // daemon of an earlier run
		30: {pid: 30, ppid: 10, pgid: 30, start: 40, uid: uid}, // another live run
		31: {pid: 31, ppid: 1, pgid: 31, start: 55, uid: uid},  // its daemon, marker kept
		32: {pid: 32, ppid: 30, pgid: 30, start: 56, uid: uid}, // its child
		40: {pid: 40, ppid: 10, pgid: 40, start: 45, uid: uid}, // the browser
		41: {pid: 41, ppid: 40, pgid: 40, start: 57, uid: uid}, // a renderer
		50: {pid: 50, ppid: 1, pgid: 50, start: 58, uid: 2},    // someone else's process
	}
	markers := map[int]string{20: "run", 21: "run", 22: "run", 23: "run", 30: "other", 31: "other", 32: "other", 40: "browser", 41: "browser"}
	s := sweep{
		target: treeRoot{pid: 20, start: 50, marker: "run"},
		others: []treeRoot{{pid: 30, start: 40, marker: "other"}, {pid: 40, start: 45, marker: "browser"}},
		self:   10, uid: uid,
		marker: func(pid int) (string, bool) { return markers[pid], true },
	}
	got, _ := s.victims(procs)
	slices.Sort(got)
	if want := []int{20, 21, 22, 23}; !slices.Equal(got, want) {
		t.Errorf("without the orphan rule: %v, want %v", got, want)
	}
	s.orphans = true
	got, _ = s.victims(procs)
	slices.Sort(got)
	if want := []int{20, 21, 22, 23, 24}; !slices.Equal(got, want) {
		t.Errorf("with the orphan rule: %v, want %v", got, want)
	}
}

// TestSweepSparesARecycledPID: once the run's root has been reaped, its
// pid may be given to an unrelated process (on the test host: another
// container's init or its socat). Neither that process, nor its group or
// children, is killed; the run's processes that carry its marker are.
func TestSweepSparesARecycledPID(t *testing.T) {
	const uid = 1000
	procs := map[int]proc{
		10: {pid: 10, ppid: 0, pgid: 10, start: 5, uid: uid},    // sandboxd
		20: {pid: 20, ppid: 1, pgid: 20, start: 90, uid: uid},   // pid 20 again: not the run's root (start 50)
		21: {pid: 21, ppid: 20, pgid: 20, start: 91, uid: uid},  // that process's child, same group
		23: {pid: 23, ppid: 1, pgid: 23, start: 53, uid: uid},   // the run's daemon, marker kept
		24: {pid: 24, ppid: 1, pgid: 24, start: 54, uid: 2000},  // someone else's process
		25: {pid: 25, ppid: 23, pgid: 23, start: 60, uid: uid},  // the daemon's child, marker kept
		26: {pid: 26, ppid: 20, pgid: 26, start: 92, uid: 2000}, // a child of the new pid 20, its own group
	}
	markers := map[int]string{23: "run", 25: "run"}
	s := sweep{
		target: treeRoot{pid: 20, start: 50, marker: "run"},
		self:   10, uid: uid,
		marker: func(pid int) (string, bool) { return markers[pid], true },
	}
	got, _ := s.victims(procs)
	slices.Sort(got)
	if want := []int{23, 25}; !slices.Equal(got, want) {
		t.Errorf("victims %v, want only the marked %v", got, want)
	}
	// The same table with pid 20 still the run's root: its group and
	// children are the run's.
	procs[20] = proc{pid: 20, ppid: 10, pgid: 20, start: 50, uid: uid}
	got, _ = s.victims(procs)
	slices.Sort(got)
	if want := []int{20, 21, 23, 25, 26}; !slices.Equal(got, want) {
		t.Errorf("victims with the root alive %v, want %v", got, want)
	}
}

// TestSweepWaitsForAnExecingProcess: a process whose environment reads
// empty (it is in execve, or exiting) cannot be told from its marker. One
// that started during the run, outside every other tree, keeps the sweep
// going until it can be (on the host, where the orphan rule is off); one
// that started before the run, a kernel thread or another run's does not.
func TestSweepWaitsForAnExecingProcess(t *testing.T) {
	const uid = 1000
	base := map[int]proc{
		10: {pid: 10, ppid: 0, pgid: 10, start: 5, uid: uid},   // sandboxd
		30: {pid: 30, ppid: 10, pgid: 30, start: 40, uid: uid}, // another live run
	}
	for _, tc := range []struct {
		name    string
		p       proc
		settled bool
		marker  string
		unsure  bool
		victims []int
	}{
		{"the run's setsid child exec'ing", proc{pid: 22, ppid: 1, pgid: 22, start: 52, uid: uid}, false, "", true, nil},
		{"the same once its environment reads", proc{pid: 22, ppid: 1, pgid: 22, start: 52, uid: uid}, true, "run", false, []int{22}},
		{"a process with no environment at all", proc{pid: 22, ppid: 1, pgid: 22, start: 52, uid: uid}, true, "", false, nil},
		{"started before the run", proc{pid: 22, ppid: 1, pgid: 22, start: 45, uid: uid}, false, "", false, nil},
		{"another uid's", proc{pid: 22, ppid: 1, pgid: 22, start: 52, uid: 2}, false, "", false, nil},
		{"a kernel thread", proc{pid: 22, ppid: 2, pgid: 0, start: 52, uid: uid}, false, "", false, nil},
		{"another run's child", proc{pid: 22, ppid: 30, pgid: 22, start: 52, uid: uid}, false, "", false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			procs := maps.Clone(base)
			procs[tc.p.pid] = tc.p
			s := sweep{
				target: treeRoot{pid: 20, start: 50, marker: "run"}, // exited and reaped
				others: []treeRoot{{pid: 30, start: 40, marker: "other"}},
				self:   10, uid: uid,
				marker: func(pid int) (string, bool) {
					if pid == tc.p.pid {
						return tc.marker, tc.settled
					}
					return "", true
				},
			}
			got, unsure := s.victims(procs)
			if !slices.Equal(got, tc.victims) || unsure != tc.unsure {
				t.Errorf("victims %v unsure %v, want %v %v", got, unsure, tc.victims, tc.unsure)
			}
		})
	}
}

// TestSweepKillsWhatItFoundPastTheBudget: a scan that ends after the
// sweep's budget (one scan of a loaded host's /proc can take that long)
// still kills what it found; the run's detached process does not outlive
// the sweep.
func TestSweepKillsWhatItFoundPastTheBudget(t *testing.T) {
	cmd := exec.Command("sleep", "1000")
	cmd.Env = []string{markerEnv + "=run-past-budget"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	var p proc
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var ok bool
		if p, ok = readProc(cmd.Process.Pid); ok {
			if m, _ := runMarker(p.pid); m == "run-past-budget" {
				break // exec'd: its environment reads
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the process never showed its marker")
		}
	}
	// The run's root is gone (a pid no process has), and the budget is
	// spent before the first scan ends.
	s := sweep{target: treeRoot{pid: 1 << 30, start: p.start, marker: "run-past-budget"}, self: os.Getpid(), uid: os.Geteuid()}
	s.kill(0)
	select {
	case err := <-done:
		done <- err // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("the run's detached process outlived the sweep")
	}
}

// TestSweepSparesARunStartedDuringIt: with the orphan rule (a contained
// sandboxd), a run that starts while another run's kill sweep goes on is
// not taken for that run's orphan: the sweep reads the live runs afresh
// for each scan. Its root, caught mid-exec, shows no marker (here: none
// at all), so only the live runs tell it apart.
func TestSweepSparesARunStartedDuringIt(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("SANDGATE_REQUIRE_ROOT") == "1" {
			t.Fatal("SANDGATE_REQUIRE_ROOT=1 but not running as root")
		}
		t.Skip("needs root: the processes run as a uid of their own, so the orphan rule can touch nothing else")
	}
	const uid = 64_321
	start := func() *exec.Cmd {
		cmd := exec.Command("sleep", "1000")
		cmd.Env = []string{} // no marker, as mid-exec
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
		return cmd
	}
	orphan := start() // the target's: it cleared its marker and left the tree
	p, ok := readProc(orphan.Process.Pid)
	if !ok {
		t.Fatal("no /proc entry for the orphan")
	}
	var newRun *exec.Cmd
	s := sweep{target: treeRoot{pid: 1 << 30, start: p.start, marker: "target"}, orphans: true,
		self: os.Getpid(), uid: uid}
	// The new run starts once the sweep is under way, and is live from
	// then on, as jobTable.start registers it.
	s.live = func() []treeRoot {
		if newRun == nil {
			newRun = start()
			return nil
		}
		return []treeRoot{{pid: newRun.Process.Pid, marker: "new-run"}}
	}
	s.kill(5 * time.Second)
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", orphan.Process.Pid)); err == nil {
		if q, ok := readProc(orphan.Process.Pid); ok && q.start == p.start {
			t.Error("the target's orphan outlived the sweep")
		}
	}
	if newRun == nil {
		t.Fatal("the sweep never read the live runs")
	}
	if q, ok := readProc(newRun.Process.Pid); !ok || q.uid != uid {
		t.Error("the run started during the sweep was killed as the target's orphan")
	}
}

// TestStartTreeRegistersIt: a long-lived tree (the browser, a kernel) is
// among every run's others from the moment startTree returns until its
// drop, so no run's sweep kills it; a start that fails registers nothing.
func TestStartTreeRegistersIt(t *testing.T) {
	jobs := newJobTable(config{})
	if _, _, err := jobs.startTree(exec.Command("/nonexistent/chromium"), "browser-x"); err == nil {
		t.Fatal("a start of a missing program succeeded")
	}
	if others := jobs.othersOf(treeRoot{pid: 1 << 30}); len(others) != 0 {
		t.Fatalf("a failed start left %v registered", others)
	}
	cmd := exec.Command("sleep", "1000")
	root, drop, err := jobs.startTree(cmd, "browser-y")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	p, ok := readProc(cmd.Process.Pid)
	if !ok || root != (treeRoot{pid: cmd.Process.Pid, start: p.start, marker: "browser-y"}) {
		t.Fatalf("root %+v, want pid %d, start %d, marker browser-y", root, cmd.Process.Pid, p.start)
	}
	if others := jobs.othersOf(treeRoot{pid: 1 << 30}); len(others) != 1 || others[0] != root {
		t.Fatalf("others of a run after the start: %v, want [%v]", others, root)
	}
	drop()
	if others := jobs.othersOf(treeRoot{pid: 1 << 30}); len(others) != 0 {
		t.Fatalf("others after the drop: %v", others)
	}
}
