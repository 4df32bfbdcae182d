package subprocess

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/executortest"
)

// requireRoot skips tests of properties only namespace isolation gives.
func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("SANDGATE_REQUIRE_ROOT") == "1" {
			t.Fatal("SANDGATE_REQUIRE_ROOT=1 but not running as root")
		}
		t.Skip("needs root: it checks what only the root gateway's namespaces mode gives")
	}
}

// execute runs code in a fresh workspace and fails the test on an error.
func execute(t *testing.T, e *Executor, lang, code string, mutate ...func(*executors.Spec)) (executors.Result, string) {
	t.Helper()
	ws := executortest.NewWorkspace(t)
	spec := executors.Spec{
		RequestID:    "req-" + executortest.Nonce(),
		Language:     lang,
		Code:         code,
		Timeout:      30 * time.Second,
		WorkspaceDir: ws,
	}
	for _, m := range mutate {
		m(&spec)
	}
	res, err := e.Execute(t.Context(), spec)
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	return res, ws
}

// processesOfUID returns the pids of live, non-zombie processes whose real
// uid is uid.
func processesOfUID(uid string) []string {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var pids []string
	for _, d := range dirs {
		status, err := os.ReadFile(filepath.Join(d, "status"))
		if err != nil {
			continue
		}
		s := string(status)
		if strings.Contains(s, "\nState:\tZ") {
			continue
		}
		for _, line := range strings.Split(s, "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" && f[1] == uid {
				pids = append(pids, filepath.Base(d))
			}
		}
	}
	return pids
}

// chmod711 makes dir's parent traversable, as executortest.NewWorkspace
// does for tests.
func chmod711(dir string) error {
	return os.Chmod(filepath.Dir(dir), 0o711)
}

// processesInDir returns the pids of live processes whose cwd is dir:
// a run's or a warm interpreter's init step and interpreter. A run's cwd
// is /workspace inside its own root, so the directory is matched by
// device and inode, not by the path /proc shows.
func processesInDir(dir string) []string {
	want, err := os.Stat(dir)
	if err != nil {
		return nil
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	var pids []string
	for _, p := range procs {
		if fi, err := os.Stat(filepath.Join(p, "cwd")); err == nil && os.SameFile(fi, want) {
			pids = append(pids, filepath.Base(p))
		}
	}
	return pids
}

// runtimeRoot is the runtime root filesystem the tests run on, from
// SANDGATE_RUNTIME_ROOT; "" (the host's system directories) when unset.
// With SANDGATE_REQUIRE_RUNTIME_ROOT=1 (make test) an unset or missing
// root fails the test instead of falling back.
func runtimeRoot(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("SANDGATE_RUNTIME_ROOT")
	if dir == "" {
		if os.Getenv("SANDGATE_REQUIRE_RUNTIME_ROOT") == "1" {
			t.Fatal("SANDGATE_REQUIRE_RUNTIME_ROOT=1 but SANDGATE_RUNTIME_ROOT is not set")
		}
		return ""
	}
	if _, err := os.Stat(dir + "/usr"); err != nil {
		if os.Getenv("SANDGATE_REQUIRE_RUNTIME_ROOT") == "1" {
			t.Fatalf("runtime root %s: %v", dir, err)
		}
		return ""
	}
	return dir
}
