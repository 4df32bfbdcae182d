package subprocess

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/executortest"
)

// zygoteUID is the sandbox uid of the zygote tests' executors, a range of
// their own (65000–65399) for the same reasons as warmUID.
var zygoteUID = 65000 + os.Getpid()%200

// newZygoteExecutor is an executor whose Python session runs use zygotes.
// It skips without root: zygotes need namespace isolation.
func newZygoteExecutor(t *testing.T, mutate ...func(*Config)) *Executor {
	t.Helper()
	requireRoot(t)
	e := newTestExecutor(t, append([]func(*Config){func(c *Config) {
		c.SandboxUID, c.SandboxGID = zygoteUID, zygoteUID
	}}, mutate...)...)
	if e.zygotes == nil {
		t.Fatalf("zygotes are off (isolation %s)", e.isolation)
	}
	return e
}

// zygoteOf returns session's zygote, or nil.
func zygoteOf(e *Executor, session string) *zygote {
	e.zygotes.mu.Lock()
	defer e.zygotes.mu.Unlock()
	return e.zygotes.live[session]
}

// TestZygoteServesSessionRuns: every Python run of a session, the first
// included, runs in the session's one zygote, with the right output and
// exit status each time; a run without a session runs cold.
func TestZygoteServesSessionRuns(t *testing.T) {
	e := newZygoteExecutor(t)
	sess, ws := "sess-"+executortest.Nonce(), executortest.NewWorkspace(t)
	var first *zygote
	for i, tc := range []struct {
		code, stdout, stderr string
		exit                 int
	}{
		{"print(1)", "1\n", "", 0},
		{"import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(7)", "out\n", "err\n", 7},
		{"import os\nos.kill(os.getpid(), 9)", "", "Killed\n", 137},
		{"raise SystemExit('bye')", "", "bye\n", 1},
	} {
		before := e.WarmStats()
		res := mustExecute(t, e, warmRun(sess, ws, executors.LangPython, tc.code))
		if res.Stdout != tc.stdout || res.Stderr != tc.stderr || res.ExitCode != tc.exit || res.TimedOut {
			t.Errorf("run %d: got %+v, want stdout %q stderr %q exit %d", i, res, tc.stdout, tc.stderr, tc.exit)
		}
		if got := e.WarmStats(); got.Hits != before.Hits+1 {
			t.Errorf("run %d not served by the zygote: %+v", i, got)
		}
		z := zygoteOf(e, sess)
		if first == nil {
			first = z
		}
		if z == nil || z != first {
			t.Errorf("run %d: session zygote %p, want the first one %p", i, z, first)
		}
	}
	if st := e.WarmStats(); st.Spawned != 1 || st.Zygotes != 1 {
		t.Errorf("stats %+v, want one zygote", st)
	}
	before := e.WarmStats()
	if res, _ := execute(t, e, executors.LangPython, "print(2)"); res.Stdout != "2\n" {
		t.Errorf("sessionless run: %+v", res)
	}
	if got := e.WarmStats(); got.Hits != before.Hits || got.Misses != before.Misses {
		t.Errorf("a run without a session touched the zygotes: %+v", got)
	}
}

