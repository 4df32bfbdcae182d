package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/aio"
	"github.com/sandgate/sandgate/workspace"
)

var (
	aioImageOnce sync.Once
	aioImage     string
	aioImageErr  error
)

// aioTestImage builds sandgate/aio-test:<hash> from sandgate/aio-base (make
// images) and the sandboxd of this checkout.
func aioTestImage(t testing.TB) string {
	t.Helper()
	aioImageOnce.Do(func() {
		dir, err := os.MkdirTemp("", "aio-e2e-")
		if err != nil {
			aioImageErr = err
			return
		}
		defer os.RemoveAll(dir)
		bin := filepath.Join(dir, "sandboxd")
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s", "-o", bin, "../cmd/sandboxd")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			aioImageErr = err
			t.Logf("%s", out)
			return
		}
		sb, err := os.ReadFile(bin)
		if err != nil {
			aioImageErr = err
			return
		}
		df, err := os.ReadFile("../images/aio/Dockerfile")
		if err != nil {
			aioImageErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		aioImage, aioImageErr = aio.BuildImage(ctx, "", "sandgate/aio-base:latest", "sandgate/aio-test", sb, df)
	})
	if aioImageErr != nil {
		aioSkipOrFail(t, "aio image: "+aioImageErr.Error())
	}
	return aioImage
}

func aioSkipOrFail(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("SANDGATE_REQUIRE_DOCKER") == "1" {
		t.Fatal("SANDGATE_REQUIRE_DOCKER=1: " + why)
	}
	t.Skip(why)
}

// newAIOExecutor builds the AIO executor for end-to-end tests, with a
// state directory and instance name of its own.
func newAIOExecutor(t testing.TB, mutate ...func(*aio.PoolConfig)) *aio.Executor {
	t.Helper()
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		aioSkipOrFail(t, "the AIO pool needs root on Linux")
	}
	probe, err := aio.New(context.Background(), aio.PoolConfig{StateDir: shortDir(t), Instance: "probe" + nonce()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	perr := probe.Available(ctx)
	cancel()
	_ = probe.Close(context.Background())
	if perr != nil && !strings.Contains(perr.Error(), "missing") {
		aioSkipOrFail(t, "docker engine not usable: "+perr.Error())
	}
	cfg := aio.PoolConfig{Image: aioTestImage(t), Instance: "apie2e" + nonce(), StateDir: shortDir(t), MaxInstances: 4}
	for _, m := range mutate {
		m(&cfg)
	}
	ex, err := aio.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := ex.Close(ctx); err != nil {
			t.Errorf("close aio executor: %v", err)
		}
	})
	return ex
}

func nonce() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// shortDir is a state directory short enough for a Unix socket path.
func shortDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sga")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = exec.Command("umount", dir).Run() // the pool's bind onto itself
		_ = os.Remove(dir)
	})
	return dir
}

func persistentRun(code, lang string) map[string]any {
	return map[string]any{"code": code, "language": lang, "context": map[string]any{"needs_persistent_fs": true}}
}

