package aio

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/moby/moby/client"
)

// The pool's costs against the real engine. Run with
//
//	go test -run '^$' -bench . -benchtime 20x ./executors/aio/
//
// (acquire needs no -benchtime: it is in-process).

// BenchmarkAcquireWarm: acquiring a session's warm (idle, bound) instance
// and releasing it, in process. The acceptance bound is 1 ms.
func BenchmarkAcquireWarm(b *testing.B) {
	// MaxUses high enough that the loop never recycles the instance.
	e := newTestExecutor(b, func(c *PoolConfig) { c.MaxUses = 1 << 40 })
	ws := newWorkspace(b)
	if _, err := e.Execute(context.Background(), bashSpec("warm", ws, "true")); err != nil {
		b.Fatal(err)
	}
	bd := binding{session: "warm", ws: Workspace{Dir: ws, UID: DefaultSandboxID, GID: DefaultSandboxID}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		l, err := e.pool.acquire(ctx, bd)
		if err != nil {
			b.Fatal(err)
		}
		l.release(false)
	}
}

// BenchmarkColdStart: a new session with no instance started ahead, from
// acquire to a sandboxd that answers (create, start, mount, exec sandboxd,
// ready), interleaved with the raw baseline: create and start of a
// container of the same image and hardening with nothing else. Reports
// both means (ms) from the same run.
func BenchmarkColdStart(b *testing.B) {
	e := newTestExecutor(b, func(c *PoolConfig) { c.MaxInstances = 2 })
	cli := requireDocker(b)
	ws := newWorkspace(b)
	ctx := context.Background()
	be := &localBackend{cfg: PoolConfig{Image: e.cfg.Image, Network: NetworkNone, StateDir: e.cfg.StateDir}.withDefaults()}
	cfg, hc := be.containerConfig(&handle{dir: e.cfg.StateDir}, map[string]string{"sandgate.test": testRun, labelExecutor: "aio"})
	hc.Mounts = nil
	var raw, cold time.Duration
	i := 0
	for b.Loop() {
		start := time.Now()
		res, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: cfg, HostConfig: hc})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := cli.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
			b.Fatal(err)
		}
		raw += time.Since(start)
		if _, err := cli.ContainerRemove(ctx, res.ID, client.ContainerRemoveOptions{Force: true}); err != nil {
			b.Fatal(err)
		}

		i++
		s := fmt.Sprint("cold", i)
		start = time.Now()
		l, err := e.pool.acquire(ctx, binding{session: s, ws: Workspace{Dir: ws, UID: DefaultSandboxID, GID: DefaultSandboxID}})
		if err != nil {
			b.Fatal(err)
		}
		cold += time.Since(start)
		l.release(false)
		e.pool.releaseSession(s)
		waitFor(b, time.Minute, "the instance to go", func() bool { return e.pool.stats()["total"] == 0 })
	}
	b.ReportMetric(float64(cold.Milliseconds())/float64(b.N), "cold-ms")
	b.ReportMetric(float64(raw.Milliseconds())/float64(b.N), "raw-container-ms")
}

// BenchmarkBindAhead: a new session that binds an instance started ahead
// (mount its workspace, exec sandboxd as its uid, ready).
func BenchmarkBindAhead(b *testing.B) {
	e := newTestExecutor(b, func(c *PoolConfig) { c.MinInstances, c.MaxInstances = 1, 2 })
	ws := newWorkspace(b)
	ctx := context.Background()
	i := 0
	for b.Loop() {
		b.StopTimer()
		waitFor(b, time.Minute, "an instance started ahead", func() bool {
			st := e.pool.stats()
			return st["unbound"] == 1 && st["idle"] == 1 && st["total"] == 1
		})
		i++
		s := fmt.Sprint("ahead", i)
		b.StartTimer()
		l, err := e.pool.acquire(ctx, binding{session: s, ws: Workspace{Dir: ws, UID: DefaultSandboxID, GID: DefaultSandboxID}})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		l.release(false)
		e.pool.releaseSession(s)
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/bind")
}
