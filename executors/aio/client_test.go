package aio

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
)

// localSandboxd runs the sandboxd binary on the host (as the test's user)
// on a Unix socket, with ws as its workspace: enough for the client's own
// tests, which need no container.
func localSandboxd(t *testing.T, ws string) *Client {
	t.Helper()
	dir, err := os.MkdirTemp("", "sgc")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s.sock")
	key := newKey()
	code := filepath.Join(dir, "code") // no /run/sandgate/code outside a container
	if err := os.Mkdir(code, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(sandboxdBin, "serve", "--workspace", ws, "--listen", "unix:"+sock, "--code-dir", code)
	cmd.Env = []string{"SANDBOXD_API_KEY=" + key, "PATH=/usr/local/bin:/usr/bin:/bin"}
	cmd.Stderr = t.Output()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		_ = os.RemoveAll(dir)
	})
	c := NewUnixClient(sock, key)
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := waitReady(ctx, c); err != nil {
		t.Fatal(err)
	}
	return c
}

func localRun(lang, code string, timeout time.Duration) runRequest {
	return runRequest{dir: localWS, id: "r" + newSlot(), lang: lang, code: code, timeout: timeout, margin: 2 * time.Second,
		limits: DefaultLimits, extended: true}
}

// localWS is the workspace of localRun's requests.
var localWS = "/workspace"

func TestClientAgainstSandboxd(t *testing.T) {
	ws := t.TempDir()
	c := localSandboxd(t, ws)
	localWS = ws
	defer func() { localWS = "/workspace" }()
	info, err := c.Sandbox(context.Background())
	if err != nil || info.HomeDir != ws || !strings.HasPrefix(info.Version, "sandboxd") {
		t.Fatalf("Sandbox: %+v %v", info, err)
	}
	// The workspace path in the output is the local one here (no
	// container), so the tests compare cwd against ws.
	for _, tc := range []struct {
		lang, code, stdout, stderr string
		exit                       int
	}{
		{executors.LangBash, "pwd; echo e >&2; exit 3", ws + "\n", "e\n", 3},
		{executors.LangPython, "import os,sys; print(os.getcwd()); sys.exit(4)", ws + "\n", "", 4},
		{executors.LangPython, "print('\\u00e9t\\u00e9')", "été\n", "", 0},
	} {
		res, err := run(context.Background(), c, localRun(tc.lang, tc.code, 10*time.Second))
		if err != nil {
			t.Fatalf("%s %q: %v", tc.lang, tc.code, err)
		}
		if res.Stdout != tc.stdout || res.Stderr != tc.stderr || res.ExitCode != tc.exit || res.TimedOut {
			t.Errorf("%s %q: %+v", tc.lang, tc.code, res)
		}
	}
	// A hard timeout: 124 and TimedOut, from sandboxd, long before the
	// program's own end (30 s). The client deadline is far off (a minute
	// of margin), so only sandboxd's timeout can end the run early: a
	// loaded machine's slow kill is not mistaken for a missed one.
	start := time.Now()
	tr := localRun(executors.LangBash, "echo before; sleep 30", 500*time.Millisecond)
	tr.margin = time.Minute
	res, err := run(context.Background(), c, tr)
	if err != nil || !res.TimedOut || res.ExitCode != executors.ExitCodeTimeout || res.Stdout != "before\n" || time.Since(start) > 10*time.Second {
		t.Errorf("timeout: %+v %v after %v, want TimedOut within 10s", res, err, time.Since(start))
	}
	// The bash session made for the run is closed afterwards.
	if sessions := countBashSessions(t, c); sessions != 0 {
		t.Errorf("%d bash sessions left open", sessions)
	}
	// Output beyond the cap is cut; the rest is in the spill file.
	r := localRun(executors.LangBash, "head -c 5000 /dev/zero | tr '\\0' y", 10*time.Second)
	r.limits.MaxOutputBytes, r.limits.MaxSpillBytes = 100, 1000
	res, err = run(context.Background(), c, r)
	if err != nil || !res.Truncated || len(res.Stdout) != 100 || res.OutputPath != filepath.Join(ws, ".sandgate/outputs", r.id+".log") {
		t.Errorf("cap: %v truncated=%v len=%d path=%q", err, res.Truncated, len(res.Stdout), res.OutputPath)
	}
}

