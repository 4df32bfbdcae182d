package gvisor

import (
	"context"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/docker"
	"github.com/sandgate/sandgate/executors/executortest"
)

// BenchmarkPrint1 measures python3 print(1) in the gvisor executor against
// the same in the docker (runc) executor and against the raw CLI under
// both runtimes, all in the same loop so that every side sees the same
// machine load. Each iteration runs every side once, in a rotating order.
// Reported: each side's p50 and the ratios the targets name.
//
//	go test -run '^$' -bench Print1 -benchtime 20x ./executors/gvisor/
//
// Fresh: a run without a session (a container is created, started and
// removed for it, as the CLI does). Warm: the next run of a session whose
// warm container is ready; an agent's think time (1 s, untimed) passes
// before each, as between two calls of a model.
func BenchmarkPrint1(b *testing.B) {
	const think = time.Second
	needGVisor(b)
	image := docker.DefaultImage
	gvFresh := newTestExecutor(b, func(c *Config) { c.WarmMax = -1 })
	gvWarm := newTestExecutor(b)
	rcFresh := newDockerExecutor(b, -1)
	rcWarm := newDockerExecutor(b, 0)
	ws := newWorkspace(b)
	run := func(e executors.Executor, session string) func() {
		return func() {
			s := executors.Spec{SessionID: session, Language: executors.LangPython, Code: "print(1)",
				Timeout: time.Minute, WorkspaceDir: ws, UID: 3_900_000, GID: 3_900_000}
			res, err := e.Execute(b.Context(), s)
			if err != nil || res.Stdout != "1\n" {
				b.Fatalf("Execute: %+v %v", res, err)
			}
		}
	}
	cli := func(runtime string) func() {
		return func() {
			out, err := exec.Command("docker", "run", "--rm", "--runtime="+runtime, "--network", "none",
				image, "python3", "-c", "print(1)").Output()
			if err != nil || string(out) != "1\n" {
				b.Fatalf("docker run --runtime=%s: %q %v", runtime, out, err)
			}
		}
	}
	sides := []struct {
		name  string
		f     func()
		think bool
	}{
		{"runsc-cli", cli("runsc"), false},
		{"runc-cli", cli("runc"), false},
		{"gvisor-fresh", run(gvFresh, ""), false},
		{"docker-fresh", run(rcFresh, ""), false},
		{"gvisor-warm", run(gvWarm, "bench-gvisor"), true},
		{"docker-warm", run(rcWarm, "bench-docker"), true},
	}
	for _, s := range sides { // warm-up, and the sessions' first runs
		s.f()
	}
	lat := make(map[string][]time.Duration, len(sides))
	i := 0
	for b.Loop() {
		for j := range sides {
			s := sides[(i+j)%len(sides)]
			if s.think {
				b.StopTimer()
				time.Sleep(think)
				b.StartTimer()
			}
			t0 := time.Now()
			s.f()
			lat[s.name] = append(lat[s.name], time.Since(t0))
		}
		i++
	}
	p50 := func(name string) float64 { return ms(pct(lat[name], 50)) }
	for _, s := range sides {
		b.ReportMetric(p50(s.name), s.name+"-p50-ms")
	}
	b.ReportMetric(p50("gvisor-fresh")/p50("runsc-cli"), "gvisor-fresh/runsc-cli")
	b.ReportMetric(p50("gvisor-warm")/p50("runsc-cli"), "gvisor-warm/runsc-cli")
	b.ReportMetric(p50("gvisor-fresh")/p50("runc-cli"), "gvisor-fresh/runc-cli")
	b.ReportMetric(p50("docker-fresh")/p50("runc-cli"), "docker-fresh/runc-cli")
	b.ReportMetric(p50("gvisor-warm")/p50("docker-warm"), "gvisor-warm/docker-warm")
	b.ReportMetric(p50("runsc-cli")/p50("runc-cli"), "runsc-cli/runc-cli")
}

// newDockerExecutor is the runc docker executor with warmMax (-1: no warm
// containers; 0: the default), closed at the end.
func newDockerExecutor(b *testing.B, warmMax int) *docker.Executor {
	e, err := docker.New(b.Context(), docker.Config{Pool: noPool, Instance: "bench-" + executortest.Nonce(), Logger: testLogger(b),
		WarmMax: warmMax, WarmAfter: 1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = e.Close(ctx)
	})
	return e
}

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[(len(s)-1)*p/100]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
