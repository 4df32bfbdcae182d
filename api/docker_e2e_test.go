package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/docker"
	"github.com/sandgate/sandgate/workspace"
)

// newDockerExecutor builds the real Docker executor for end-to-end tests.
// Without a usable engine the test is skipped, unless
// SANDGATE_REQUIRE_DOCKER=1 (make test) makes that a failure.
func newDockerExecutor(t testing.TB) *docker.Executor {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	d, err := docker.New(t.Context(), docker.Config{Instance: "api-e2e-" + hex.EncodeToString(b[:])})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = d.Close(ctx)
	})
	if err := d.Available(t.Context()); err != nil {
		if os.Getenv("SANDGATE_REQUIRE_DOCKER") == "1" {
			t.Fatalf("docker engine required (SANDGATE_REQUIRE_DOCKER=1): %v", err)
		}
		t.Skipf("docker engine not usable (scripts/dockerd.sh start; make images): %v", err)
	}
	return d
}

// TestDockerEndToEndStrict: in STRICT mode, code that is not proven safe
// runs in Docker, sees the files the workspace API wrote, and leaves files
// the workspace API can read.
func TestDockerEndToEndStrict(t *testing.T) {
	d := newDockerExecutor(t)
	e := newEnv(t, envOpts{mode: "STRICT", executors: []executors.Executor{d}})
	ctx := t.Context()

	if r := e.do("GET", "/readyz", "", nil); r.status != 200 || !strings.Contains(string(r.raw), `"docker":{"status":"ok"`) {
		t.Fatalf("readyz %d %s", r.status, r.raw)
	}
	if _, err := e.ws.Write(ctx, agentKey("s1"), "notes.txt", workspace.WriteCreate, strings.NewReader("written before")); err != nil {
		t.Fatalf("workspace write: %v", err)
	}
	r := e.do("POST", "/v1/sessions/s1/run_code", agentTok,
		runCode("import os; print(os.listdir('/workspace'))", "python"))
	if r.status != 200 {
		t.Fatalf("run_code %d %s", r.status, r.raw)
	}
	if r.body["sandbox_type"] != "docker" || r.body["success"] != true || r.body["stdout"] != "['notes.txt']\n" {
		t.Fatalf("body %s", r.raw)
	}
	if dec, _ := r.body["decision"].(map[string]any); dec["executor"] != "docker" {
		t.Fatalf("decision %v", r.body["decision"])
	}

	// The other way round: what the container writes, the workspace API reads.
	r = e.do("POST", "/v1/sessions/s1/run_code", agentTok,
		runCode("import os\nopen('/workspace/out.txt', 'w').write('from docker uid %d' % os.getuid())", "python"))
	if r.status != 200 || r.body["sandbox_type"] != "docker" || r.body["success"] != true {
		t.Fatalf("run_code %d %s", r.status, r.raw)
	}
	page, err := e.ws.ReadText(ctx, agentKey("s1"), "out.txt", 0, 10)
	if err != nil || !strings.Contains(page.Content, "from docker uid ") || strings.Contains(page.Content, "uid 0") {
		t.Fatalf("workspace read: %+v %v", page, err)
	}

	// execute (bash) is routed the same way.
	r = e.do("POST", "/v1/sessions/s1/execute", agentTok, map[string]any{"command": "ls /workspace; id -u >&2"})
	if r.status != 200 || r.body["sandbox_type"] != "docker" || !strings.HasPrefix(r.body["output"].(string), "notes.txt\nout.txt\n[stderr] ") {
		t.Fatalf("execute %d %s", r.status, r.raw)
	}
}
