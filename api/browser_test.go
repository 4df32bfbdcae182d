package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"html"
	"image/png"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/browser"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/workspace"
)

// requireBrowser skips without Chromium, unless SANDGATE_REQUIRE_BROWSER=1
// makes its absence a failure.
func requireBrowser(t testing.TB) string {
	t.Helper()
	if _, err := os.Stat(browser.DefaultChromiumPath); err == nil {
		return browser.DefaultChromiumPath
	}
	if os.Getenv("SANDGATE_REQUIRE_BROWSER") == "1" {
		t.Fatal("chromium is not installed and SANDGATE_REQUIRE_BROWSER=1")
	}
	t.Skip("chromium is not installed (set SANDGATE_REQUIRE_BROWSER=1 to fail instead)")
	return ""
}

// offlineDNS keeps the tests' browsers from resolving anything: every name
// fails, so only IP literals (loopback listeners the tests start) load.
type offlineDNS struct{}

func (offlineDNS) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	return nil, &net.DNSError{Err: "no such host (test resolver)", Name: host, IsNotFound: true}
}

// browserFor returns the envOpts hook that wires a browser router with the
// given allowlist, and checks at cleanup that none of its Chromium
// processes is left.
func browserFor(t testing.TB, allow ...string) func(*policy.Engine, audit.Store, *workspace.Workspaces) *browser.Manager {
	path := requireBrowser(t)
	return func(eng *policy.Engine, st audit.Store, ws *workspace.Workspaces) *browser.Manager {
		dir, err := os.MkdirTemp("", "sgba-")
		if err != nil {
			t.Fatal(err)
		}
		m, err := browser.New(browser.Config{ChromiumPath: path, AllowHosts: allow, DataDir: dir,
			ViewportWidth: 1024, ViewportHeight: 700},
			browser.Deps{Policy: eng, Audit: st, Workspaces: ws, Resolver: offlineDNS{}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := m.Close(ctx); err != nil {
				t.Errorf("browser Close: %v", err)
			}
			if left := chromiumUsing(dir); len(left) > 0 {
				t.Errorf("Chromium processes left after Close: %v", left)
			}
			_ = os.RemoveAll(dir)
		})
		return m
	}
}

// chromiumUsing lists processes whose command line names dir.
func chromiumUsing(dir string) []string {
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), dir) {
			out = append(out, e.Name())
		}
	}
	return out
}

// testPages is a page server on 127.0.0.1.
func testPages(t testing.TB) *httptest.Server {
	mux := http.NewServeMux()
	page := func(w http.ResponseWriter, title, body string) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, "<!doctype html><title>%s</title><body>%s</body>", html.EscapeString(title), body)
	}
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, r *http.Request) {
		page(w, "Form", `<form action="/submit"><input id="name" name="name"><button id="go">Go</button></form>`)
	})
	mux.HandleFunc("/submit", func(w http.ResponseWriter, r *http.Request) {
		page(w, "Result", `<p id="result">Hello, `+html.EscapeString(r.URL.Query().Get("name"))+`!</p>`)
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
	})
	mux.HandleFunc("/img", func(w http.ResponseWriter, r *http.Request) {
		page(w, "Image", `<p id="p">x</p><img src="`+html.EscapeString(r.URL.Query().Get("src"))+`">`)
	})
	mux.HandleFunc("/article", func(w http.ResponseWriter, r *http.Request) {
		page(w, "Article", `<h1>Title</h1><p id="body">`+strings.Repeat("Some text of an article. ", 200)+`</p>`)
	})
	mux.HandleFunc("/favicon.ico", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func hostPort(u string) string { return strings.TrimPrefix(u, "http://") }

func browse(e *env, session, action string, params map[string]any, rc ...map[string]any) resp {
	e.t.Helper()
	body := map[string]any{"action": action}
	if params != nil {
		body["params"] = params
	}
	if len(rc) > 0 {
		body["context"] = rc[0]
	}
	return e.do("POST", "/v1/sessions/"+session+"/browser", agentTok, body)
}

func result(t *testing.T, r resp) map[string]any {
	t.Helper()
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.raw)
	}
	res, _ := r.body["result"].(map[string]any)
	return res
}

