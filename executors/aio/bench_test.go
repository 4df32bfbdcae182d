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
// (acquire needs no -benchtime: it is in-process). Each reports ms/op or
// ns/op for its own operation; BenchmarkContainerStart is the raw
// baseline (create + start + remove of the same image, no sandboxd) from
// the same run.

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
// acquire to a sandboxd that answers (create, start, mount, exec, ready).
func BenchmarkColdStart(b *testing.B) {
	e := newTestExecutor(b, func(c *PoolConfig) { c.MaxInstances = 2 })
	ws := newWorkspace(b)
	ctx := context.Background()
	i := 0
	for b.Loop() {
		i++
		s := fmt.Sprint("cold", i)
		l, err := e.pool.acquire(ctx, binding{session: s, ws: Workspace{Dir: ws, UID: DefaultSandboxID, GID: DefaultSandboxID}})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		l.release(false)
		e.pool.releaseSession(s)
		waitFor(b, time.Minute, "the instance to go", func() bool { return e.pool.stats()["total"] == 0 })
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/start")
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

// BenchmarkContainerStart is the baseline: create, start and remove a
// container of the same image with the same hardening, nothing else.
func BenchmarkContainerStart(b *testing.B) {
	img := testImage(b)
	cli := requireDocker(b)
	ctx := context.Background()
	be := &localBackend{cfg: PoolConfig{Image: img, Network: NetworkNone, StateDir: newStateDir(b)}.withDefaults()}
	h := &handle{dir: be.cfg.StateDir}
	cfg, hc := be.containerConfig(h, map[string]string{"sandgate.test": testRun, labelExecutor: "aio"})
	hc.Mounts = nil
	for b.Loop() {
		res, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: cfg, HostConfig: hc})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := cli.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if _, err := cli.ContainerRemove(ctx, res.ID, client.ContainerRemoveOptions{Force: true}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/start")
}
