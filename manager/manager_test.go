package manager_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/executortest"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/risk"
	"github.com/sandgate/sandgate/workspace"
)

func TestNewChecksWiring(t *testing.T) {
	ws, err := workspace.New(t.TempDir()+"/ws", workspace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	full := func() manager.Deps {
		return manager.Deps{
			Assessor: risk.NewAssessor(nil, nil), Policy: &recDecider{inner: realPolicy(t)},
			Workspaces: ws, Audit: audit.NewMemory(),
			Executors: []executors.Executor{&executortest.Fake{KindValue: executors.KindSubprocess}},
		}
	}
	cases := []struct {
		name string
		edit func(*manager.Deps)
		want []string // substrings of the joined error; none: New succeeds
	}{
		{name: "complete", edit: func(*manager.Deps) {}},
		{name: "no executors is allowed", edit: func(d *manager.Deps) { d.Executors = nil }},
		{name: "no assessor", edit: func(d *manager.Deps) { d.Assessor = nil }, want: []string{"no risk assessor"}},
		{name: "no policy", edit: func(d *manager.Deps) { d.Policy = nil }, want: []string{"no policy engine"}},
		{name: "no workspaces", edit: func(d *manager.Deps) { d.Workspaces = nil }, want: []string{"no workspaces"}},
		{name: "no audit", edit: func(d *manager.Deps) { d.Audit = nil }, want: []string{"no audit store"}},
		{
			name: "two executors of one kind",
			edit: func(d *manager.Deps) {
				d.Executors = append(d.Executors, &executortest.Fake{KindValue: executors.KindDocker}, &executortest.Fake{KindValue: executors.KindSubprocess})
			},
			want: []string{"executor subprocess wired twice"},
		},
		{
			name: "every problem at once",
			edit: func(d *manager.Deps) {
				*d = manager.Deps{Executors: []executors.Executor{&executortest.Fake{}, &executortest.Fake{}}}
			},
			want: []string{"no risk assessor", "no policy engine", "no workspaces", "no audit store", "executor subprocess wired twice"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := full()
			tc.edit(&d)
			m, err := manager.New(manager.Config{Mode: "STRICT"}, d)
			if len(tc.want) == 0 {
				if err != nil || m == nil {
					t.Fatalf("New: %v", err)
				}
				if m.Mode() != "STRICT" || len(m.Executors()) != len(d.Executors) {
					t.Errorf("Mode %q executors %d", m.Mode(), len(m.Executors()))
				}
				return
			}
			if err == nil || m != nil {
				t.Fatalf("New succeeded, want %v", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("New: %v, want it to mention %q", err, w)
				}
			}
			if got := len(strings.Split(err.Error(), "\n")); got != len(tc.want) {
				t.Errorf("New reported %d problems, want %d: %v", got, len(tc.want), err)
			}
		})
	}
}

type closingFake struct {
	*executortest.Fake
	err    error
	closed int
}

func (f *closingFake) Close(context.Context) error { f.closed++; return f.err }

func TestClose(t *testing.T) {
	boom := errors.New("pool stuck")
	a := &closingFake{Fake: &executortest.Fake{KindValue: executors.KindDocker}, err: boom}
	b := &closingFake{Fake: &executortest.Fake{KindValue: executors.KindAIO}}
	plain := &executortest.Fake{KindValue: executors.KindSubprocess}
	h := newHarness(t, hopts{execs: []executors.Executor{plain, a, b}})
	if err := h.m.Close(t.Context()); !errors.Is(err, boom) {
		t.Errorf("Close: %v, want %v", err, boom)
	}
	if a.closed != 1 || b.closed != 1 {
		t.Errorf("closed %d and %d times, want 1 each", a.closed, b.closed)
	}
}

// counter returns the value of the series of name whose labels include
// want, summed over matching series.
func counter(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue metric
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newHarness(t, hopts{metrics: manager.NewMetrics(reg)})
	if _, err := h.m.Run(t.Context(), request("python", safePython)); err != nil {
		t.Fatal(err)
	}
	if _, err := h.m.Run(t.Context(), request("bash", criticalBash)); err == nil {
		t.Fatal("critical code ran")
	}
	if _, err := h.m.Run(t.Context(), request("ruby", safePython)); err == nil {
		t.Fatal("invalid request ran")
	}
	// Fail closed: a run whose write-ahead record cannot be written does
	// not run (a crash mid-run would leave no trace of it).
	h.audit.AppendErr = errors.New("disk full")
	if _, err := h.m.Run(t.Context(), request("python", safePython)); err == nil {
		t.Fatal("ran without its write-ahead audit record")
	} else if code, _, _ := errcode.Of(err); code != errcode.Internal {
		t.Fatalf("refusal code %s, want %s", code, errcode.Internal)
	}
	for _, c := range []struct {
		labels map[string]string
		want   float64
	}{
		{map[string]string{"kind": "run_code", "action": "allow", "executor": "subprocess", "outcome": "ok"}, 1},
		{map[string]string{"kind": "run_code", "action": "allow", "outcome": "error"}, 1},
		{map[string]string{"action": "deny", "outcome": "denied"}, 1},
		{map[string]string{"action": "", "outcome": "invalid"}, 1},
	} {
		if got := counter(t, reg, "sandgate_requests_total", c.labels); got != c.want {
			t.Errorf("sandgate_requests_total%v = %v, want %v", c.labels, got, c.want)
		}
	}
	// The refused write-ahead record, then the final record of the refusal.
	if got := counter(t, reg, "sandgate_audit_write_errors_total", nil); got != 2 {
		t.Errorf("sandgate_audit_write_errors_total = %v, want 2", got)
	}
}

// barrier is passed once n callers have reached it; a caller whose context
// ends first gets its error.
type barrier struct {
	arrived chan struct{}
	n       int
	once    sync.Once
	all     chan struct{}
}

func newBarrier(n int) *barrier {
	return &barrier{arrived: make(chan struct{}, n), n: n, all: make(chan struct{})}
}

func (b *barrier) wait(ctx context.Context) error {
	b.arrived <- struct{}{}
	if len(b.arrived) == b.n {
		b.once.Do(func() { close(b.all) })
	}
	select {
	case <-b.all:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// barrierFake is an executor whose Close and ReleaseSession wait at a
// barrier: each waits on the engine, as a real one does.
type barrierFake struct {
	*executortest.Fake
	close, release *barrier
}

func (f *barrierFake) Close(ctx context.Context) error { return f.close.wait(ctx) }

func (f *barrierFake) ReleaseSession(ctx context.Context, _ string) error {
	return f.release.wait(ctx)
}

// TestCloseSideBySide: a shutdown releases its sessions, and then closes its
// executors, side by side. One after the other, each would wait for the
// ones still to come (here: forever), as a few dozen container removals on
// a busy engine once used the whole shutdown deadline, and the aio pool,
// closed last, was left no time to remove its instances and mounts.
func TestCloseSideBySide(t *testing.T) {
	const sessions = 4
	closing := newBarrier(2)
	a := &barrierFake{Fake: &executortest.Fake{KindValue: executors.KindDocker}, close: closing, release: newBarrier(sessions)}
	b := &barrierFake{Fake: &executortest.Fake{KindValue: executors.KindAIO}, close: closing, release: newBarrier(sessions)}
	plain := &executortest.Fake{KindValue: executors.KindSubprocess}
	h := newHarness(t, hopts{execs: []executors.Executor{plain, a, b}})
	for i := range sessions {
		req := request("python", safePython)
		req.SessionID = fmt.Sprintf("s%d", i)
		if _, err := h.m.Run(t.Context(), req); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := h.m.Close(ctx); err != nil {
		t.Fatalf("Close: %v, want every release and close done side by side", err)
	}
}