func countBashSessions(t *testing.T, c *Client) int {
	t.Helper()
	var list []map[string]any
	if err := c.call(context.Background(), http.MethodGet, "/v1/bash/sessions", nil, &list); err != nil {
		t.Fatal(err)
	}
	return len(list)
}

// TestClientMissingEndpoint: an image without /v1/bash (FastAPI's plain
// 404) is a clean executor_unavailable that says why.
func TestClientMissingEndpoint(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/bash/kill" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"success":false,"message":"Session not found","data":null}`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"detail":"Not Found"}`))
	}))
	defer srv.Close()
	c := NewHTTPClient(srv.URL, "k")
	_, err := run(context.Background(), c, localRun(executors.LangBash, "true", time.Second))
	var ue *executors.UnavailableError
	if !errors.As(err, &ue) || !errors.Is(err, ErrEndpointMissing) || !strings.Contains(ue.Reason, "1.9.3") {
		t.Fatalf("err %v, want an UnavailableError naming the missing endpoint", err)
	}
	// An envelope 404 is a handled failure, not a missing route.
	err = c.call(context.Background(), http.MethodPost, "/v1/bash/kill", map[string]string{"session_id": "nope"}, nil)
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 404 || apiErr.Message != "Session not found" || errors.Is(err, ErrEndpointMissing) {
		t.Errorf("envelope 404: %v", err)
	}
}

// TestClientNeverRetries: a connection dropped after the request was sent
// is an unknown outcome, reported once; the server sees one request.
func TestClientNeverRetries(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/code/execute" {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"success":true,"message":"ok","data":null,"hint":null}`))
			return
		}
		hits.Add(1)
		hj, _ := w.(http.Hijacker)
		conn, _, _ := hj.Hijack()
		_ = conn.Close()
	}))
	defer srv.Close()
	c := NewHTTPClient(srv.URL, "k")
	// Make sure a kept-alive connection exists, the case where Go's
	// transport retries idempotent requests.
	_ = c.call(context.Background(), http.MethodGet, "/warm", nil, nil)
	_, err := run(context.Background(), c, localRun(executors.LangPython, "print(1)", time.Second))
	if !errors.Is(err, errUnknownOutcome) {
		t.Errorf("err %v, want an unknown outcome", err)
	}
	time.Sleep(100 * time.Millisecond)
	if n := hits.Load(); n != 1 {
		t.Errorf("the server saw %d exec requests, want exactly 1", n)
	}
}

// TestClientDeadline: the HTTP deadline is the run's timeout plus the
// margin; a server that never answers does not hold the run longer.
func TestClientDeadline(t *testing.T) {
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(block)
	c := NewHTTPClient(srv.URL, "k")
	r := localRun(executors.LangPython, "print(1)", 300*time.Millisecond)
	r.margin = 200 * time.Millisecond
	start := time.Now()
	_, err := run(context.Background(), c, r)
	took := time.Since(start)
	if !errors.Is(err, errUnknownOutcome) || took < 500*time.Millisecond || took > 2*time.Second {
		t.Errorf("err %v after %v, want an unknown outcome after ~500ms", err, took)
	}
	// The caller's cancellation is the caller's error.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := run(ctx, c, r); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("cancelled: %v", err)
	}
}

