package docker

import (
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
)

// The benchmarks compare the executor with the baseline the issue names: a
// fresh `docker run --rm --network none <same image> python3 -c 'print(1)'`
// through the CLI. Every iteration runs one round of the baseline and one
// round through the executor back to back, each round being `c` runs at
// once, so both see the same machine load. Reported: p50 and p95 of single
// runs, throughput (runs per second of a round), and executor p50 / CLI p50.
//
//	go test -run '^$' -bench 'Fresh|Warm' -benchtime 40x ./executors/docker/
//
// Fresh: every run is a new session (warm starts off). Warm: every run is
// the next run of a session whose previous run finished and whose warm
// container is ready; the wait for it happens outside the timing, as an
// agent's think time between two calls (seconds) exceeds the preparation
// (~0.3 s).

func BenchmarkFresh(b *testing.B) {
	for _, c := range []int{1, 8} {
		b.Run("c"+strconv.Itoa(c), func(b *testing.B) { benchRounds(b, c, false) })
	}
}

func BenchmarkWarm(b *testing.B) {
	for _, c := range []int{1, 8} {
		b.Run("c"+strconv.Itoa(c), func(b *testing.B) { benchRounds(b, c, true) })
	}
}

func benchRounds(b *testing.B, c int, warm bool) {
	e := newTestExecutor(b, func(cfg *Config) {
		cfg.WarmMax = -1
		if warm {
			cfg.WarmMax = c
		}
	})
	image := e.cfg.Images[executors.LangPython]
	cli := func() {
		out, err := exec.Command("docker", "run", "--rm", "--network", "none", image, "python3", "-c", "print(1)").Output()
		if err != nil || string(out) != "1\n" {
			b.Errorf("docker run: %q %v", out, err)
		}
	}
	sessions := make([]session, c)
	for i := range sessions {
		sessions[i] = session{id: "bench-" + strconv.Itoa(i), ws: newWorkspace(b), uid: 3_600_000 + i}
	}
	run := func(i int) func() {
		return func() {
			s := sessions[i]
			if !warm {
				s.id = ""
			}
			res, err := e.Execute(b.Context(), s.spec(executors.LangPython, "print(1)"))
			if err != nil || res.Stdout != "1\n" {
				b.Errorf("Execute: %+v %v", res, err)
			}
		}
	}
	settle := func() {
		if warm {
			for _, s := range sessions {
				if !e.warm.waitReady(b.Context(), s.id) {
					b.Fatalf("session %s has no warm container", s.id)
				}
			}
		}
		e.bg.Wait() // removals of the last round, off the clock
	}
	if warm { // first runs make the sessions' warm containers
		round(c, run)
	}
	var cliLat, exLat []time.Duration
	var cliWall, exWall time.Duration
	for b.Loop() {
		settle()
		lat, wall := round(c, func(int) func() { return cli })
		cliLat, cliWall = append(cliLat, lat...), cliWall+wall
		settle()
		lat, wall = round(c, run)
		exLat, exWall = append(exLat, lat...), exWall+wall
	}
	b.ReportMetric(ms(pct(cliLat, 50)), "cli-p50-ms")
	b.ReportMetric(ms(pct(cliLat, 95)), "cli-p95-ms")
	b.ReportMetric(ms(pct(exLat, 50)), "exec-p50-ms")
	b.ReportMetric(ms(pct(exLat, 95)), "exec-p95-ms")
	b.ReportMetric(float64(len(cliLat))/cliWall.Seconds(), "cli-runs/s")
	b.ReportMetric(float64(len(exLat))/exWall.Seconds(), "exec-runs/s")
	b.ReportMetric(float64(pct(exLat, 50))/float64(pct(cliLat, 50)), "p50-ratio")
}

// round runs c functions at once and returns each one's latency and the
// round's wall time.
func round(c int, f func(i int) func()) ([]time.Duration, time.Duration) {
	lat := make([]time.Duration, c)
	var wg sync.WaitGroup
	began := time.Now()
	for i := range c {
		fn := f(i)
		wg.Go(func() {
			t0 := time.Now()
			fn()
			lat[i] = time.Since(t0)
		})
	}
	wg.Wait()
	return lat, time.Since(began)
}

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	d = slices.Clone(d)
	slices.Sort(d)
	return d[min(len(d)-1, len(d)*p/100)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