// TestZygoteMatchesCold runs each Python fidelity program cold and in a
// zygote (same request id, twin workspaces) and requires the same result:
// the interpreter state, /proc, limits, ids, environment, descriptors,
// tracebacks and exit paths.
func TestZygoteMatchesCold(t *testing.T) {
	cold := newTestExecutor(t, func(c *Config) {
		c.SandboxUID, c.SandboxGID, c.DisableWarm = zygoteUID+1, zygoteUID+1, true
	})
	zy := newZygoteExecutor(t, func(c *Config) { c.SandboxUID, c.SandboxGID = zygoteUID+1, zygoteUID+1 })
	for _, tc := range fidelityCases {
		if tc.lang != executors.LangPython {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			id := "req-" + executortest.Nonce()
			results := make([]executors.Result, 2)
			for i, e := range []*Executor{cold, zy} {
				ws := executortest.NewWorkspace(t)
				spec := warmRun("sess-"+executortest.Nonce(), ws, tc.lang, tc.code)
				spec.RequestID = id
				if e == zy {
					// A second run, so the compared one is not the session's first.
					mustExecute(t, e, warmRun(spec.SessionID, ws, tc.lang, "pass"))
				}
				hits := e.WarmStats().Hits
				results[i] = mustExecute(t, e, spec)
				if e == zy && e.WarmStats().Hits != hits+1 {
					t.Fatalf("the run was not served by a zygote: %+v", e.WarmStats())
				}
			}
			c, z := results[0], results[1]
			c.Duration, z.Duration = 0, 0
			if c != z {
				t.Errorf("cold and zygote differ\ncold exit %d stdout:\n%s\nstderr:\n%s\nzygote exit %d stdout:\n%s\nstderr:\n%s",
					c.ExitCode, c.Stdout, c.Stderr, z.ExitCode, z.Stdout, z.Stderr)
			}
		})
	}
}

// TestZygoteTimeoutKillsTree: a zygote run's timeout kills its whole
// tree, setsid'd and double-forked processes included, and the zygote
// serves the session's next run.
func TestZygoteTimeoutKillsTree(t *testing.T) {
	e := newZygoteExecutor(t)
	m := executortest.NewMarkers(3)
	sess, ws := "sess-"+executortest.Nonce(), executortest.NewWorkspace(t)
	spec := warmRun(sess, ws, executors.LangPython, executortest.TreeProgram(t, executors.LangPython, m))
	spec.Timeout = 2 * time.Second
	seen := executortest.WatchMarkers(m, func() {
		res := mustExecute(t, e, spec)
		if !res.TimedOut || res.ExitCode != executors.ExitCodeTimeout || res.Stdout != "spawned\n" {
			t.Errorf("result %+v, want a timeout after the output", res)
		}
		if res.Duration < 2*time.Second || res.Duration > 10*time.Second { // the kill and drain, on a loaded machine
			t.Errorf("duration %v, want the 2s timeout", res.Duration)
		}
	})
	checkTreeGone(t, m, seen)
	z := zygoteOf(e, sess)
	hits := e.WarmStats().Hits
	if res := mustExecute(t, e, warmRun(sess, ws, executors.LangPython, "print('next')")); res.Stdout != "next\n" {
		t.Errorf("next run: %+v", res)
	}
	if e.WarmStats().Hits != hits+1 || zygoteOf(e, sess) != z || z == nil {
		t.Errorf("the next run did not use the same zygote: %+v", e.WarmStats())
	}
}

// TestZygoteRunEndsWithItsTree: a zygote run that exits normally and
// leaves a setsid'd process behind, holding none of the run's pipes, is
// answered only once that process is gone: no grace, checked as Execute
// returns (P1 kills and reaps the namespace before it reports the exit
// status).
func TestZygoteRunEndsWithItsTree(t *testing.T) {
	e := newZygoteExecutor(t)
	sess, ws := "sess-"+executortest.Nonce(), executortest.NewWorkspace(t)
	mustExecute(t, e, warmRun(sess, ws, executors.LangPython, "pass"))
	for range 5 {
		mk := executortest.NewMarkers(1)[0]
		prog := fmt.Sprintf("import subprocess, time\nsubprocess.Popen(['setsid', 'sleep', '%s'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\ntime.sleep(0.2)\nprint('left')\n", mk)
		if res := mustExecute(t, e, warmRun(sess, ws, executors.LangPython, prog)); res.Stdout != "left\n" || res.ExitCode != 0 {
			t.Fatalf("result %+v", res)
		}
		if left := executortest.ProcessesMatching(mk); len(left) > 0 {
			t.Errorf("the run was answered while its process %v was alive", left)
		}
		checkTreeGone(t, []string{mk}, nil)
	}
}

