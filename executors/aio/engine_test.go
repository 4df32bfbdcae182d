package aio

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/remote"
	"github.com/moby/moby/client"

	"github.com/sandgate/sandgate/executors"
)

// The pool against the real engine: the acceptance scenarios of the AIO
// issue, each counting containers through the engine itself.

func bashSpec(session, ws, code string) executors.Spec {
	return executors.Spec{RequestID: "r" + newSlot(), SessionID: session, Language: executors.LangBash, Code: code,
		Timeout: 30 * time.Second, WorkspaceDir: ws}
}

// TestEngineConcurrentAcquire: 100 concurrent acquires for one session
// create exactly one container.
func TestEngineConcurrentAcquire(t *testing.T) {
	e := newTestExecutor(t)
	ws := newWorkspace(t)
	var wg sync.WaitGroup
	leases := make(chan *lease, 100)
	for range 100 {
		wg.Go(func() {
			l, err := e.pool.acquire(context.Background(), binding{session: "one", ws: Workspace{Dir: ws, UID: DefaultSandboxID, GID: DefaultSandboxID}})
			if err != nil {
				t.Error(err)
				return
			}
			leases <- l
		})
	}
	wg.Wait()
	close(leases)
	if n := countContainers(t, e.cfg.Instance); n != 1 {
		t.Errorf("%d containers for one session after 100 concurrent acquires", n)
	}
	if got := e.pool.creates.Load(); got != 1 {
		t.Errorf("%d creates", got)
	}
	var l0 *lease
	for l := range leases {
		if l0 == nil {
			l0 = l
		} else if l.in != l0.in {
			t.Error("two instances for one session")
		}
		l.release(false)
	}
	// And the instance works.
	res, err := e.Execute(context.Background(), bashSpec("one", ws, "echo ok"))
	if err != nil || res.Stdout != "ok\n" {
		t.Errorf("run: %+v %v", res, err)
	}
}

