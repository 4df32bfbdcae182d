package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandgate/sandgate/internal/procfs"
)

// deniedCommand is an execute the policy denies outright (risk CRITICAL):
// the mixed workload's intended denial, sent once per cycle.
const deniedCommand = "rm -rf /"

// mixedOp is one step of an agent's cycle.
type mixedOp struct {
	name string
	do   func(ctx context.Context, g *gatewayProc, session string) error
	// deny marks the step whose policy denial is intended.
	deny bool
}

func mixedOps(withDenial bool) []mixedOp {
	ops := []mixedOp{
		{name: "run_code", do: func(ctx context.Context, g *gatewayProc, s string) error {
			return g.runCode(ctx, s, "print(1)", false, "")
		}},
		{name: "execute", do: func(ctx context.Context, g *gatewayProc, s string) error {
			raw, err := g.do(ctx, "POST", "/v1/sessions/"+s+"/execute", "application/json",
				jsonBody(map[string]any{"command": "echo hi"}))
			if err == nil && !bytes.Contains(raw, []byte(`"exit_code":0`)) {
				err = fmt.Errorf("execute: %.300s", raw)
			}
			return err
		}},
		{name: "write", do: func(ctx context.Context, g *gatewayProc, s string) error {
			_, err := g.do(ctx, "PUT", "/v1/sessions/"+s+"/files/content?path=notes.md", "text/plain",
				[]byte("# notes\nalpha line\nsecond line\n"))
			return err
		}},
		{name: "edit", do: func(ctx context.Context, g *gatewayProc, s string) error {
			_, err := g.do(ctx, "POST", "/v1/sessions/"+s+"/files/edit", "application/json",
				jsonBody(map[string]any{"path": "notes.md", "old": "alpha", "new": "beta"}))
			return err
		}},
		{name: "grep", do: func(ctx context.Context, g *gatewayProc, s string) error {
			raw, err := g.do(ctx, "GET", "/v1/sessions/"+s+"/files/grep?pattern=beta", "", nil)
			if err == nil && !bytes.Contains(raw, []byte("beta line")) {
				err = fmt.Errorf("grep: %.300s", raw)
			}
			return err
		}},
	}
	if withDenial {
		ops = append(ops, mixedOp{name: "execute (denied)", deny: true, do: func(ctx context.Context, g *gatewayProc, s string) error {
			_, err := g.do(ctx, "POST", "/v1/sessions/"+s+"/execute", "application/json",
				jsonBody(map[string]any{"command": deniedCommand}))
			if err == nil {
				return errors.New("execute of " + deniedCommand + " was not denied")
			}
			return err
		}})
	}
	return ops
}

// denies reports whether the policy denies deniedCommand outright (and does
// not, say, wait for an approval), asked through /v1/policy/evaluate.
func (g *gatewayProc) denies(ctx context.Context) bool {
	raw, err := g.do(ctx, "POST", "/v1/policy/evaluate", "application/json",
		jsonBody(map[string]any{"session_id": "probe", "kind": "execute", "code": deniedCommand, "language": "bash"}))
	return err == nil && bytes.Contains(raw, []byte(`"action":"deny"`))
}

// mixedResult is one concurrency level of the mixed workload.
type mixedResult struct {
	Concurrency int              `json:"concurrency"`
	DurationS   float64          `json:"duration_s"`
	All         stats            `json:"all"`
	PerOp       map[string]stats `json:"per_op"`
	// Outcomes counts every non-2xx answer and transport error as
	// "op: status code" (or "op: error"); Intended counts the intended
	// denials among them, Unintended the rest.
	Outcomes   map[string]int `json:"non_2xx"`
	Intended   int            `json:"intended_denials"`
	Unintended int            `json:"unintended_errors"`
	FirstError string         `json:"first_error,omitempty"`
}