// TestZygoteCancelKillsTree: cancelling a zygote run's ctx kills its tree
// and Execute returns promptly with the ctx's error.
func TestZygoteCancelKillsTree(t *testing.T) {
	e := newZygoteExecutor(t)
	mk := executortest.NewMarkers(1)[0]
	sess, ws := "sess-"+executortest.Nonce(), executortest.NewWorkspace(t)
	mustExecute(t, e, warmRun(sess, ws, executors.LangPython, "pass"))
	spec := warmRun(sess, ws, executors.LangPython,
		fmt.Sprintf("import subprocess, time\nsubprocess.Popen(['setsid', 'sleep', '%s'])\ntime.sleep(1000)\n", mk))
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		for len(executortest.ProcessesMatching(mk)) == 0 {
			time.Sleep(20 * time.Millisecond)
		}
		cancel()
	}()
	began := time.Now()
	_, err := e.Execute(ctx, spec)
	if err == nil || ctx.Err() == nil {
		t.Errorf("Execute: %v, want the cancellation", err)
	}
	if d := time.Since(began); d > 10*time.Second {
		t.Errorf("Execute took %v", d)
	}
	checkTreeGone(t, []string{mk}, nil)
	if z := zygoteOf(e, sess); z == nil || closed(z.gone) {
		t.Errorf("the cancel took the session's zygote with it")
	}
}

// TestZygoteForkBombContained: a fork bomb in a zygote run ends at its
// timeout with nothing of it left, while the gateway keeps answering.
func TestZygoteForkBombContained(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "ok")
	}))
	defer srv.Close()
	e := newZygoteExecutor(t)
	uid := zygoteUID + 200
	spec := warmRun("sess-"+executortest.Nonce(), executortest.NewWorkspace(t), executors.LangPython,
		"import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n")
	spec.UID, spec.GID, spec.Timeout = uid, uid, 4*time.Second
	stop := make(chan struct{})
	worst := make(chan time.Duration, 1)
	go func() { worst <- pollHTTP(srv.URL, stop) }()
	res := mustExecute(t, e, spec)
	close(stop)
	if !res.TimedOut {
		t.Errorf("the bomb did not run to its timeout: %+v", res)
	}
	if e.WarmStats().Hits != 1 {
		t.Fatalf("not served by a zygote: %+v", e.WarmStats())
	}
	d := <-worst
	t.Logf("slowest HTTP answer during the bomb: %v", d)
	if d > 2*time.Second {
		t.Errorf("the test's HTTP handler took %v to answer during the bomb", d)
	}
	if left := waitUIDGone(strconv.Itoa(uid), 3*time.Second); len(left) > 0 {
		t.Errorf("%d processes of the session's uid left after the bomb", len(left))
	}
}

// TestZygoteLimitsPerRun: runs of one session with different limits are
// served by the same zygote, and each gets its own: the rlimits, a 1 GiB
// allocation failing inside the memory limit, the CPU limit.
func TestZygoteLimitsPerRun(t *testing.T) {
	e := newZygoteExecutor(t)
	sess, ws := "sess-"+executortest.Nonce(), executortest.NewWorkspace(t)
	limitsOf := `for l in open("/proc/self/limits"):
    if l.startswith(("Max open files", "Max cpu time", "Max address space")):
        print(" ".join(l.split()))
`
	for _, tc := range []struct {
		lim        executors.Limits
		code, want string
		exit       int
	}{
		{executors.Limits{MaxOpenFiles: 64, CPUSeconds: 5, MemoryMB: 256}, limitsOf,
			"Max cpu time 5 5 seconds\nMax open files 64 64 files\nMax address space 268435456 268435456 bytes\n", 0},
		{executors.Limits{MaxOpenFiles: 128, CPUSeconds: 7, MemoryMB: 300}, limitsOf,
			"Max cpu time 7 7 seconds\nMax open files 128 128 files\nMax address space 314572800 314572800 bytes\n", 0},
		{executors.Limits{MemoryMB: 256}, "try:\n    b = bytearray(1 << 30)\n    print('allocated')\nexcept MemoryError:\n    print('MemoryError')\n",
			"MemoryError\n", 0},
		{executors.Limits{CPUSeconds: 1}, "while True:\n    pass\n", "", 137}, // soft = hard: SIGKILL, as cold
	} {
		spec := warmRun(sess, ws, executors.LangPython, tc.code)
		spec.Limits = tc.lim
		res := mustExecute(t, e, spec)
		if res.Stdout != tc.want || res.ExitCode != tc.exit {
			t.Errorf("limits %+v: got %+v, want stdout %q exit %d", tc.lim, res, tc.want, tc.exit)
		}
	}
	if st := e.WarmStats(); st.Hits != 4 || st.Spawned != 1 {
		t.Errorf("stats %+v, want 4 runs in one zygote", st)
	}
}

