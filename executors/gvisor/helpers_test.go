package gvisor

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/docker"
	"github.com/sandgate/sandgate/executors/executortest"
)

// Set by `make test`: there, an engine without runsc (or no engine, or
// no image) fails the tests instead of skipping them.
const (
	requireGVisorEnv = "SANDGATE_REQUIRE_GVISOR"
	requireDockerEnv = "SANDGATE_REQUIRE_DOCKER"
)

// probe reports whether a gvisor executor would be available here.
var probe = sync.OnceValue(func() error {
	e, err := New(context.Background(), Config{Logger: slog.New(slog.DiscardHandler), Instance: "probe-" + executortest.Nonce(), Pool: noPool})
	if err != nil {
		return err
	}
	defer e.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return e.Available(ctx)
})

// needGVisor skips the test when no engine with the runsc runtime (and
// the runtime image) is usable, or fails it when SANDGATE_REQUIRE_GVISOR=1.
func needGVisor(t testing.TB) {
	t.Helper()
	err := probe()
	if err == nil {
		return
	}
	if os.Getenv(requireGVisorEnv) == "1" {
		t.Fatalf("gVisor required (%s=1) but not usable: %v", requireGVisorEnv, err)
	}
	t.Skipf("gVisor not usable (make gvisor, then scripts/dockerd.sh start; make images): %v", err)
}

// needEngine skips the test when no Docker engine answers (with or
// without runsc), or fails it when SANDGATE_REQUIRE_DOCKER=1.
func needEngine(t testing.TB) {
	t.Helper()
	err := probe()
	if err == nil || errors.Is(err, docker.ErrRuntimeMissing) {
		return
	}
	if os.Getenv(requireDockerEnv) == "1" {
		t.Fatalf("docker engine required (%s=1) but not usable: %v", requireDockerEnv, err)
	}
	t.Skipf("docker engine not usable: %v", err)
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// newTestExecutor builds a gvisor executor with an instance of its own,
// and checks at the end of the test that Close left no container.
func newTestExecutor(t testing.TB, mutate ...func(*Config)) *Executor {
	t.Helper()
	needGVisor(t)
	cfg := Config{Instance: "test-" + executortest.Nonce(), Logger: testLogger(t), WarmAfter: 1, Pool: noPool}
	for _, m := range mutate {
		m(&cfg)
	}
	e, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := e.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
		if left := instanceContainers(t, cfg.Instance); len(left) > 0 {
			t.Errorf("containers left after Close: %v", left)
		}
	})
	return e
}

// spec returns a Spec for code in a fresh workspace.
func spec(t testing.TB, lang, code string) executors.Spec {
	t.Helper()
	return executors.Spec{
		RequestID:    "req-" + executortest.Nonce(),
		SessionID:    "sess-" + executortest.Nonce(),
		Language:     lang,
		Code:         code,
		Timeout:      30 * time.Second,
		WorkspaceDir: newWorkspace(t),
	}
}

// newWorkspace is executortest.NewWorkspace for any testing.TB.
func newWorkspace(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir[:strings.LastIndex(dir, "/")], 0o711); err != nil {
		t.Fatal(err)
	}
	return dir
}

func execute(t testing.TB, e executors.Executor, s executors.Spec) executors.Result {
	t.Helper()
	res, err := e.Execute(t.Context(), s)
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	return res
}

// instanceContainers lists, through the docker CLI as an operator would,
// the gvisor containers of one executor instance, with their runtime.
func instanceContainers(t testing.TB, instance string) []string {
	t.Helper()
	out, err := exec.Command("docker", "ps", "-a", "--format", "{{.ID}}",
		"--filter", "label=sandgate.executor=gvisor",
		"--filter", "label=sandgate.instance="+instance).CombinedOutput()
	if err != nil {
		t.Fatalf("docker ps: %v: %s", err, out)
	}
	return strings.Fields(strings.TrimSpace(string(out)))
}

// shippedWarmAfter gives the executor the shipped WarmAfter (DefaultWarmAfter)
// instead of the test helper's 1. The conformance, isolation and output tests
// run each program in a session of its own, so with 1 each run would also
// prepare a warm container that no run uses and Close removes: a third of
// the gVisor conformance suite's CPU, for nothing those tests check. The
// warm path has its own tests.
func shippedWarmAfter(c *Config) { c.WarmAfter = 0 }
