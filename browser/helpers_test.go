package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/internal/policytest"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/workspace"
)

// testDataDir holds the user data directories of every browser the tests
// start; TestMain checks that no process using one of them survives.
var testDataDir string

func TestMain(m *testing.M) {
	if dir := os.Getenv("SANDGATE_BROWSER_HELPER_DIR"); dir != "" {
		gatewayHelper(dir) // never returns
	}
	dir, err := os.MkdirTemp("", "sgbt-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testDataDir = dir
	code := m.Run()
	// Give exiting children a moment, then insist.
	deadline := time.Now().Add(5 * time.Second)
	var left []int
	for {
		left = processesUnder(testDataDir)
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(left) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: %d Chromium processes started by the tests are still running: %v\n", len(left), left)
		for _, pid := range left {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		code = 1
	}
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// processesUnder lists processes whose command line mentions a path
// starting with prefix (a session's directories are <session>-<random>).
func processesUnder(prefix string) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), prefix) {
			out = append(out, pid)
		}
	}
	return out
}

// browserMains lists the browser (main) processes under prefix: Chromium
// processes that are none of its children (no --type=), crashpad excluded.
func browserMains(prefix string) []int {
	var out []int
	for _, pid := range processesUnder(prefix) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		cmd := string(b)
		if !strings.Contains(cmd, "--type=") && !strings.Contains(cmd, "crashpad") {
			out = append(out, pid)
		}
	}
	return out
}

// sessionProcs counts the external Chromium processes of one session.
func sessionProcs(sessionID string) int {
	return len(processesUnder(filepath.Join(testDataDir, sessionID+"-")))
}

// requireChromium skips without Chromium, unless SANDGATE_REQUIRE_BROWSER=1
// makes its absence a failure.
func requireChromium(t testing.TB) string {
	t.Helper()
	for _, p := range []string{DefaultChromiumPath, "/usr/bin/chromium-browser"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if os.Getenv("SANDGATE_REQUIRE_BROWSER") == "1" {
		t.Fatal("chromium is not installed and SANDGATE_REQUIRE_BROWSER=1")
	}
	t.Skip("chromium is not installed (set SANDGATE_REQUIRE_BROWSER=1 to fail instead)")
	return ""
}

// noDNS is the tests' resolver: names never leave the host. Hosts in
// answers get the given addresses; every other name fails to resolve.
type noDNS struct {
	answers map[string][]netip.Addr
	calls   atomic.Int64
}

func (r *noDNS) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.calls.Add(1)
	if a, ok := r.answers[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host (test resolver)", Name: host, IsNotFound: true}
}

// pages is the test's page server on 127.0.0.1.
type pages struct {
	*httptest.Server
	hits atomic.Int64
}

func newPages(t testing.TB) *pages {
	p := &pages{}
	mux := http.NewServeMux()
	page := func(w http.ResponseWriter, title, body string) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, "<!doctype html><html><head><title>%s</title></head><body>%s</body></html>", html.EscapeString(title), body)
	}
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, r *http.Request) {
		page(w, "Form", `<h1 id="hello">Hello from the test page</h1>
<form action="/submit" method="get"><input id="name" name="name" value=""><button id="go" type="submit">Go</button></form>`)
	})
	mux.HandleFunc("/submit", func(w http.ResponseWriter, r *http.Request) {
		page(w, "Result", `<p id="result">Hello, `+html.EscapeString(r.URL.Query().Get("name"))+`!</p>`)
	})
	mux.HandleFunc("/setcookie", func(w http.ResponseWriter, r *http.Request) {
		http.SetCookie(w, &http.Cookie{Name: "sid", Value: r.URL.Query().Get("v"), Path: "/"})
		page(w, "Set", `<p id="done">set</p>`)
	})
	mux.HandleFunc("/showcookie", func(w http.ResponseWriter, r *http.Request) {
		c, _ := r.Cookie("sid")
		v := "none"
		if c != nil {
			v = c.Value
		}
		page(w, "Show", `<p id="cookie">`+html.EscapeString(v)+`</p><p id="js"></p><script>document.getElementById("js").textContent = document.cookie || "empty"</script>`)
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
	})
	mux.HandleFunc("/img", func(w http.ResponseWriter, r *http.Request) {
		page(w, "Image", `<p id="p">image below</p><img id="i" src="`+html.EscapeString(r.URL.Query().Get("src"))+`">`)
	})
	mux.HandleFunc("/js", func(w http.ResponseWriter, r *http.Request) {
		hp := r.URL.Query().Get("target")
		page(w, "JS", `<p id="out"></p><script>
const out = document.getElementById("out"), res = {};
const show = () => { out.textContent = "fetch:" + res.fetch + " ws:" + res.ws; if (res.fetch && res.ws) out.insertAdjacentHTML("afterend", "<p id=ws-done>done</p>"); };
fetch("http://`+hp+`/x").then(() => { res.fetch = "reached"; show() }, () => { res.fetch = "blocked"; show() });
const ws = new WebSocket("ws://`+hp+`/ws");
ws.onopen = () => { res.ws = "reached"; show() };
ws.onerror = () => { res.ws = "blocked"; show() };
</script>`)
	})
	mux.HandleFunc("/tall", func(w http.ResponseWriter, r *http.Request) {
		page(w, "Tall", `<div style="height:3000px;background:linear-gradient(red,blue)">tall</div><p id="end">end</p>`)
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		page(w, "Big", "<pre>"+strings.Repeat("abcdefghij\n", 20000)+"</pre>")
	})
	mux.HandleFunc("/favicon.ico", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.hits.Add(1)
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

// hostPort is the server's "127.0.0.1:port", as the allowlist names it.
func (p *pages) hostPort() string { return strings.TrimPrefix(p.URL, "http://") }

// trap is a listener on 127.0.0.1 that must never be reached: it counts
// what it receives.
type trap struct {
	*httptest.Server
	hits atomic.Int64
}

func newTrap(t testing.TB) *trap {
	tr := &trap{}
	tr.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tr.hits.Add(1)
		w.Write([]byte("secret"))
	}))
	t.Cleanup(tr.Close)
	return tr
}

