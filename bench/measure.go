package main

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"sync"
	"time"
)

// side is one thing to measure: a single request or spawn.
type side func(ctx context.Context) error

func rawSide(name string, args ...string) side {
	return func(ctx context.Context) error {
		out, err := exec.CommandContext(ctx, name, args...).Output()
		if err != nil {
			return err
		}
		if len(out) == 0 {
			return fmt.Errorf("%s: no output", name)
		}
		return nil
	}
}

// sample is the latencies of one side and the wall time they took.
type sample struct {
	lat  []time.Duration
	wall time.Duration
}

// measure runs n calls of s on c workers.
func measure(ctx context.Context, s side, c, n int) (sample, error) {
	var mu sync.Mutex
	var firstErr error
	lat := make([]time.Duration, 0, n)
	jobs := make(chan struct{}, n)
	for range n {
		jobs <- struct{}{}
	}
	close(jobs)
	start := time.Now()
	var wg sync.WaitGroup
	for range c {
		wg.Go(func() {
			for range jobs {
				t0 := time.Now()
				err := s(ctx)
				d := time.Since(t0)
				mu.Lock()
				lat = append(lat, d)
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return sample{lat: lat, wall: time.Since(start)}, firstErr
}

// stats summarises latencies.
type stats struct {
	P50  float64 `json:"p50_ms"`
	P95  float64 `json:"p95_ms"`
	P99  float64 `json:"p99_ms"`
	RPS  float64 `json:"req_per_s"`
	N    int     `json:"n"`
	Wall float64 `json:"wall_s"`
}

func summarize(lat []time.Duration, wall time.Duration) stats {
	s := slices.Clone(lat)
	slices.Sort(s)
	q := func(p float64) float64 {
		if len(s) == 0 {
			return 0
		}
		return float64(s[int(p*float64(len(s)-1))]) / 1e6
	}
	return stats{P50: q(0.50), P95: q(0.95), P99: q(0.99), RPS: float64(len(s)) / wall.Seconds(), N: len(s), Wall: wall.Seconds()}
}

// abResult compares the gateway (A) with its baseline (B).
type abResult struct {
	Name        string  `json:"name"`
	Concurrency int     `json:"concurrency"`
	Gateway     stats   `json:"gateway"`
	Baseline    stats   `json:"baseline"`
	P50DeltaMS  float64 `json:"p50_delta_ms"`
	RPSRatio    float64 `json:"rps_ratio"`
}

// ab alternates blocks of A and B until each side has n samples.
func ab(ctx context.Context, name string, a, b side, c, n, block int) (abResult, error) {
	var la, lb []time.Duration
	var wa, wb time.Duration
	for len(la) < n {
		k := min(block, n-len(la))
		sa, err := measure(ctx, a, c, k)
		if err != nil {
			return abResult{}, fmt.Errorf("%s gateway: %w", name, err)
		}
		sb, err := measure(ctx, b, c, k)
		if err != nil {
			return abResult{}, fmt.Errorf("%s baseline: %w", name, err)
		}
		la, lb = append(la, sa.lat...), append(lb, sb.lat...)
		wa, wb = wa+sa.wall, wb+sb.wall
	}
	r := abResult{Name: name, Concurrency: c, Gateway: summarize(la, wa), Baseline: summarize(lb, wb)}
	r.P50DeltaMS = r.Gateway.P50 - r.Baseline.P50
	r.RPSRatio = r.Gateway.RPS / r.Baseline.RPS
	return r, nil
}

func (r abResult) print(w io.Writer) {
	fmt.Fprintf(w, "%s  c=%d  n=%d\n", r.Name, r.Concurrency, r.Gateway.N)
	fmt.Fprintf(w, "  %-9s p50 %7.2f ms  p95 %7.2f ms  p99 %7.2f ms  %8.1f req/s\n", "gateway", r.Gateway.P50, r.Gateway.P95, r.Gateway.P99, r.Gateway.RPS)
	fmt.Fprintf(w, "  %-9s p50 %7.2f ms  p95 %7.2f ms  p99 %7.2f ms  %8.1f req/s\n", "raw", r.Baseline.P50, r.Baseline.P95, r.Baseline.P99, r.Baseline.RPS)
	fmt.Fprintf(w, "  p50 delta %+.2f ms (target <= +5 ms: %s)   throughput %.1f%% of raw (target >= 85%%: %s)\n",
		r.P50DeltaMS, verdict(r.P50DeltaMS <= 5), 100*r.RPSRatio, verdict(r.RPSRatio >= 0.85))
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}