// TestZygoteNoNetwork: code in a zygote run cannot reach a listener the
// test opened on the host's loopback.
func TestZygoteNoNetwork(t *testing.T) {
	e := newZygoteExecutor(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	sess, ws := "sess-"+executortest.Nonce(), executortest.NewWorkspace(t)
	code := fmt.Sprintf(`import socket
try:
    socket.create_connection(("127.0.0.1", %d), timeout=2)
    print("connected")
except OSError as e:
    print("refused", type(e).__name__)
`, port)
	for i := range 2 {
		res := mustExecute(t, e, warmRun(sess, ws, executors.LangPython, code))
		if !strings.HasPrefix(res.Stdout, "refused") {
			t.Errorf("run %d reached the host's loopback: %+v", i, res)
		}
	}
	if e.WarmStats().Hits != 2 {
		t.Errorf("not served by a zygote: %+v", e.WarmStats())
	}
}

// TestZygoteConcurrentRuns: concurrent runs of one session share its
// zygote, and each gets its own output and status.
func TestZygoteConcurrentRuns(t *testing.T) {
	e := newZygoteExecutor(t)
	sess, ws := "sess-"+executortest.Nonce(), executortest.NewWorkspace(t)
	mustExecute(t, e, warmRun(sess, ws, executors.LangPython, "pass"))
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			res, err := e.Execute(t.Context(), warmRun(sess, ws, executors.LangPython,
				fmt.Sprintf("import time, sys\ntime.sleep(0.2)\nprint(%d)\nsys.exit(%d)\n", i, i)))
			if err != nil || res.Stdout != fmt.Sprintf("%d\n", i) || res.ExitCode != i {
				t.Errorf("run %d: %+v %v", i, res, err)
			}
		})
	}
	wg.Wait()
	if st := e.WarmStats(); st.Hits != 9 || st.Spawned != 1 {
		t.Errorf("stats %+v, want 9 runs in one zygote", st)
	}
}

