package docker

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
)

// TestLostCreateAnswerSwept: a create call whose answer is lost (the
// connection drops after the engine made the container, as when the
// engine stops mid-call) leaves no container behind while the executor
// lives: the create's own label finds it. Before, only Close removed it,
// and the fault soak counted it as a leak.
func TestLostCreateAnswerSwept(t *testing.T) {
	needEngine(t)
	prevRetry, prevSettle := unconfirmedRetry, unconfirmedSettle
	unconfirmedRetry, unconfirmedSettle = 200*time.Millisecond, time.Second
	t.Cleanup(func() { unconfirmedRetry, unconfirmedSettle = prevRetry, prevSettle })
	proxy, made := createDroppingProxy(t)
	e := newTestExecutor(t, func(c *Config) { c.Host = "unix://" + proxy })
	_, err := e.Execute(t.Context(), spec(t, executors.LangBash, "echo never"))
	var ue *executors.UnavailableError
	if !errors.As(err, &ue) {
		t.Fatalf("a create without an answer: %v, want executor_unavailable", err)
	}
	if made.Load() == 0 {
		t.Fatal("the engine made no container: the test did not lose a create's answer")
	}
	deadline := time.Now().Add(15 * time.Second)
	for left := instanceContainers(t, e.cfg.Instance); len(left) > 0; left = instanceContainers(t, e.cfg.Instance) {
		if time.Now().After(deadline) {
			t.Fatalf("containers whose create answer was lost still there after 15 s: %v", left)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// createDroppingProxy serves the engine's API on a Unix socket of its
// own, forwarding every call to the engine, but closes the connection
// instead of answering a container create the engine carried out. It
// returns the socket's path and the count of such creates.
func createDroppingProxy(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	engine := strings.TrimPrefix(os.Getenv("DOCKER_HOST"), "unix://")
	if engine == "" {
		engine = "/var/run/docker.sock"
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) { r.Out.URL.Scheme, r.Out.URL.Host = "http", "docker" },
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", engine)
		}},
	}
	var made atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/containers/create") {
			rp.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		rp.ServeHTTP(rec, r)
		if rec.Code == http.StatusCreated {
			made.Add(1)
		}
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
		}
	})}
	sock := filepath.Join(t.TempDir(), "engine.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return sock, &made
}
