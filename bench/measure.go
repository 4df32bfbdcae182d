package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os/exec"
	"slices"
	"sync"
	"time"
)

// side is one thing to measure: a single request or spawn. It times itself
// and returns how long the measured part took, so that set-up or clean-up a
// side needs (deleting a fresh session) stays out of its latency.
type side func(ctx context.Context) (time.Duration, error)

// timed makes a side of f, timing all of it.
func timed(f func(ctx context.Context) error) side {
	return func(ctx context.Context) (time.Duration, error) {
		t0 := time.Now()
		err := f(ctx)
		return time.Since(t0), err
	}
}

func rawSide(name string, args ...string) side {
	return timed(func(ctx context.Context) error {
		out, err := exec.CommandContext(ctx, name, args...).Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) && len(ee.Stderr) > 0 {
				return fmt.Errorf("%s: %w: %.300s", name, err, ee.Stderr)
			}
			return fmt.Errorf("%s: %w", name, err)
		}
		if len(out) == 0 {
			return fmt.Errorf("%s: no output", name)
		}
		return nil
	})
}

// retried is a side whose failures are counted and retried (up to twice)
// rather than ending the scenario: a peer that fails now and then is
// reported with its failure count, and only successful runs are timed.
type retried struct {
	s        side
	mu       sync.Mutex
	failures int
	first    string
}

func (r *retried) side(ctx context.Context) (time.Duration, error) {
	var err error
	for range 3 {
		var d time.Duration
		if d, err = r.s(ctx); err == nil {
			return d, nil
		}
		r.mu.Lock()
		r.failures++
		if r.first == "" {
			r.first = err.Error()
		}
		r.mu.Unlock()
	}
	return 0, err
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
				d, err := s(ctx)
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

// stats summarises latencies. LatMS keeps every latency for the charts.
type stats struct {
	P50   float64   `json:"p50_ms"`
	P95   float64   `json:"p95_ms"`
	P99   float64   `json:"p99_ms"`
	RPS   float64   `json:"req_per_s"`
	N     int       `json:"n"`
	Wall  float64   `json:"wall_s"`
	LatMS []float64 `json:"latencies_ms,omitempty"`
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
	st := stats{P50: q(0.50), P95: q(0.95), P99: q(0.99), N: len(s), Wall: wall.Seconds()}
	if wall > 0 {
		st.RPS = float64(len(s)) / wall.Seconds()
	}
	for _, d := range lat {
		st.LatMS = append(st.LatMS, math.Round(float64(d)/1e3)/1e3) // ms to the µs
	}
	return st
}

// named is a side with the label the report gives it.
type named struct {
	label string
	s     side
	// n caps this side's samples below the scenario's n (a slow peer).
	n int
}

// sideResult is one side of a scenario.
type sideResult struct {
	Label       string `json:"label"`
	Stats       stats  `json:"stats"`
	Unavailable string `json:"unavailable,omitempty"`
	// Failures counts failed runs of a retried side (not in Stats).
	Failures     int    `json:"failures,omitempty"`
	FirstFailure string `json:"first_failure,omitempty"`
}

// abResult compares a scenario's sides. The report's baseline is its
// first side whose label does not start with "gateway": the gateway's
// own sides usually come first, the pause scenario puts its cold start
// first.
type abResult struct {
	Name        string       `json:"name"`
	Key         string       `json:"key"`
	Concurrency int          `json:"concurrency"`
	Sides       []sideResult `json:"sides"`
	// Block is the number of requests per alternating block: side i's
	// k-th block of latencies was measured right after side i-1's.
	Block int `json:"block,omitempty"`
}

// pairedP50Delta is the median, over the alternating blocks, of side a's
// block p50 minus side b's block p50 (ms): the difference of requests
// measured side by side in time. A machine whose speed drifts or jumps
// between two modes (an aio instance's 1-CPU quota throttles a python
// start now and then, so its latencies have two humps about 7 ms apart)
// moves each side's overall p50 by which hump it lands on, a different
// mix on each side; the blocks' differences see the same machine on both
// sides. ok is false without the latencies or the block size (a result
// from before they were kept).
func (r abResult) pairedP50Delta(a, b string) (d float64, ok bool) {
	sa, okA := r.side(a)
	sb, okB := r.side(b)
	la, lb := sa.Stats.LatMS, sb.Stats.LatMS
	if !okA || !okB || r.Block <= 0 || len(la) < r.Block || len(lb) < r.Block {
		return 0, false
	}
	var diffs []float64
	for i := 0; i+r.Block <= min(len(la), len(lb)); i += r.Block {
		diffs = append(diffs, medianOf(la[i:i+r.Block])-medianOf(lb[i:i+r.Block]))
	}
	return medianOf(diffs), true
}

// medianOf is the median of xs (xs is not changed).
func medianOf(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func (r abResult) side(label string) (sideResult, bool) {
	for _, s := range r.Sides {
		if s.Label == label {
			return s, s.Unavailable == ""
		}
	}
	return sideResult{}, false
}

// ab alternates blocks of every side until each has its n samples, so that
// machine drift hits all sides alike.
func ab(ctx context.Context, key, name string, sides []named, c, n, block int) (abResult, error) {
	lat := make([][]time.Duration, len(sides))
	wall := make([]time.Duration, len(sides))
	want := func(i int) int {
		if sides[i].n > 0 && sides[i].n < n {
			return sides[i].n
		}
		return n
	}
	for {
		progressed := false
		for i, sd := range sides {
			k := min(block, want(i)-len(lat[i]))
			if k <= 0 {
				continue
			}
			progressed = true
			smp, err := measure(ctx, sd.s, c, k)
			if err != nil {
				return abResult{}, fmt.Errorf("%s %s: %w", name, sd.label, err)
			}
			lat[i] = append(lat[i], smp.lat...)
			wall[i] += smp.wall
		}
		if !progressed {
			break
		}
	}
	r := abResult{Name: name, Key: key, Concurrency: c, Block: block}
	for i, sd := range sides {
		r.Sides = append(r.Sides, sideResult{Label: sd.label, Stats: summarize(lat[i], wall[i])})
	}
	return r, nil
}

func (r abResult) print(w io.Writer) {
	fmt.Fprintf(w, "%s  c=%d\n", r.Name, r.Concurrency)
	for _, s := range r.Sides {
		if s.Unavailable != "" {
			fmt.Fprintf(w, "  %-30s unavailable: %s\n", s.Label, s.Unavailable)
			continue
		}
		fmt.Fprintf(w, "  %-30s p50 %8.2f ms  p95 %8.2f ms  p99 %8.2f ms  %8.1f req/s  n=%d\n",
			s.Label, s.Stats.P50, s.Stats.P95, s.Stats.P99, s.Stats.RPS, s.Stats.N)
	}
}