// TestZygoteLifecycle: a zygote is killed (its processes gone) by
// ReleaseSession, after the idle TTL, to make room for another session,
// when its workspace is replaced, and by Close; one killed from outside
// is replaced and the run still succeeds.
func TestZygoteLifecycle(t *testing.T) {
	run := func(t *testing.T, e *Executor, sess, ws string) {
		t.Helper()
		if res := mustExecute(t, e, warmRun(sess, ws, executors.LangPython, "print('ok')")); res.Stdout != "ok\n" {
			t.Fatalf("run: %+v", res)
		}
	}
	// gone waits until z is reaped and its socket has ended: the pool
	// learns of a death from the socket, which can end after the reap.
	gone := func(t *testing.T, z *zygote) {
		t.Helper()
		for _, c := range []chan struct{}{z.proc.done, z.gone} {
			select {
			case <-c:
			case <-time.After(5 * time.Second):
				t.Fatalf("zygote of %s still alive", z.session)
			}
		}
	}
	t.Run("release", func(t *testing.T) {
		e := newZygoteExecutor(t)
		sess, ws := "sess-"+executortest.Nonce(), executortest.NewWorkspace(t)
		run(t, e, sess, ws)
		z := zygoteOf(e, sess)
		if err := e.ReleaseSession(t.Context(), sess); err != nil {
			t.Fatal(err)
		}
		gone(t, z)
		if left := processesInDir(ws); len(left) > 0 {
			t.Errorf("processes left in the workspace: %v", left)
		}
	})
	t.Run("ttl", func(t *testing.T) {
		e := newZygoteExecutor(t, func(c *Config) { c.WarmIdleTTL = 300 * time.Millisecond })
		sess, ws := "sess-"+executortest.Nonce(), executortest.NewWorkspace(t)
		run(t, e, sess, ws)
		gone(t, zygoteOf(e, sess))
		if st := e.WarmStats(); st.Expired != 1 || st.Zygotes != 0 {
			t.Errorf("stats %+v, want one expired", st)
		}
	})
	t.Run("evict", func(t *testing.T) {
		e := newZygoteExecutor(t, func(c *Config) { c.WarmMax = 1 })
		s1, s2 := "sess-"+executortest.Nonce(), "sess-"+executortest.Nonce()
		run(t, e, s1, executortest.NewWorkspace(t))
		z1 := zygoteOf(e, s1)
		run(t, e, s2, executortest.NewWorkspace(t))
		gone(t, z1)
		if st := e.WarmStats(); st.Evicted != 1 || st.Zygotes != 1 || st.Hits != 2 {
			t.Errorf("stats %+v, want one evicted", st)
		}
	})
	t.Run("workspace replaced", func(t *testing.T) {
		e := newZygoteExecutor(t)
		sess, ws := "sess-"+executortest.Nonce(), executortest.NewWorkspace(t)
		run(t, e, sess, ws)
		z := zygoteOf(e, sess)
		if err := os.RemoveAll(ws); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(ws, 0o755); err != nil {
			t.Fatal(err)
		}
		run(t, e, sess, ws)
		gone(t, z)
		if st := e.WarmStats(); st.Mismatched != 1 || st.Spawned != 2 {
			t.Errorf("stats %+v, want a new zygote for the new directory", st)
		}
	})
	t.Run("killed from outside", func(t *testing.T) {
		e := newZygoteExecutor(t)
		sess, ws := "sess-"+executortest.Nonce(), executortest.NewWorkspace(t)
		run(t, e, sess, ws)
		z := zygoteOf(e, sess)
		for _, pid := range processesInDir(ws) {
			n, _ := strconv.Atoi(pid)
			_ = syscall.Kill(n, syscall.SIGKILL)
		}
		gone(t, z)
		run(t, e, sess, ws)
		if st := e.WarmStats(); st.Died != 1 || st.Spawned != 2 {
			t.Errorf("stats %+v, want the dead zygote replaced", st)
		}
	})
	t.Run("close", func(t *testing.T) {
		e := newZygoteExecutor(t)
		sess, ws := "sess-"+executortest.Nonce(), executortest.NewWorkspace(t)
		run(t, e, sess, ws)
		z := zygoteOf(e, sess)
		if err := e.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		gone(t, z)
		run(t, e, sess, ws) // cold after Close
	})
	t.Run("close during a run", func(t *testing.T) {
		e := newZygoteExecutor(t)
		sess, ws := "sess-"+executortest.Nonce(), executortest.NewWorkspace(t)
		run(t, e, sess, ws)
		z := zygoteOf(e, sess)
		type outcome struct {
			res executors.Result
			err error
		}
		got := make(chan outcome, 1)
		go func() {
			res, err := e.Execute(t.Context(), warmRun(sess, ws, executors.LangPython, "import time\ntime.sleep(1)\nprint('done')"))
			got <- outcome{res, err}
		}()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			e.zygotes.mu.Lock()
			active := z.active
			e.zygotes.mu.Unlock()
			if active > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the run never started")
			}
		}
		if err := e.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		select {
		case <-z.proc.done:
		default:
			t.Error("Close returned before the zygote was gone")
		}
		if o := <-got; o.err != nil || o.res.Stdout != "done\n" {
			t.Errorf("the run in progress at Close: %+v %v", o.res, o.err)
		}
	})
}

