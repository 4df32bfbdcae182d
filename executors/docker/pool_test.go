package docker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
)

// noPool turns the pool of pre-started sandboxes off: the other tests
// check runs of their own containers and must not pay for pool starts.
var noPool = PoolConfig{Max: -1}

// withPool gives the executor a pool of size n (max m) in a slot
// directory of the test's own.
func withPool(t testing.TB, n, m int) func(*Config) {
	dir := filepath.Join(DefaultPoolDir, "test-"+strings.ReplaceAll(t.Name(), "/", "-"))
	return func(c *Config) { c.Pool = PoolConfig{Size: n, Max: m, Dir: dir} }
}

// needRoot skips a pool test when the gateway would not be root (claims
// mount the workspace).
func needRoot(t testing.TB) {
	if os.Geteuid() != 0 {
		if os.Getenv(requireEnv) == "1" {
			t.Fatal("the pool tests need root (a claim mounts the workspace)")
		}
		t.Skip("the pool needs root")
	}
}

// readyPool waits for n idle pooled sandboxes.
func readyPool(t testing.TB, e *Executor, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if !e.waitPoolReady(ctx, n) {
		t.Fatalf("pool not ready: %+v", e.PoolStatus())
	}
}

// TestPoolClaimIsFreshAndTheSessions: a run served from the pool runs as
// its session's uid, sees its own workspace at /workspace (and nothing of
// another session's), no process of an earlier run, and the claim took
// the sandbox out of the pool.
func TestPoolClaimIsFreshAndTheSessions(t *testing.T) {
	needRoot(t)
	e := newTestExecutor(t, withPool(t, 2, 2))
	readyPool(t, e, 2)
	// Session A leaves a file and a process behind.
	a := spec(t, executors.LangBash, `echo secret-a > a.txt; (sleep 300 &) ; echo started`)
	a.UID, a.GID = 61001, 61001
	if err := os.Chown(a.WorkspaceDir, 61001, 61001); err != nil {
		t.Fatal(err)
	}
	if res := execute(t, e, a); res.ExitCode != 0 {
		t.Fatalf("A: %+v", res)
	}
	b := spec(t, executors.LangBash, `id -u; id -G; pwd; ls -A /workspace; cat a.txt 2>&1; ps -eo args | grep -c '^sleep 300'; grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb):' /proc/self/status | tr -d '\t' | sort | paste -sd ' ' -; echo > mine.txt`)
	b.UID, b.GID = 61002, 61002
	if err := os.Chown(b.WorkspaceDir, 61002, 61002); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b.WorkspaceDir, "b.txt"), []byte("b"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := execute(t, e, b)
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	if res.ExitCode != 0 || len(lines) < 7 {
		t.Fatalf("B: %+v", res)
	}
	want := []string{"61002", "61002", "/workspace", "b.txt", "cat: a.txt: No such file or directory", "0", "CapAmb:0000000000000000 CapBnd:0000000000000000 CapEff:0000000000000000 CapInh:0000000000000000 CapPrm:0000000000000000"}
	for i, w := range want {
		if lines[i] != w {
			t.Errorf("B line %d = %q, want %q (all: %q)", i, lines[i], w, res.Stdout)
		}
	}
	if fi, err := os.Stat(filepath.Join(b.WorkspaceDir, "mine.txt")); err != nil {
		t.Errorf("B's file not in its workspace: %v", err)
	} else if st := fi.Sys(); st != nil {
		if uid := fileUID(fi); uid != 61002 {
			t.Errorf("B's file owned by %d", uid)
		}
	}
	st := e.PoolStatus()
	if st.Claims < 2 {
		t.Errorf("runs not served from the pool: %+v", st)
	}
}