func TestBrowserFormThroughTheGateway(t *testing.T) {
	pages := testPages(t)
	e := newEnv(t, envOpts{browser: browserFor(t, hostPort(pages.URL))})
	const s = "web1"

	r := browse(e, s, "navigate", map[string]any{"url": pages.URL + "/"})
	nav := result(t, r)
	if nav["title"] != "Form" || nav["status"] != 200.0 || nav["url"] != pages.URL+"/" || r.body["backend"] != "external" ||
		r.body["started"] != true || r.body["request_id"] != r.header.Get("X-Request-Id") {
		t.Fatalf("navigate: %s", r.raw)
	}
	result(t, browse(e, s, "type", map[string]any{"selector": "#name", "text": "Ada"}))
	result(t, browse(e, s, "click", map[string]any{"selector": "#go", "wait_navigation": true}))
	result(t, browse(e, s, "wait_for", map[string]any{"selector": "#result"}))
	if got := result(t, browse(e, s, "content", map[string]any{"selector": "#result"})); got["content"] != "Hello, Ada!" {
		t.Fatalf("content: %v", got)
	}

	shot := result(t, browse(e, s, "screenshot", map[string]any{"return_base64": true}))
	raw, err := base64.StdEncoding.DecodeString(shot["base64"].(string))
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != 1024 || b.Dy() != 700 || shot["width"] != 1024.0 || shot["height"] != 700.0 {
		t.Fatalf("screenshot %v, result %v", b, shot)
	}
	path := shot["path"].(string)
	if !strings.HasPrefix(path, "/workspace/.sandgate/screenshots/") {
		t.Fatalf("path %q", path)
	}
	onDisk, err := os.ReadFile(filepath.Join(e.dataDir, "workspaces", agentKey(s), strings.TrimPrefix(path, "/workspace/")))
	if err != nil || !bytes.Equal(onDisk, raw) {
		t.Fatalf("screenshot in the workspace: %v", err)
	}

	// Every action is in the audit log, with its host and scheme, and
	// never the page's content.
	acts := 0
	for _, rec := range e.auditRecords(s) {
		if rec.Kind == browser.KindAction {
			acts++
			if rec.Outcome != audit.OutcomeOK || rec.Principal != "agent:a" || rec.Executor != "browser.external" {
				t.Fatalf("action record %+v", rec)
			}
		}
		for k, v := range rec.Detail {
			if strings.Contains(v, "Hello") || strings.Contains(v, "Ada") {
				t.Fatalf("audit detail %s=%q carries page content or input", k, v)
			}
		}
	}
	if acts != 6 {
		t.Fatalf("%d browser.action records, want 6", acts)
	}
	if r := browse(e, s, "close", nil); result(t, r)["closed"] != true {
		t.Fatalf("close: %s", r.raw)
	}
}

