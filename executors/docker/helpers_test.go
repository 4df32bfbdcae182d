package docker

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/executortest"
)

// requireEnv is set by `make test`: there, a missing engine or image is a
// failure, not a skip.
const requireEnv = "SANDGATE_REQUIRE_DOCKER"

var engineCheck = sync.OnceValue(func() error {
	e, err := New(context.Background(), Config{Logger: slog.New(slog.DiscardHandler), Instance: "probe-" + executortest.Nonce(), Pool: noPool})
	if err != nil {
		return err
	}
	defer e.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return e.Available(ctx)
})

// needEngine skips the test when no engine (or no runtime image) is
// reachable, or fails it when SANDGATE_REQUIRE_DOCKER=1.
func needEngine(t testing.TB) {
	t.Helper()
	err := engineCheck()
	if err == nil {
		return
	}
	if os.Getenv(requireEnv) == "1" {
		t.Fatalf("docker engine required (%s=1) but not usable: %v", requireEnv, err)
	}
	t.Skipf("docker engine not usable (start one with scripts/dockerd.sh start; build images with make images): %v", err)
}

// testLogger sends warnings and up to the test's output.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// newTestExecutor builds an executor with an instance of its own (so its
// reaper never touches another test's containers) and closes it at the
// end of the test.
func newTestExecutor(t testing.TB, mutate ...func(*Config)) *Executor {
	t.Helper()
	needEngine(t)
	// WarmAfter 1: the warm tests check the container prepared after a
	// session's first run; TestWarmAfterSecondRun checks the default.
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
		if left := instanceContainers(t, e.cfg.Instance); len(left) > 0 {
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

// execute runs s and fails the test on an error.
func execute(t testing.TB, e *Executor, s executors.Spec) executors.Result {
	t.Helper()
	res, err := e.Execute(t.Context(), s)
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	return res
}

// instanceContainers lists, through the docker CLI as an operator would,
// the containers of one executor instance.
func instanceContainers(t testing.TB, instance string) []string {
	t.Helper()
	out, err := exec.Command("docker", "ps", "-a", "--format", "{{.ID}}",
		"--filter", "label="+labelManaged,
		"--filter", "label="+labelInstance+"="+instance).CombinedOutput()
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
