package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

const testKey = "test-key-0123456789abcdef"

type testServer struct {
	t   *testing.T
	srv *server
	hs  *httptest.Server
	ws  string
}

func newTestServer(t *testing.T, mutate ...func(*config)) *testServer {
	t.Helper()
	cfg := defaultConfig()
	cfg.APIKey = testKey
	cfg.Workspace = t.TempDir()
	cfg.Home = cfg.Workspace
	cfg.WaitDelay = 200 * time.Millisecond
	for _, m := range mutate {
		m(&cfg)
	}
	s := newServer(cfg)
	hs := httptest.NewServer(s)
	t.Cleanup(func() {
		hs.Close()
		s.Close()
	})
	return &testServer{t: t, srv: s, hs: hs, ws: cfg.Workspace}
}

// reply is one decoded response.
type reply struct {
	status int
	raw    []byte
	body   map[string]any
	header http.Header
}

func (ts *testServer) do(method, path string, body any, hdr ...string) reply {
	ts.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			ts.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, ts.hs.URL+path, rd)
	if err != nil {
		ts.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if len(hdr) == 0 {
		hdr = []string{"X-AIO-API-Key", testKey}
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := ts.hs.Client().Do(req)
	if err != nil {
		ts.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	r := reply{status: res.StatusCode, raw: raw, header: res.Header}
	if strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(raw, &r.body); err != nil {
			ts.t.Fatalf("%s %s: bad JSON %q: %v", method, path, raw, err)
		}
	}
	return r
}

func (ts *testServer) post(path string, body any) reply {
	ts.t.Helper()
	return ts.do(http.MethodPost, path, body)
}

// envelope checks the AIO envelope: exactly success, message, data and
// hint, with hint an explicit null, and returns data as an object.
func (r reply) envelope(t *testing.T, success bool) map[string]any {
	t.Helper()
	keys := make([]string, 0, len(r.body))
	for k := range r.body {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if !slices.Equal(keys, []string{"data", "hint", "message", "success"}) {
		t.Fatalf("envelope keys %v, want data hint message success: %s", keys, r.raw)
	}
	if r.body["success"] != success {
		t.Fatalf("success = %v, want %v: %s", r.body["success"], success, r.raw)
	}
	if !bytes.Contains(r.raw, []byte(`"hint":null`)) {
		t.Fatalf("hint is not an explicit null: %s", r.raw)
	}
	if _, ok := r.body["message"].(string); !ok {
		t.Fatalf("message is not a string: %s", r.raw)
	}
	d, _ := r.body["data"].(map[string]any)
	return d
}

// hasNull reports whether key is present with an explicit null.
func hasNull(m map[string]any, key string) bool {
	v, ok := m[key]
	return ok && v == nil
}

// writeWS writes a file into the workspace.
func (ts *testServer) writeWS(name, content string) string {
	ts.t.Helper()
	p := filepath.Join(ts.ws, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		ts.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		ts.t.Fatal(err)
	}
	return p
}

func num(v any) int {
	f, _ := v.(float64)
	return int(f)
}