func TestBrowserSSRFThroughTheGateway(t *testing.T) {
	pages := testPages(t)
	var trapHits atomic.Int64
	trap := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { trapHits.Add(1) }))
	t.Cleanup(trap.Close)

	// Default configuration: nothing allowlisted. The gateway's own API on
	// 127.0.0.1 is out of the browser's reach.
	e := newEnv(t, envOpts{browser: browserFor(t)})
	r := browse(e, "ssrf1", "navigate", map[string]any{"url": e.srv.URL + "/v1/policy"})
	if r.status != 403 || r.errCode() != "policy_denied" {
		t.Fatalf("gateway's own API: %d %s", r.status, r.raw)
	}
	reasons := r.body["error"].(map[string]any)["reasons"].([]any)
	if reasons[0].(map[string]any)["code"] != "browser.blocked_address" {
		t.Fatalf("reasons %s", r.raw)
	}
	for _, u := range []string{"file:///etc/passwd", "javascript:alert(1)"} {
		if r := browse(e, "ssrf1", "navigate", map[string]any{"url": u}); r.status != 403 || r.errCode() != "policy_denied" {
			t.Fatalf("%s: %d %s", u, r.status, r.raw)
		}
	}
	a := e.do("GET", "/v1/audit?session_id=ssrf1", adminTok, nil)
	var denials, denied int
	for _, rec := range a.body["records"].([]any) {
		rec := rec.(map[string]any)
		switch rec["kind"] {
		case browser.KindRequest:
			if rec["action"] == "deny" {
				denials++
			}
		case browser.KindAction:
			if rec["outcome"] == "denied" && rec["error_code"] == "policy_denied" {
				denied++
			}
		}
	}
	if denials != 3 || denied != 3 {
		t.Fatalf("audit: %d request denials, %d denied actions, want 3 and 3: %s", denials, denied, a.raw)
	}

	// Allowlisted pages cannot lead the browser to a denied host either.
	e2 := newEnv(t, envOpts{browser: browserFor(t, hostPort(pages.URL))})
	r = browse(e2, "ssrf2", "navigate", map[string]any{"url": pages.URL + "/redirect?to=" + url.QueryEscape(trap.URL+"/")})
	if r.status != 403 || r.errCode() != "policy_denied" {
		t.Fatalf("redirect: %d %s", r.status, r.raw)
	}
	r = browse(e2, "ssrf2", "navigate", map[string]any{"url": pages.URL + "/img?src=" + url.QueryEscape(trap.URL+"/x.png")})
	blocked, _ := r.body["blocked"].([]any)
	if r.status != 200 || len(blocked) != 1 || blocked[0].(map[string]any)["url"] != "http://"+hostPort(trap.URL) {
		t.Fatalf("img: %d %s", r.status, r.raw)
	}
	if n := trapHits.Load(); n != 0 {
		t.Fatalf("the denied listener got %d requests", n)
	}
}

func TestBrowserRequestValidationAndRoles(t *testing.T) {
	e := newEnv(t, envOpts{browser: browserFor(t)})
	for _, c := range []struct {
		name  string
		body  any
		field string
	}{
		{"unknown action", map[string]any{"action": "exec"}, "action"},
		{"missing url", map[string]any{"action": "navigate", "params": map[string]any{}}, "params.url"},
		{"bad param type", map[string]any{"action": "click", "params": map[string]any{"selector": true}}, "params.selector"},
		{"unknown param", map[string]any{"action": "content", "params": map[string]any{"format": "text", "all": 1}}, "params.all"},
		{"unknown body field", map[string]any{"action": "back", "sessionid": "x"}, "sessionid"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.do("POST", "/v1/sessions/v1/browser", agentTok, c.body)
			if r.status != 400 || r.errCode() != "invalid_request" || r.errField(0) != c.field {
				t.Fatalf("%d %s", r.status, r.raw)
			}
		})
	}
	body := map[string]any{"action": "back"}
	if r := e.do("POST", "/v1/sessions/v1/browser", approverTok, body); r.status != 403 {
		t.Fatalf("approver: %d", r.status)
	}
	if r := e.do("POST", "/v1/sessions/v1/browser", adminTok, body); r.status != 403 {
		t.Fatalf("admin: %d", r.status)
	}
	if r := e.do("POST", "/v1/sessions/v1/browser", "", body); r.status != 401 {
		t.Fatalf("no token: %d", r.status)
	}
	if r := e.do("POST", "/v1/sessions/../browser", agentTok, body); r.status < 400 {
		t.Fatalf("bad session id: %d", r.status)
	}
}

func TestBrowserDisabled(t *testing.T) {
	e := newEnv(t, envOpts{})
	r := e.do("POST", "/v1/sessions/s/browser", agentTok, map[string]any{"action": "back"})
	if r.status != 503 || r.errCode() != "executor_unavailable" {
		t.Fatalf("%d %s", r.status, r.raw)
	}
}