// TestZygoteIdleCostsNothing: a waiting zygote uses no CPU time.
func TestZygoteIdleCostsNothing(t *testing.T) {
	e := newZygoteExecutor(t)
	sess, ws := "sess-"+executortest.Nonce(), executortest.NewWorkspace(t)
	mustExecute(t, e, warmRun(sess, ws, executors.LangPython, "pass"))
	time.Sleep(100 * time.Millisecond)
	pids := processesInDir(ws)
	if len(pids) < 2 {
		t.Fatalf("zygote processes %v, want the init step and the zygote", pids)
	}
	before := cpuTicks(t, pids)
	time.Sleep(time.Second)
	if after := cpuTicks(t, pids); after != before {
		t.Errorf("the waiting zygote used %d clock ticks of CPU in 1s", after-before)
	}
}

// TestZygoteBrokenTurnsOff: with a zygote program that fails, three
// zygotes fail, zygotes turn off, and every Python run still succeeds
// (cold, then on warm interpreters).
func TestZygoteBrokenTurnsOff(t *testing.T) {
	requireRoot(t)
	e := newZygoteExecutor(t)
	// What an interpreter that cannot run the zygote's program does: it
	// fails before it is ready.
	e.zygotes.program = "raise SystemExit(1)"
	for i := range maxZygoteFailures + 2 {
		sess, ws := "sess-"+executortest.Nonce(), executortest.NewWorkspace(t)
		for j := range 2 {
			if res := mustExecute(t, e, warmRun(sess, ws, executors.LangPython, "print('ok')")); res.Stdout != "ok\n" || res.ExitCode != 0 {
				t.Fatalf("session %d run %d: %+v", i, j, res)
			}
		}
	}
	if e.zygotes.usable() {
		t.Errorf("zygotes still on after %d broken ones: %+v", maxZygoteFailures, e.WarmStats())
	}
	if st := e.WarmStats(); st.Spawned < maxZygoteFailures || st.Zygotes != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestZygoteRetiresWhenRunsCannotStart: a ready zygote that takes runs it
// cannot start (here: an open-file limit above what the kernel allows, so
// every run fails, cold too) is retired after maxZygoteNoStarts of them,
// and the session's next run gets a new zygote.
func TestZygoteRetiresWhenRunsCannotStart(t *testing.T) {
	e := newZygoteExecutor(t)
	sess, ws := "sess-"+executortest.Nonce(), executortest.NewWorkspace(t)
	mustExecute(t, e, warmRun(sess, ws, executors.LangPython, "pass"))
	first := zygoteOf(e, sess)
	for range maxZygoteNoStarts {
		spec := warmRun(sess, ws, executors.LangPython, "print('never')")
		spec.Limits.MaxOpenFiles = 1 << 30
		if res, err := e.Execute(t.Context(), spec); err == nil && res.Stdout == "never\n" {
			t.Fatalf("a run with an impossible limit ran: %+v", res)
		}
	}
	if z := zygoteOf(e, sess); z != nil {
		t.Fatalf("the zygote was not retired: %+v", e.WarmStats())
	}
	select {
	case <-first.proc.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the retired zygote is still alive")
	}
	if res := mustExecute(t, e, warmRun(sess, ws, executors.LangPython, "print('ok')")); res.Stdout != "ok\n" {
		t.Errorf("next run: %+v", res)
	}
	if z := zygoteOf(e, sess); z == nil || z == first || !e.zygotes.usable() {
		t.Errorf("no new zygote for the session: %+v", e.WarmStats())
	}
}