// TestPoolBurstLosesNothing: 50 runs of 50 new sessions at once, against
// a pool of 2 refilling, all succeed.
func TestPoolBurstLosesNothing(t *testing.T) {
	needRoot(t)
	e := newTestExecutor(t, withPool(t, 2, 4))
	readyPool(t, e, 2)
	const n = 50
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		s := spec(t, executors.LangPython, fmt.Sprintf("print(%d)", i))
		wg.Go(func() {
			res, err := e.Execute(t.Context(), s)
			switch {
			case err != nil:
				errs <- err
			case res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != fmt.Sprint(i):
				errs <- fmt.Errorf("run %d: %+v", i, res)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if st := e.PoolStatus(); st.Claims == 0 {
		t.Errorf("no run of the burst was served from the pool: %+v", st)
	}
}

// TestPoolClaimWithLayout: a pooled sandbox of a front end's layout
// (DeerFlow's /mnt/user-data, its commands in workspace/ under it) has
// the session's workspace at the layout's root as well as at
// /workspace, and starts in the layout's workdir.
func TestPoolClaimWithLayout(t *testing.T) {
	needRoot(t)
	e := newTestExecutor(t, withPool(t, 1, 2))
	l := executors.Layout{Root: "/mnt/user-data", Workdir: "/mnt/user-data/workspace"}
	run := func() executors.Result {
		s := spec(t, executors.LangBash, `pwd; cat /mnt/user-data/seen.txt; echo made > /workspace/made.txt; cat /mnt/user-data/made.txt`)
		s.Layout = l
		if err := os.Mkdir(filepath.Join(s.WorkspaceDir, "workspace"), 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(s.WorkspaceDir, "seen.txt"), []byte("seen\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return execute(t, e, s)
	}
	run() // the layout's first run makes its shape's pool
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	for e.PoolStatus().Idle < 2 && ctx.Err() == nil { // the default shape's and the layout's
		time.Sleep(50 * time.Millisecond)
	}
	before := e.PoolStatus().Claims
	res := run()
	if want := "/mnt/user-data/workspace\nseen\nmade\n"; res.ExitCode != 0 || res.Stdout != want {
		t.Fatalf("exit %d stdout %q stderr %q, want %q", res.ExitCode, res.Stdout, res.Stderr, want)
	}
	if e.PoolStatus().Claims != before+1 {
		t.Errorf("the run was not served from the layout's pool: %+v", e.PoolStatus())
	}
}

// TestDefaultPoolMax: the defaults on a 2-core, 24 GiB machine (MemTotal
// 24105 MiB here), on a small one, and on a large one (the cap).
func TestDefaultPoolMax(t *testing.T) {
	for _, tc := range []struct {
		mem       int
		ownKernel bool
		want      int
	}{
		{24105, false, 8}, {24105, true, 4}, {2048, false, 1}, {4096, false, 2}, {2048, true, 1}, {256 << 10, true, 8},
	} {
		if got := defaultPoolMax(tc.mem, tc.ownKernel); got != tc.want {
			t.Errorf("defaultPoolMax(%d MiB, own kernel %v) = %d, want %d", tc.mem, tc.ownKernel, got, tc.want)
		}
	}
}

// TestPoolWantFollowsDemand: a pool keeps Size while sessions arrive
// slower than one start, and grows with the claim rate up to Max.
func TestPoolWantFollowsDemand(t *testing.T) {
	p := &sandboxPool{e: &Executor{cfg: Config{Pool: PoolConfig{Size: 2, Max: 8}}}, prep: 500 * time.Millisecond}
	claims := func(n int) *poolKey {
		k := &poolKey{}
		for range n {
			k.recent = append(k.recent, time.Now())
		}
		return k
	}
	for _, tc := range []struct{ claims, want int }{{0, 2}, {10, 2}, {30, 3}, {50, 5}, {500, 8}} {
		if got := p.want(claims(tc.claims)); got != tc.want {
			t.Errorf("%d claims in %s, start %s: want() = %d, want %d", tc.claims, poolWindow, p.prep, got, tc.want)
		}
	}
}

// TestPoolRefusesUnmountedWorkspace: a pooled sandbox whose claim's
// mount did not reach it (an engine in another mount namespace) refuses
// to run the program instead of running it in the empty slot.
func TestPoolRefusesUnmountedWorkspace(t *testing.T) {
	needRoot(t)
	e := newTestExecutor(t, withPool(t, 1, 1))
	readyPool(t, e, 1)
	p := e.pool
	var b *box
	p.mu.Lock()
	for _, k := range p.keys {
		if len(k.idle) > 0 && b == nil {
			b, k.idle = k.idle[0], k.idle[1:]
			p.total--
		}
	}
	p.mu.Unlock()
	s := spec(t, executors.LangBash, "echo ran")
	if _, err := fmt.Fprintf(b.conn.Conn, "61000 61000\n"); err != nil { // the identity, without the mount
		t.Fatal(err)
	}
	res, err := e.run(t.Context(), b, runInput{lang: s.Language, code: s.Code, timeout: 30 * time.Second,
		limits: DefaultLimits, dir: s.WorkspaceDir, requestID: s.RequestID, log: e.log})
	e.discard(b)
	if err != nil || res.ExitCode != 125 || strings.Contains(res.Stdout, "ran") || !strings.Contains(res.Stderr, "did not reach") {
		t.Fatalf("want exit 125 with the reason and no run: %+v %v", res, err)
	}
}
