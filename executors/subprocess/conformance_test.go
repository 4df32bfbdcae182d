package subprocess

import (
	"context"
	"log/slog"
	"os"
	"testing"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/executortest"
)

// newTestExecutor builds an executor for one test. As root it insists on
// namespace isolation; otherwise it runs degraded and allows the host
// network (there is no other way to run without root).
func newTestExecutor(t *testing.T, mutate ...func(*Config)) *Executor {
	t.Helper()
	cfg := Config{
		RequireNamespaces: os.Geteuid() == 0,
		AllowHostNetwork:  os.Geteuid() != 0,
		Logger:            slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	for _, m := range mutate {
		m(&cfg)
	}
	e, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := e.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return e
}

func TestConformance(t *testing.T) {
	h := executortest.Harness{
		New:              func(t *testing.T) executors.Executor { return newTestExecutor(t) },
		ProcessesVisible: true,
	}
	if os.Geteuid() != 0 {
		h.DetachedEscape = "not root: process-group isolation cannot reach children that called setsid"
	}
	executortest.Run(t, h)
}