// TestEngineThirtySessions: 30 sessions against max_instances 8 never
// hold more than 8 containers; every run completes or gets pool_exhausted.
func TestEngineThirtySessions(t *testing.T) {
	e := newTestExecutor(t, func(c *PoolConfig) { c.MaxInstances, c.AcquireTimeout = 8, 45*time.Second })
	var peak atomic.Int64
	stop := make(chan struct{})
	var mon sync.WaitGroup
	mon.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(25 * time.Millisecond):
			}
			n := int64(countContainers(t, e.cfg.Instance))
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
		}
	})
	var wg sync.WaitGroup
	var ok, exhausted atomic.Int64
	for i := range 30 {
		ws := newWorkspace(t)
		wg.Go(func() {
			s := fmt.Sprintf("sess%02d", i)
			res, err := e.Execute(context.Background(), bashSpec(s, ws, "echo "+s+"; sleep 0.3"))
			switch {
			case errors.Is(err, ErrPoolExhausted):
				exhausted.Add(1)
			case err != nil:
				t.Errorf("%s: %v", s, err)
			case res.Stdout != s+"\n":
				t.Errorf("%s: stdout %q", s, res.Stdout)
			default:
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	close(stop)
	mon.Wait()
	t.Logf("completed %d, pool_exhausted %d, peak containers %d, created %d", ok.Load(), exhausted.Load(), peak.Load(), e.pool.creates.Load())
	if peak.Load() > 8 {
		t.Errorf("peak of %d containers with max_instances 8", peak.Load())
	}
	if ok.Load()+exhausted.Load() != 30 {
		t.Errorf("%d runs neither completed nor got pool_exhausted", 30-ok.Load()-exhausted.Load())
	}
}

// TestEngineIdleTimeout: an idle instance is gone after idle_timeout.
func TestEngineIdleTimeout(t *testing.T) {
	e := newTestExecutor(t, func(c *PoolConfig) { c.IdleTimeout = time.Second })
	ws := newWorkspace(t)
	if _, err := e.Execute(context.Background(), bashSpec("idle", ws, "true")); err != nil {
		t.Fatal(err)
	}
	if n := countContainers(t, e.cfg.Instance); n != 1 {
		t.Fatalf("%d containers after a run", n)
	}
	start := time.Now()
	waitFor(t, 30*time.Second, "the idle container to go", func() bool { return countContainers(t, e.cfg.Instance) == 0 })
	if d := time.Since(start); d < 500*time.Millisecond {
		t.Errorf("removed after %v, before the idle timeout", d)
	}
	if _, ok := e.InstanceInfo("idle"); ok {
		t.Errorf("the session still lists an instance")
	}
}

// TestEngineMaxUses: an instance is recycled after max_uses.
func TestEngineMaxUses(t *testing.T) {
	e := newTestExecutor(t, func(c *PoolConfig) { c.MaxUses = 2 })
	ws := newWorkspace(t)
	var ids []string
	var creates []int64
	for range 3 {
		res, err := e.Execute(context.Background(), bashSpec("uses", ws, "echo x >> count.txt"))
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%+v %v", res, err)
		}
		info, _ := e.InstanceInfo("uses") // empty once the spent instance is on its way out
		ids = append(ids, info.Container)
		creates = append(creates, e.pool.creates.Load())
	}
	if creates[0] != 1 || creates[1] != 1 || creates[2] != 2 || ids[0] == "" || ids[2] == "" || ids[0] == ids[2] {
		t.Errorf("containers %v, creates %v: want one container for two uses, then a new one", ids, creates)
	}
	waitFor(t, 30*time.Second, "the recycled container to go", func() bool { return countContainers(t, e.cfg.Instance) == 1 })
	// The workspace outlives the instance.
	res, _ := e.Execute(context.Background(), bashSpec("uses", ws, "wc -l < count.txt"))
	if res.Stdout != "3\n" {
		t.Errorf("count.txt has %q lines", res.Stdout)
	}
}

// TestEngineDeadInstanceRunsOnANewOne: a session whose container died
// between runs (an engine restart kills them all) gets its next run done
// on a new instance, not a 503: the dead one never received it.
func TestEngineDeadInstanceRunsOnANewOne(t *testing.T) {
	e := newTestExecutor(t)
	ws := newWorkspace(t)
	if res, err := e.Execute(context.Background(), bashSpec("dies", ws, "echo kept > note.txt")); err != nil || res.ExitCode != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	info, ok := e.InstanceInfo("dies")
	if !ok || info.Container == "" {
		t.Fatalf("no instance: %+v", info)
	}
	cli, err := client.New(client.WithHostFromEnv())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.ContainerRemove(context.Background(), info.Container, client.ContainerRemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	res, err := e.Execute(context.Background(), bashSpec("dies", ws, "cat note.txt"))
	if err != nil || res.Stdout != "kept\n" {
		t.Fatalf("the run after the container died: %+v %v", res, err)
	}
	if now, _ := e.InstanceInfo("dies"); now.Container == info.Container {
		t.Errorf("still on the dead container %s", now.Container)
	}
	if got := e.pool.creates.Load(); got != 2 {
		t.Errorf("%d creates, want 2", got)
	}
}

// TestEngineAdoptsAfterRestart: a gateway that dies leaves its containers
// running; the next one adopts them instead of starting duplicates.
func TestEngineAdoptsAfterRestart(t *testing.T) {
	state := newStateDir(t)
	inst := testInstancePrefix + newSlot()
	mut := func(c *PoolConfig) { c.StateDir, c.Instance, c.MinInstances = state, inst, 1 }
	ws := newWorkspace(t)

	first := newTestExecutorNoCleanup(t, mut)
	if _, err := first.Execute(context.Background(), bashSpec("survivor", ws, "echo before > state.txt")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "an unbound instance", func() bool { return first.pool.stats()["unbound"] == 1 && first.pool.stats()["acquiring"] == 0 })
	before, _ := first.InstanceInfo("survivor")
	first.abandon() // a crash: nothing is removed

	second := newTestExecutor(t, mut)
	info, ok := second.InstanceInfo("survivor")
	if !ok || !info.Adopted || info.Container != before.Container {
		t.Fatalf("after restart: %+v %v (was %s)", info, ok, before.Container)
	}
	res, err := second.Execute(context.Background(), bashSpec("survivor", ws, "cat state.txt"))
	if err != nil || res.Stdout != "before\n" {
		t.Errorf("run on the adopted instance: %+v %v", res, err)
	}
	if n := countContainers(t, inst); n != 2 {
		t.Errorf("%d containers: want the two adopted ones, no duplicates", n)
	}
	if got := second.pool.creates.Load(); got != 0 {
		t.Errorf("the second gateway created %d containers", got)
	}
}

// newTestExecutorNoCleanup is newTestExecutor for an executor the test
// abandons itself.
func newTestExecutorNoCleanup(t *testing.T, mutate ...func(*PoolConfig)) *Executor {
	t.Helper()
	cfg := PoolConfig{Image: testImage(t), IdleTimeout: time.Minute, MaxInstances: 4}
	for _, m := range mutate {
		m(&cfg)
	}
	testInstances.Store(cfg.Instance, true)
	e, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestEngineBrowserCDP: the session's sandbox browser is reachable with
// chromedp through the URL BrowserCDP returns, and the instance's
// Chromium runs without network, capabilities or its own sandbox.
func TestEngineBrowserCDP(t *testing.T) {
	ws := newWorkspace(t)
	e := newTestExecutor(t, func(c *PoolConfig) {
		c.Workspaces = func(context.Context, string) (Workspace, error) { return Workspace{Dir: ws}, nil }
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url, err := e.BrowserCDP(ctx, "browsing")
	if err != nil {
		t.Fatal(err)
	}
	actx, acancel := remote.NewAllocator(ctx, url, remote.NoModifyURL)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	if err := chromedp.Do(bctx, chromedp.Navigate("data:text/html,<title>sandboxed</title><p>hi</p>")); err != nil {
		t.Fatalf("chromedp through %s: %v", url, err)
	}
	title, err := chromedp.Run(bctx, chromedp.Title())
	if err != nil {
		t.Fatal(err)
	}
	sum, err := chromedp.Run(bctx, chromedp.Evaluate[int]("1+2"))
	if err != nil {
		t.Fatal(err)
	}
	if sum != 3 || title != "sandboxed" {
		t.Errorf("evaluate %d title %q", sum, title)
	}
	// While the CDP connection is open the instance is held.
	if info, _ := e.InstanceInfo("browsing"); info.State != "busy" {
		t.Errorf("instance state %q while a CDP connection is open", info.State)
	}
	bcancel()
	acancel()
	waitFor(t, 10*time.Second, "the instance to be released", func() bool { info, _ := e.InstanceInfo("browsing"); return info.State == "idle" })
	// A second call reuses the running browser; a wrong token is refused.
	again, err := e.BrowserCDP(ctx, "browsing")
	if err != nil || again != url {
		t.Errorf("second BrowserCDP: %q %v (first %q)", again, err, url)
	}
	token := strings.Split(strings.TrimPrefix(url, "ws://"), "/")[1]
	bad := strings.Replace(url, token, strings.Repeat("0", len(token)), 1)
	if _, err := remote.DialContext(ctx, bad); err == nil {
		t.Errorf("a wrong token was accepted")
	}
}

// TestEngineBindTakesTheClaim: in none mode under a root gateway a bind
// hands the instance its session's identity through sandboxd's claim
// (claimas.go), not a second sandboxd started with `docker exec`: after
// two sessions' runs in instances started ahead (MinInstances), every
// container of the pool carries the claim label and the engine has no
// exec in any (the exec path's sandboxd runs as one for the instance's
// life).
func TestEngineBindTakesTheClaim(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the identity claim needs a root gateway")
	}
	e := newTestExecutor(t, func(c *PoolConfig) { c.MinInstances = 1 })
	waitFor(t, time.Minute, "one instance started ahead", func() bool { s := e.pool.stats(); return s["unbound"] == 1 && s["acquiring"] == 0 })
	for _, session := range []string{"first", "second"} {
		res, err := e.Execute(context.Background(), bashSpec(session, newWorkspace(t), "id -u"))
		if want := fmt.Sprintf("%d\n", DefaultSandboxID); err != nil || res.Stdout != want {
			t.Fatalf("%s: run %+v %v, want stdout %q", session, res, err, want)
		}
	}
	// The engine lists a container while its create is still under way,
	// before inspect can find it: let the pool's refill finish first.
	waitFor(t, time.Minute, "the pool to settle", func() bool { s := e.pool.stats(); return s["acquiring"] == 0 && s["destroying"] == 0 })
	cli, err := client.New(client.WithHostFromEnv())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	list := listContainers(t, e.cfg.Instance)
	if len(list) < 2 {
		t.Fatalf("%d containers for two sessions", len(list))
	}
	for _, c := range list {
		in, err := cli.ContainerInspect(context.Background(), c.ID, client.ContainerInspectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c.Labels[labelClaim] != "identity" || len(in.Container.ExecIDs) != 0 {
			t.Errorf("container %s (%s): claim label %q, execs %v: a bind went through docker exec",
				c.Names, c.Labels[labelSession], c.Labels[labelClaim], in.Container.ExecIDs)
		}
	}
}