// TestAIOEndToEnd: a request with context.needs_persistent_fs runs in the
// AIO sandbox; a file one run writes is read by the session's next run,
// and another session does not see it; the workspace API and the sandbox
// share the files both ways; deleting the session releases its instance.
func TestAIOEndToEnd(t *testing.T) {
	ex := newAIOExecutor(t)
	e := newEnv(t, envOpts{executors: []executors.Executor{ex}})
	ctx := t.Context()

	r := e.do("POST", "/v1/sessions/alice/run_code", agentTok, persistentRun("echo persisted > note.txt; id -u", "bash"))
	if r.status != 200 || r.body["sandbox_type"] != "aio" || r.body["success"] != true {
		t.Fatalf("first run: %d %s", r.status, r.raw)
	}
	if dec, _ := r.body["decision"].(map[string]any); dec["executor"] != "aio" {
		t.Fatalf("decision %v", r.body["decision"])
	}
	if uid := strings.TrimSpace(r.body["stdout"].(string)); uid == "0" || uid == "" {
		t.Errorf("the sandbox ran as uid %q", uid)
	}
	r = e.do("POST", "/v1/sessions/alice/run_code", agentTok, persistentRun("print(open('note.txt').read().strip())", "python"))
	if r.status != 200 || r.body["sandbox_type"] != "aio" || r.body["stdout"] != "persisted\n" {
		t.Fatalf("second run: %d %s", r.status, r.raw)
	}
	r = e.do("POST", "/v1/sessions/bob/run_code", agentTok, persistentRun("cat note.txt", "bash"))
	if r.status != 200 || r.body["sandbox_type"] != "aio" || r.body["success"] != false || !strings.Contains(r.body["stderr"].(string), "No such file") {
		t.Fatalf("other session: %d %s", r.status, r.raw)
	}
	// Workspace API → sandbox and back.
	if _, err := e.ws.Write(ctx, agentKey("alice"), "from-api.txt", workspace.WriteCreate, strings.NewReader("via the API")); err != nil {
		t.Fatal(err)
	}
	r = e.do("POST", "/v1/sessions/alice/run_code", agentTok, persistentRun("const fs = require('fs'); console.log(fs.readFileSync('from-api.txt', 'utf8')); fs.writeFileSync('from-js.txt', 'via node')", "javascript"))
	if r.status != 200 || r.body["stdout"] != "via the API\n" {
		t.Fatalf("javascript run: %d %s", r.status, r.raw)
	}
	page, err := e.ws.ReadText(ctx, agentKey("alice"), "from-js.txt", 0, 10)
	if err != nil || !strings.Contains(page.Content, "via node") {
		t.Fatalf("workspace read: %+v %v", page, err)
	}
	// The instance is the session's, deterministic, and shown.
	info, ok := ex.InstanceInfo(agentKey("alice"))
	if !ok || info.Uses != 3 || info.State != "idle" {
		t.Errorf("instance info %+v %v", info, ok)
	}
	if other, _ := ex.InstanceInfo(agentKey("bob")); other.ID == info.ID || other.Container == info.Container {
		t.Errorf("two sessions share an instance: %+v %+v", info, other)
	}
	// DELETE releases the instance.
	if r := e.do("DELETE", "/v1/sessions/alice", agentTok, nil); r.status != 204 {
		t.Fatalf("delete: %d %s", r.status, r.raw)
	}
	if _, ok := ex.InstanceInfo(agentKey("alice")); ok {
		t.Errorf("alice's instance survived DELETE")
	}
}

// TestAIOGatewayOverhead is a benchmark against a baseline measured in the
// same run: a run_code through the gateway (HTTP, the whole pipeline:
// validation, risk, OPA, audit) to a warm instance, and a direct call of
// the same program to the same instance's sandboxd, interleaved so that
// both see the same load. It reports both p50s; the gateway may add at
// most 3 ms. It is a test because the API harness needs a *testing.T; it
// runs only when asked:
//
//	SANDGATE_AIO_BENCH=1 go test -run TestAIOGatewayOverhead -v ./api/
func TestAIOGatewayOverhead(t *testing.T) {
	if os.Getenv("SANDGATE_AIO_BENCH") != "1" {
		t.Skip("set SANDGATE_AIO_BENCH=1 to run the AIO gateway benchmark")
	}
	ex := newAIOExecutor(t)
	e := newEnv(t, envOpts{executors: []executors.Executor{ex}})
	const code = "print(1)"
	gateway := func() time.Duration {
		start := time.Now()
		r := e.do("POST", "/v1/sessions/bench/run_code", agentTok, persistentRun(code, "python"))
		d := time.Since(start)
		if r.status != 200 || r.body["stdout"] != "1\n" || r.body["sandbox_type"] != "aio" {
			t.Fatalf("run_code: %d %s", r.status, r.raw)
		}
		return d
	}
	gateway() // binds the session's instance: from here on it is warm
	c, ok := ex.Client("bench")
	if !ok {
		t.Fatal("no client for the warm instance")
	}
	timeout := 30
	direct := func() time.Duration {
		start := time.Now()
		res, err := c.CodeExecute(t.Context(), aio.CodeExecuteRequest{Language: "python", Code: code, Timeout: &timeout, Cwd: "/workspace"})
		d := time.Since(start)
		if err != nil || res.Stdout == nil || *res.Stdout != "1\n" {
			t.Fatalf("direct: %+v %v", res, err)
		}
		return d
	}
	const n = 100
	var gw, dr []time.Duration
	for range 5 { // warm both paths
		gateway()
		direct()
	}
	for range n {
		gw = append(gw, gateway())
		dr = append(dr, direct())
	}
	p50 := func(d []time.Duration) time.Duration { slices.Sort(d); return d[len(d)/2] }
	g, d := p50(gw), p50(dr)
	t.Logf("run_code python through the gateway p50 %v, direct to sandboxd p50 %v, overhead %v (n=%d each)", g, d, g-d, n)
	if g > d+3*time.Millisecond {
		t.Errorf("gateway p50 %v exceeds the direct p50 %v + 3 ms", g, d)
	}
}
