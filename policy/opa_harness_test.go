package policy

import (
	"compress/gzip"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/policytest"
)

// signingKey is an ES256 key pair in PEM, as `opa build --signing-key`
// and the keys section of OPA's configuration take them.
type signingKey struct{ private, public string }

func newSigningKey(t testing.TB) signingKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	priv, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return signingKey{
		private: string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: priv})),
		public:  string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})),
	}
}

// testKeyID is the key's name in the OPA configuration and the kid of the
// bundles' signatures.
const testKeyID = "sandgate-admin"

// buildBundle builds a bundle with the OPA CLI this module pins (`opa
// build --bundle DIR --revision REV --signing-key KEY --signing-alg ES256
// --verification-key-id sandgate-admin`, see policytest.OPABuild) over
// the default policy (without its Rego tests, as an administrator's
// build would leave them out) plus extra files, and returns the .tar.gz.
// An empty key builds an unsigned bundle.
func buildBundle(t testing.TB, revision string, key string, extra map[string]string) []byte {
	t.Helper()
	return policytest.OPABuild(t, bundleTree(t, extra), revision, key, testKeyID)
}

// bundleTree writes the default policy without its Rego tests, plus
// extra files, to a new directory.
func bundleTree(t testing.TB, extra map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	files, err := readTree(DefaultFS(), false)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		writeBundleFile(t, filepath.Join(dir, f.path), f.content)
	}
	for p, content := range extra {
		writeBundleFile(t, filepath.Join(dir, p), []byte(content))
	}
	return dir
}

func writeBundleFile(t testing.TB, p string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// opaServer is a loopback bundle, decision-log and status service in
// OPA's protocols: bundles with ETag and long polling, gzipped decision-log
// batches on POST /logs, status reports on POST /status.
type opaServer struct {
	srv *httptest.Server

	mu      sync.Mutex
	bundle  []byte
	etag    string
	changed chan struct{} // closed and replaced when the bundle changes
	// down makes /logs answer 503, as a receiver in an outage would.
	down bool

	bundleGets, notModified, longPolls int
	batches                            int
	events                             []map[string]any
	statuses                           []map[string]any
}

func newOPAServer(t testing.TB) *opaServer {
	s := &opaServer{changed: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /bundles/{name}", s.serveBundle)
	mux.HandleFunc("POST /logs", s.serveLogs)
	mux.HandleFunc("POST /status", s.serveStatus)
	s.srv = httptest.NewServer(mux)
	t.Cleanup(s.close)
	return s
}

func (s *opaServer) close() {
	s.mu.Lock()
	select {
	case <-s.changed:
	default:
		close(s.changed) // release long polls
	}
	s.mu.Unlock()
	s.srv.Close()
}

// publish serves b as the bundle from now on.
func (s *opaServer) publish(b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bundle = b
	s.etag = fmt.Sprintf("%q", fmt.Sprintf("%x", sha256.Sum256(b)))
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *opaServer) serveBundle(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.bundleGets++
	wait := preferWait(r)
	if wait > 0 {
		s.longPolls++
	}
	for s.bundle != nil && r.Header.Get("If-None-Match") == s.etag && wait > 0 {
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-time.After(wait):
			wait = 0
		case <-r.Context().Done():
			return
		}
		s.mu.Lock()
	}
	b, etag := s.bundle, s.etag
	if b != nil && r.Header.Get("If-None-Match") == etag {
		s.notModified++
	}
	s.mu.Unlock()
	if b == nil {
		http.NotFound(w, r)
		return
	}
	// This content type tells OPA the server long-polls: its next
	// requests carry Prefer: wait=N.
	w.Header().Set("Content-Type", "application/vnd.openpolicyagent.bundles")
	w.Header().Set("ETag", etag)
	if r.Header.Get("If-None-Match") == etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	_, _ = w.Write(b)
}

// preferWait is the long-poll timeout OPA asks for (Prefer:
// modes=snapshot,delta;wait=N).
func preferWait(r *http.Request) time.Duration {
	for _, pref := range strings.Split(r.Header.Get("Prefer"), ";") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(pref), "wait="); ok {
			if n, err := strconv.Atoi(v); err == nil {
				return time.Duration(n) * time.Second
			}
		}
	}
	return 0
}

func (s *opaServer) serveLogs(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	down := s.down
	s.mu.Unlock()
	if down {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	if r.Header.Get("Content-Encoding") != "gzip" {
		http.Error(w, "want gzip", http.StatusBadRequest)
		return
	}
	zr, err := gzip.NewReader(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var batch []map[string]any
	if err := json.NewDecoder(zr).Decode(&batch); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.batches++
	s.events = append(s.events, batch...)
	s.mu.Unlock()
}

func (s *opaServer) serveStatus(w http.ResponseWriter, r *http.Request) {
	var st map[string]any
	if err := json.NewDecoder(r.Body).Decode(&st); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.statuses = append(s.statuses, st)
	s.mu.Unlock()
}

func (s *opaServer) setDown(down bool) {
	s.mu.Lock()
	s.down = down
	s.mu.Unlock()
}

func (s *opaServer) eventsByID() map[string]map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]map[string]any, len(s.events))
	for _, ev := range s.events {
		id, _ := ev["decision_id"].(string)
		out[id] = ev
	}
	return out
}

// opaConfig is an OPA configuration for one bundle "sandgate" from s,
// signed with key, persisted, long-polled; plus decision logs and status
// to s when logs is set.
func (s *opaServer) config(key signingKey, logs bool) []byte {
	cfg := map[string]any{
		"services": map[string]any{"ctl": map[string]any{"url": s.srv.URL}},
		"keys":     map[string]any{testKeyID: map[string]any{"key": key.public, "algorithm": "ES256"}},
		"bundles": map[string]any{"sandgate": map[string]any{
			"service": "ctl", "resource": "/bundles/sandgate.tar.gz", "persist": true,
			"polling": map[string]any{"min_delay_seconds": 1, "max_delay_seconds": 2, "long_polling_timeout_seconds": 5},
			"signing": map[string]any{"keyid": testKeyID},
		}},
	}
	if logs {
		cfg["decision_logs"] = map[string]any{"service": "ctl", "reporting": map[string]any{"min_delay_seconds": 1, "max_delay_seconds": 2}}
		cfg["status"] = map[string]any{"service": "ctl"}
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		panic(err)
	}
	return b
}

// bundleEngine starts an engine on s's bundle. Its logger writes to the
// test log, so OPA's own messages show when a test fails.
func bundleEngine(t testing.TB, opaConfig []byte, persist string) *Engine {
	t.Helper()
	e, err := New(context.Background(), Options{
		Source: SourceBundle, OPAConfig: opaConfig, PersistDir: persist,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = e.Close(ctx)
	})
	return e
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// waitUntil polls cond every 20 ms until it holds or d passes.
func waitUntil(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// bundleRevision is the active manifest revision of bundle "sandgate".
func bundleRevision(e *Engine) string {
	return e.Status().Bundles["sandgate"].ActiveRevision
}
