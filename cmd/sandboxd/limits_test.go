package main

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// TestProcBaseline: the process budget's baseline counts the threads of
// sandboxd's uid that belong to no live run (sandboxd, the browser),
// whichever way a task is tied to a run (group, descent, marker).
func TestProcBaseline(t *testing.T) {
	const uid = 1000
	procs := map[int]proc{
		1:  {pid: 1, ppid: 0, pgid: 1, uid: 0, threads: 1},        // init: another uid
		10: {pid: 10, ppid: 1, pgid: 10, uid: uid, threads: 9},    // sandboxd
		20: {pid: 20, ppid: 10, pgid: 20, uid: uid, threads: 1},   // run A's root
		21: {pid: 21, ppid: 20, pgid: 20, uid: uid, threads: 4},   // its child
		22: {pid: 22, ppid: 20, pgid: 22, uid: uid, threads: 1},   // setsid child, still below A
		23: {pid: 23, ppid: 1, pgid: 23, uid: uid, threads: 2},    // A's double-forked daemon, marker kept
		30: {pid: 30, ppid: 10, pgid: 30, uid: uid, threads: 1},   // run B
		40: {pid: 40, ppid: 10, pgid: 40, uid: uid, threads: 30},  // the browser
		41: {pid: 41, ppid: 40, pgid: 40, uid: uid, threads: 12},  // a renderer
		50: {pid: 50, ppid: 1, pgid: 50, uid: uid, threads: 0},    // a zombie-ish entry: counts as one
		60: {pid: 60, ppid: 1, pgid: 60, uid: 2000, threads: 100}, // someone else
	}
	markers := map[int]string{20: "A", 21: "A", 22: "A", 23: "A", 30: "B", 40: "browser", 41: "browser"}
	runs := []treeRoot{{pid: 20, marker: "A"}, {pid: 30, marker: "B"}}
	marker := func(pid int) (string, bool) { return markers[pid], true }
	if got, want := procBaseline(procs, uid, runs, marker), 9+30+12+1; got != want {
		t.Errorf("baseline with runs A and B live = %d, want %d (sandboxd, browser, stray)", got, want)
	}
	// Once the runs are over, what is left of them counts as the sandbox's.
	if got, want := procBaseline(procs, uid, nil, marker), 9+1+4+1+2+1+30+12+1; got != want {
		t.Errorf("baseline with no live run = %d, want %d", got, want)
	}
}

// TestResolveLimits: memory becomes the address space (plus the
// interpreter's headroom), the process budget is relative to the baseline,
// and unset fields stay unset.
func TestResolveLimits(t *testing.T) {
	baseline := func() int { return 17 }
	a := resolveLimits(runLimits{MemoryMB: 64, MaxProcs: 8, MaxOpenFiles: 50}, 0, baseline)
	if a.addressSpaceMB != 64 || a.nproc != 25 || a.MaxOpenFiles != 50 {
		t.Errorf("resolved %+v", a)
	}
	if a := resolveLimits(runLimits{MemoryMB: 64}, nodeHeadroomMB, func() int { t.Fatal("baseline counted without max_procs"); return 0 }); a.addressSpaceMB != 64+nodeHeadroomMB || a.nproc != 0 {
		t.Errorf("node resolved %+v", a)
	}
	if got := ulimitScript(a); got != `ulimit -v 65536 && ulimit -n 50 && { ulimit -p 25 2>/dev/null || ulimit -u 25; } && exec "$@"` {
		t.Errorf("ulimitScript = %q", got)
	}
	if got := withHeapCap([]string{"node", "-"}, &runLimits{MemoryMB: 64}); strings.Join(got, " ") != "node --max-old-space-size=64 -" {
		t.Errorf("withHeapCap = %v", got)
	}
	if got := withHeapCap([]string{"node", "-"}, &runLimits{MaxProcs: 3}); len(got) != 2 {
		t.Errorf("withHeapCap without memory = %v", got)
	}
}

// TestRunMemoryAndProcessLimits: memory_mb and max_procs reach the program,
// by prlimit for python and node and by ulimit for a bash command. (The
// limits' effect is tested against the real aio container, where sandboxd
// is not root: root is exempt from RLIMIT_NPROC.)
func TestRunMemoryAndProcessLimits(t *testing.T) {
	ts := newTestServer(t)
	lim := map[string]any{"memory_mb": 96, "max_procs": 8}
	d := ts.post("/v1/bash/exec", map[string]any{"command": "ulimit -v; ulimit -u",
		"x_sandgate": map[string]any{"limits": lim}}).envelope(t, true)
	lines := strings.Fields(fmt.Sprint(d["stdout"]))
	if len(lines) != 2 || lines[0] != strconv.Itoa(96*1024) || !budgetAbove(lines[1], 8) {
		t.Errorf("bash limits: %q (stderr %v)", d["stdout"], d["stderr"])
	}
	code := "import resource as r\nfor k in (r.RLIMIT_AS, r.RLIMIT_NPROC): print(r.getrlimit(k)[0])"
	d = ts.post("/v1/code/execute", map[string]any{"language": "python", "code": code,
		"x_sandgate": map[string]any{"limits": lim}}).envelope(t, true)
	lines = strings.Fields(fmt.Sprint(d["stdout"]))
	if len(lines) != 2 || lines[0] != strconv.Itoa(96<<20) || !budgetAbove(lines[1], 8) {
		t.Errorf("python limits: %q (stderr %v)", d["stdout"], d["stderr"])
	}
	d = ts.post("/v1/code/execute", map[string]any{"language": "javascript", "code": "console.log(process.execArgv.join(' '))",
		"x_sandgate": map[string]any{"limits": lim}}).envelope(t, true)
	if d["stdout"] != "--max-old-space-size=96\n" {
		t.Errorf("node flags: %q (stderr %v)", d["stdout"], d["stderr"])
	}
}

// budgetAbove reports a finite process budget greater than max (the
// baseline is sandboxd's uid's other tasks).
func budgetAbove(s string, max int) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n > max
}