func (tr *trap) hostPort() string { return strings.TrimPrefix(tr.URL, "http://") }

// harness is a Manager on real parts: the embedded policy, an in-memory
// audit store and a workspace tree.
type harness struct {
	t     testing.TB
	m     *Manager
	audit *audit.Memory
	ws    *workspace.Workspaces
	dns   *noDNS
}

type harnessOpts struct {
	allow []string
	// policy replaces the embedded policy tree.
	policy fs.FS
	aio    AIOBrowsers
	tune   func(*Config)
	wsOpts workspace.Options
}

func newHarness(t testing.TB, o harnessOpts) *harness {
	t.Helper()
	path := requireChromium(t)
	ctx := context.Background()
	eng, err := policy.New(ctx, policy.Options{EvalTimeout: policytest.EvalTimeout, FS: o.policy})
	if err != nil {
		t.Fatal(err)
	}
	ws, err := workspace.New(filepath.Join(t.TempDir(), "ws"), o.wsOpts)
	if err != nil {
		t.Fatal(err)
	}
	st := audit.NewMemory()
	dns := &noDNS{}
	cfg := Config{ChromiumPath: path, AllowHosts: o.allow, DataDir: testDataDir, ActionTimeout: 20 * time.Second}
	if o.tune != nil {
		o.tune(&cfg)
	}
	var log *slog.Logger
	if os.Getenv("BROWSER_DEBUG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	m, err := New(cfg, Deps{Policy: eng, Audit: st, Workspaces: ws, AIO: o.aio, Resolver: dns, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, m: m, audit: st, ws: ws, dns: dns}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := m.Close(cctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return h
}

var reqSeq atomic.Int64

// do runs an action; params is marshalled to JSON.
func (h *harness) do(session, act string, params any, rc ...RouteContext) (*Result, error) {
	h.t.Helper()
	raw, err := json.Marshal(params)
	if err != nil {
		h.t.Fatal(err)
	}
	req := Request{RequestID: fmt.Sprintf("req_test%d", reqSeq.Add(1)), SessionID: session, Principal: "agent:test",
		Action: act, Params: raw}
	if len(rc) > 0 {
		req.Context = rc[0]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return h.m.Do(ctx, req)
}

// must runs an action that must succeed.
func (h *harness) must(session, act string, params any, rc ...RouteContext) *Result {
	h.t.Helper()
	res, err := h.do(session, act, params, rc...)
	if err != nil {
		h.t.Fatalf("%s %v: %v", act, params, err)
	}
	return res
}

// records returns the audit records of a session, oldest first.
func (h *harness) records(session, kind string) []audit.Record {
	h.t.Helper()
	page, err := h.audit.Query(context.Background(), audit.Query{SessionID: session, Kind: kind, Limit: 1000})
	if err != nil {
		h.t.Fatal(err)
	}
	recs := page.Records
	for i, j := 0, len(recs)-1; i < j; i, j = i+1, j-1 {
		recs[i], recs[j] = recs[j], recs[i]
	}
	return recs
}

// denials returns the browser.request denials of a session.
func (h *harness) denials(session string) []audit.Record {
	var out []audit.Record
	for _, r := range h.records(session, KindRequest) {
		if r.Action == policy.ActionDeny {
			out = append(out, r)
		}
	}
	return out
}

func isDenied(err error) (*DeniedError, bool) {
	var d *DeniedError
	return d, errors.As(err, &d)
}