// runMixed runs c agents, each in a session of its own, cycling through
// ops until d has passed.
// A non-nil rest is read-locked for each cycle, so that whoever holds it
// for writing sees the gateway between cycles, with no request in flight.
func runMixed(ctx context.Context, g *gatewayProc, c int, d time.Duration, withDenial bool, keepLat bool, rest *sync.RWMutex) mixedResult {
	ops := mixedOps(withDenial)
	tag := randHex()
	var mu sync.Mutex
	perOp := map[string][]time.Duration{}
	var all []time.Duration
	res := mixedResult{Concurrency: c, Outcomes: map[string]int{}}
	deadline := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range c {
		session := fmt.Sprintf("mix-%s-%d", tag, i)
		wg.Go(func() {
			for time.Now().Before(deadline) && ctx.Err() == nil {
				if rest != nil {
					rest.RLock()
				}
				for _, op := range ops {
					t0 := time.Now()
					err := op.do(ctx, g, session)
					lat := time.Since(t0)
					mu.Lock()
					perOp[op.name] = append(perOp[op.name], lat)
					all = append(all, lat)
					if err != nil {
						var he *httpError
						key := op.name + ": error"
						if errors.As(err, &he) {
							key = fmt.Sprintf("%s: %d %s", op.name, he.Status, he.Code)
						}
						res.Outcomes[key]++
						if op.deny && he != nil && he.Status == 403 {
							res.Intended++
						} else {
							res.Unintended++
							if res.FirstError == "" {
								res.FirstError = op.name + ": " + err.Error()
							}
						}
					}
					mu.Unlock()
				}
				if rest != nil {
					rest.RUnlock()
				}
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	res.DurationS = wall.Seconds()
	res.All = summarize(all, wall)
	if !keepLat {
		res.All.LatMS = nil
	}
	res.PerOp = map[string]stats{}
	for name, l := range perOp {
		st := summarize(l, wall)
		st.LatMS = nil
		res.PerOp[name] = st
	}
	return res
}

func (m mixedResult) print() {
	fmt.Printf("mixed workload  c=%d  %.0f s\n  all ops p50 %.2f ms p95 %.2f ms p99 %.2f ms %.1f req/s n=%d\n",
		m.Concurrency, m.DurationS, m.All.P50, m.All.P95, m.All.P99, m.All.RPS, m.All.N)
	names := make([]string, 0, len(m.PerOp))
	for n := range m.PerOp {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		s := m.PerOp[n]
		fmt.Printf("  %-18s p50 %8.2f ms p95 %8.2f ms p99 %8.2f ms n=%d\n", n, s.P50, s.P95, s.P99, s.N)
	}
	fmt.Printf("  non-2xx: %v (intended denials %d, unintended %d)\n", m.Outcomes, m.Intended, m.Unintended)
	if m.FirstError != "" {
		fmt.Printf("  first unintended error: %.300s\n", m.FirstError)
	}
}

// soakSample is one reading of the gateway's resources.
type soakSample struct {
	T          float64 `json:"t_s"`
	RSSMB      float64 `json:"rss_mb"`
	Goroutines int     `json:"goroutines"`
	FDs        int     `json:"fds"`
	Containers int     `json:"containers"`
	Children   int     `json:"child_processes"`
}

// soakResult is the soak run: the series and the flatness verdicts.
type soakResult struct {
	Date        time.Time           `json:"date"`
	Commit      string              `json:"commit"`
	Machine     machine             `json:"machine"`
	Concurrency int                 `json:"concurrency"`
	DurationS   float64             `json:"duration_s"`
	IntervalS   float64             `json:"interval_s"`
	Samples     []soakSample        `json:"samples"`
	Workload    mixedResult         `json:"workload"`
	Flat        map[string]flatness `json:"flatness"`
}

// flatness judges one series over the second half of the run: flat when
// every sample lies within 10% of that half's median (counts below 10 may
// move by one, so that a run in flight does not read as a leak).
type flatness struct {
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	Median float64 `json:"median"`
	Flat   bool    `json:"flat"`
}

func judge(vals []float64) flatness {
	if len(vals) == 0 {
		return flatness{}
	}
	half := slices.Clone(vals[len(vals)/2:])
	slices.Sort(half)
	f := flatness{Min: half[0], Max: half[len(half)-1], Median: half[len(half)/2]}
	tol := 0.10 * f.Median
	if f.Median < 10 {
		tol = max(tol, 1)
	}
	f.Flat = f.Max-f.Median <= tol && f.Median-f.Min <= tol
	return f
}

// sample reads the gateway's resources now.
func (g *gatewayProc) sample(t0 time.Time) soakSample {
	s := soakSample{T: time.Since(t0).Seconds(), RSSMB: g.rssMB(), Goroutines: g.goroutines(), FDs: -1, Containers: -1}
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", g.pid())); err == nil {
		s.FDs = len(ents)
	}
	// This gateway's containers only: the engine is shared with others.
	s.Containers = 0
	for _, inst := range []string{"sandgate.executor=docker,sandgate.instance=default", "sandgate.executor=aio,sandgate.instance=" + g.aioInstance} {
		args := []string{"ps", "-q", "--filter", "label=sandgate.managed=true"}
		for l := range strings.SplitSeq(inst, ",") {
			args = append(args, "--filter", "label="+l)
		}
		out, err := exec.Command("docker", args...).Output()
		if err != nil {
			s.Containers = -1
			break
		}
		s.Containers += len(strings.Fields(string(out)))
	}
	s.Children = descendants(g.pid())
	return s
}

// descendants counts the processes below pid (children, grandchildren...).
func descendants(pid int) int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return -1
	}
	parent := map[int]int{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if s, err := procfs.ReadStat(p); err == nil {
			parent[p] = s.PPID
		}
	}
	n := 0
	for p := range parent {
		for q, hops := parent[p], 0; q > 1 && hops < 64; q, hops = parent[q], hops+1 {
			if q == pid {
				n++
				break
			}
		}
	}
	return n
}

// soak runs the mixed workload for d, sampling every interval.
func soak(ctx context.Context, g *gatewayProc, c int, d, interval time.Duration) soakResult {
	r := soakResult{Concurrency: c, DurationS: d.Seconds(), IntervalS: interval.Seconds()}
	t0 := time.Now()
	done := make(chan mixedResult)
	var rest sync.RWMutex
	deny := g.denies(ctx)
	go func() { done <- runMixed(ctx, g, c, d, deny, false, &rest) }()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	r.Samples = append(r.Samples, g.sample(t0))
	for {
		select {
		case m := <-done:
			r.Workload = m
			r.Samples = append(r.Samples, g.sample(t0))
			series := map[string]func(soakSample) float64{
				"rss_mb":          func(s soakSample) float64 { return s.RSSMB },
				"goroutines":      func(s soakSample) float64 { return float64(s.Goroutines) },
				"fds":             func(s soakSample) float64 { return float64(s.FDs) },
				"containers":      func(s soakSample) float64 { return float64(s.Containers) },
				"child_processes": func(s soakSample) float64 { return float64(s.Children) },
			}
			r.Flat = map[string]flatness{}
			for name, f := range series {
				var v []float64
				for _, s := range r.Samples {
					v = append(v, f(s))
				}
				r.Flat[name] = judge(v)
			}
			return r
		case <-tick.C:
			// Sample at rest: every agent between two cycles, so that the
			// series shows what the gateway holds, not what is in flight.
			rest.Lock()
			time.Sleep(200 * time.Millisecond) // let finished runs' processes be reaped
			s := g.sample(t0)
			rest.Unlock()
			r.Samples = append(r.Samples, s)
			b, _ := json.Marshal(s)
			fmt.Printf("soak %s\n", b)
		}
	}
}
