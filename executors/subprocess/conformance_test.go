package subprocess

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/executortest"
)

// newTestExecutor builds an executor for one test: namespaces as root,
// user namespaces otherwise, on the runtime root filesystem when
// SANDGATE_RUNTIME_ROOT names one (make test exports it). An executor
// without isolation fails the test.
func newTestExecutor(t *testing.T, mutate ...func(*Config)) *Executor {
	t.Helper()
	cfg := Config{
		RootDir: runtimeRoot(t),
		Logger:  slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
		// No pooled zygotes unless a test asks (zygote_pool_idle_test.go):
		// the other tests count the zygotes their sessions start.
		ZygotePool: ZygotePoolConfig{Max: -1},
	}
	for _, m := range mutate {
		m(&cfg)
	}
	e, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := e.Available(t.Context()); e.Isolation() == IsolationNone {
		_ = e.Close(context.Background())
		t.Fatalf("no isolation: %v", err)
	}
	t.Cleanup(func() {
		if err := e.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return e
}

// TestConformance runs the suite cold (warm interpreters disabled), warm
// and, as root, with zygotes: in the last two every run is its session's
// second, served by the warm interpreter the first one left or by the
// session's zygote, which the harness checks. In warm mode Python uses
// warm interpreters too (zygotes off).
func TestConformance(t *testing.T) {
	for _, mode := range []string{"cold", "warm", "zygote"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "zygote" {
				requireRoot(t)
			}
			h := executortest.Harness{
				New: func(t *testing.T) executors.Executor {
					switch mode {
					case "cold":
						return newTestExecutor(t, func(c *Config) { c.DisableWarm = true })
					case "warm":
						return warmSecondRun{newTestExecutor(t, func(c *Config) { c.DisableZygote = true }), t}
					}
					return warmSecondRun{newTestExecutor(t), t}
				},
				ProcessesVisible: true,
				DataStack:        runtimeRoot(t) != "",
			}
			executortest.Run(t, h)
		})
	}
}

// warmSecondRun makes every Execute its session's second run: it first
// runs a no-op program with the same parameters (cold, or starting the
// session's zygote), waits for the session's warm interpreter (without
// zygotes), then runs the real one and fails the test unless that was
// served warm.
type warmSecondRun struct {
	*Executor
	t *testing.T
}

func (w warmSecondRun) Execute(ctx context.Context, spec executors.Spec) (executors.Result, error) {
	first := spec
	first.RequestID += "-first"
	first.Output = nil // the stream is the real run's
	// The first run only warms: the case's own timeout (3 s for
	// TimeoutKillsTree) is for the second, and a loaded CI machine once
	// took longer than that to start the interpreter for it.
	first.Timeout = max(spec.Timeout, time.Minute)
	first.Code = map[string]string{executors.LangJavaScript: "", executors.LangBash: ":", executors.LangPython: "pass"}[spec.Language]
	res, err := w.Executor.Execute(ctx, first)
	if errors.Is(err, executors.ErrCapabilityMissing) {
		return res, err // refused before anything ran: there is nothing to warm
	}
	if err != nil || res.ExitCode != 0 {
		w.t.Fatalf("first run: %+v %v", res, err)
	}
	if !w.useZygote(spec.Language) {
		waitWarm(w.t, w.Executor, spec.SessionID, false)
	}
	hits := w.WarmStats().Hits
	res, err = w.Executor.Execute(ctx, spec)
	if w.WarmStats().Hits != hits+1 {
		w.t.Errorf("the run was not served warm: %+v", w.WarmStats())
	}
	return res, err
}