// TestClientSessionCreateStalls: a sandbox that takes the bash session's
// create and never answers (its transport stalled) is unavailable at the
// create's bound, not at the run's deadline, and the run was not
// delivered; no deadline of the caller's is in the error.
func TestClientSessionCreateStalls(t *testing.T) {
	defer func(d time.Duration) { sessionCreateTimeout = d }(sessionCreateTimeout)
	sessionCreateTimeout = 200 * time.Millisecond
	var execs atomic.Int32
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/bash/sessions/create" {
			select {
			case <-block:
			case <-r.Context().Done():
			}
			return
		}
		if r.URL.Path == "/v1/bash/exec" {
			execs.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"success":true,"message":"ok","data":null,"hint":null}`))
	}))
	defer srv.Close()
	defer close(block)
	c := NewHTTPClient(srv.URL, "k")
	start := time.Now()
	_, err := run(t.Context(), c, localRun(executors.LangBash, "true", time.Minute))
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("the run failed after %v, want it at the create's bound, not the run's deadline", took)
	}
	if !errors.Is(err, executors.ErrUnavailable) || !errors.Is(err, errNotDelivered) || !errors.Is(err, errUnknownOutcome) ||
		errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err %v, want unavailable, not delivered, the instance recycled, and no deadline", err)
	}
	if n := execs.Load(); n != 0 {
		t.Errorf("the run was sent %d times after its session's create failed", n)
	}
}

// TestClientUnreachable: a dead socket is unavailable, not a crash.
func TestClientUnreachable(t *testing.T) {
	c := NewUnixClient(filepath.Join(t.TempDir(), "none.sock"), "k")
	_, err := run(context.Background(), c, localRun(executors.LangBash, "true", time.Second))
	if !errors.Is(err, executors.ErrUnavailable) || !errors.Is(err, errNotDelivered) {
		t.Errorf("err %v, want unavailable and not delivered", err)
	}
	var op *net.OpError
	if !errors.As(err, &op) {
		t.Errorf("the dial error is lost: %v", err)
	}
}

// TestClientHeldRun: a run with a release is held in sandboxd until the
// release says go, and runs then; a release that fails discards it before
// it ran anything, an error that is not an unknown outcome (the instance
// is as it was, and serves the next run).
func TestClientHeldRun(t *testing.T) {
	ws := t.TempDir()
	c := localSandboxd(t, ws)
	localWS = ws
	defer func() { localWS = "/workspace" }()
	refused := errors.New("the record could not be written")
	for i, tc := range []struct {
		lang, code string
		release    error
	}{
		{executors.LangPython, "open('ran-0', 'w').close(); print('hi')", nil},
		{executors.LangBash, "touch ran-1; echo hi", nil},
		{executors.LangPython, "open('ran-2', 'w').close(); print('hi')", refused},
		{executors.LangBash, "touch ran-3; echo hi", refused},
	} {
		marker := filepath.Join(ws, fmt.Sprintf("ran-%d", i))
		r := localRun(tc.lang, tc.code, 10*time.Second)
		asked := make(chan struct{})
		r.release = func(ctx context.Context) error {
			close(asked)
			time.Sleep(200 * time.Millisecond) // the run would have run by now
			if _, err := os.Stat(marker); err == nil {
				t.Errorf("%s: ran before its release", tc.lang)
			}
			return tc.release
		}
		res, err := run(context.Background(), c, r)
		select {
		case <-asked:
		default:
			t.Fatalf("%s: the release was never asked for", tc.lang)
		}
		_, statErr := os.Stat(marker)
		if tc.release == nil {
			if err != nil || res.Stdout != "hi\n" || statErr != nil {
				t.Errorf("%s released: %+v %v (marker %v)", tc.lang, res, err, statErr)
			}
			continue
		}
		if !errors.Is(err, refused) || errors.Is(err, errUnknownOutcome) || statErr == nil {
			t.Errorf("%s not released: %v (ran: %v), want the release's error, no unknown outcome, not run", tc.lang, err, statErr == nil)
		}
	}
	if res, err := run(context.Background(), c, localRun(executors.LangBash, "echo next", 10*time.Second)); err != nil || res.Stdout != "next\n" {
		t.Errorf("the run after: %+v %v", res, err)
	}
}
