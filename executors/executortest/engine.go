package executortest

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// CountingEngine is an HTTP proxy to the real Docker engine that counts
// the requests by kind, so a backend's test sees which engine calls its
// probe made, and can make the engine answer 503 to everything (Down),
// as one shutting down does.
type CountingEngine struct {
	srv  *http.Server
	ln   net.Listener
	Down atomic.Bool

	mu   sync.Mutex
	seen map[string]int
}

// Engine call kinds CountingEngine counts.
const (
	EngineInfo         = "info"
	EngineImageInspect = "image inspect"
	EnginePing         = "ping"
)

// NewCountingEngine starts the proxy in front of the engine's Unix socket
// (DOCKER_HOST's, or the default one) and stops it at the test's end.
func NewCountingEngine(t testing.TB) *CountingEngine {
	t.Helper()
	target := EngineSocket(t)
	c := &CountingEngine{seen: map[string]int{}}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(&url.URL{Scheme: "http", Host: "engine"}) },
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", target)
		}},
	}
	c.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.count(r.URL.Path)
		if c.Down.Load() {
			http.Error(w, `{"message":"engine shutting down"}`, http.StatusServiceUnavailable)
			return
		}
		rp.ServeHTTP(w, r)
	})}
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "engine.sock"))
	if err != nil {
		t.Fatal(err)
	}
	c.ln = ln
	go func() { _ = c.srv.Serve(ln) }()
	t.Cleanup(func() { _ = c.srv.Close() })
	return c
}

// EngineSocket is the path of the engine's Unix socket; a test that
// stands between a backend and the engine skips on any other engine.
func EngineSocket(t testing.TB) string {
	t.Helper()
	h := os.Getenv("DOCKER_HOST")
	switch {
	case strings.HasPrefix(h, "unix://"):
		return strings.TrimPrefix(h, "unix://")
	case h != "":
		t.Skipf("an engine proxy needs a unix socket engine, DOCKER_HOST=%s", h)
	}
	return "/var/run/docker.sock"
}

// Host is the proxy's address, for a backend's engine host setting.
func (c *CountingEngine) Host() string { return "unix://" + c.ln.Addr().String() }

// Calls is how many requests of kind the proxy has seen.
func (c *CountingEngine) Calls(kind string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen[kind]
}

func (c *CountingEngine) count(path string) {
	kind := "other"
	switch {
	case strings.HasSuffix(path, "/info"):
		kind = EngineInfo
	case strings.Contains(path, "/images/") && strings.HasSuffix(path, "/json"):
		kind = EngineImageInspect
	case strings.HasSuffix(path, "/_ping"):
		kind = EnginePing
	}
	c.mu.Lock()
	c.seen[kind]++
	c.mu.Unlock()
}
