package browser

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/workspace"
)

func TestCookiesAreIsolatedBetweenSessions(t *testing.T) {
	p := newPages(t)
	h := newHarness(t, harnessOpts{allow: []string{p.hostPort()}})
	h.must("iso-a", ActionNavigate, map[string]any{"url": p.URL + "/setcookie?v=alpha"})
	a := h.must("iso-a", ActionNavigate, map[string]any{"url": p.URL + "/showcookie"})
	_ = a
	if got := h.must("iso-a", ActionContent, map[string]any{"selector": "#cookie"}).Data.(ContentResult).Content; got != "alpha" {
		t.Fatalf("session A does not see its own cookie: %q", got)
	}
	h.must("iso-b", ActionNavigate, map[string]any{"url": p.URL + "/showcookie"})
	for _, sel := range []string{"#cookie", "#js"} {
		got := h.must("iso-b", ActionContent, map[string]any{"selector": sel}).Data.(ContentResult).Content
		if got != "none" && got != "empty" {
			t.Fatalf("session B sees %s = %q", sel, got)
		}
	}
}

func TestCrashedBrowserRestartsOnNextAction(t *testing.T) {
	p := newPages(t)
	h := newHarness(t, harnessOpts{allow: []string{p.hostPort()}})
	const s = "crash"
	h.must(s, ActionNavigate, map[string]any{"url": p.URL + "/"})
	pids := processesUnder(filepath.Join(testDataDir, s+"-"))
	if len(pids) == 0 {
		t.Fatal("no Chromium process for the session")
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	waitFor(t, 10*time.Second, func() bool { return sessionProcs(s) == 0 })
	res := h.must(s, ActionNavigate, map[string]any{"url": p.URL + "/"})
	if !res.Started || res.Data.(PageResult).Title != "Form" {
		t.Fatalf("after the crash: started=%v data=%+v", res.Started, res.Data)
	}
	if n := sessionProcs(s); n == 0 {
		t.Fatal("no browser after the restart")
	}
}

func TestIdleBrowserIsClosed(t *testing.T) {
	p := newPages(t)
	h := newHarness(t, harnessOpts{allow: []string{p.hostPort()}, tune: func(c *Config) { c.IdleTTL = 500 * time.Millisecond }})
	const s = "idle"
	h.must(s, ActionNavigate, map[string]any{"url": p.URL + "/"})
	waitFor(t, 10*time.Second, func() bool { return sessionProcs(s) == 0 && len(h.m.Live()) == 0 })
	if res := h.must(s, ActionNavigate, map[string]any{"url": p.URL + "/"}); !res.Started {
		t.Fatal("the next action did not start a new browser")
	}
}

func TestReleaseSessionAndClose(t *testing.T) {
	p := newPages(t)
	h := newHarness(t, harnessOpts{allow: []string{p.hostPort()}})
	h.must("rel-a", ActionNavigate, map[string]any{"url": p.URL + "/"})
	h.must("rel-b", ActionNavigate, map[string]any{"url": p.URL + "/"})
	if sessionProcs("rel-a") == 0 || sessionProcs("rel-b") == 0 {
		t.Fatal("browsers did not start")
	}
	if err := h.m.ReleaseSession(t.Context(), "rel-a"); err != nil {
		t.Fatal(err)
	}
	if n := sessionProcs("rel-a"); n != 0 {
		t.Fatalf("%d processes of the released session", n)
	}
	if err := h.m.ReleaseSession(t.Context(), "never-seen"); err != nil {
		t.Fatalf("releasing an unknown session: %v", err)
	}
	if err := h.m.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := sessionProcs("rel-b"); n != 0 {
		t.Fatalf("%d processes after Close", n)
	}
	if _, err := h.do("rel-b", ActionNavigate, map[string]any{"url": p.URL + "/"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("action after Close: %v", err)
	}
}

func TestActionsOfOneSessionAreSerialisedAndSessionsRunInParallel(t *testing.T) {
	p := newPages(t)
	slow := newSlow(t)
	h := newHarness(t, harnessOpts{allow: []string{p.hostPort(), slow.hostPort()}})
	for _, s := range []string{"par-a", "par-b", "ser"} { // warm: browsers started
		h.must(s, ActionNavigate, map[string]any{"url": p.URL + "/"})
	}
	// Each page is answered once a second request is in (or after wait):
	// the slow server counts how many it held at once, whatever the
	// machine's load makes of the timings.
	run := func(wait time.Duration, sessions ...string) int64 {
		slow.maxConcurrent.Store(0)
		slow.wait.Store(int64(wait))
		var wg sync.WaitGroup
		for _, s := range sessions {
			wg.Go(func() { h.must(s, ActionNavigate, map[string]any{"url": slow.URL + "/"}) })
		}
		wg.Wait()
		return slow.maxConcurrent.Load()
	}
	if m := run(20*time.Second, "par-a", "par-b"); m != 2 {
		t.Errorf("two sessions' pages were requested %d at a time: not in parallel", m)
	}
	if m := run(800*time.Millisecond, "ser", "ser"); m != 1 {
		t.Errorf("two actions of one session requested %d pages at a time: not serialised", m)
	}
}

func TestInvalidRequests(t *testing.T) {
	p := newPages(t)
	h := newHarness(t, harnessOpts{allow: []string{p.hostPort()}})
	for _, c := range []struct {
		name   string
		action string
		params any
		field  string
	}{
		{"no action", "", nil, "action"},
		{"unknown action", "evaluate", map[string]any{"js": "1"}, "action"},
		{"navigate without url", ActionNavigate, map[string]any{}, "params.url"},
		{"relative url", ActionNavigate, map[string]any{"url": "/x"}, "params.url"},
		{"unknown param", ActionNavigate, map[string]any{"url": p.URL, "wait": true}, "params.wait"},
		{"wrong type", ActionClick, map[string]any{"selector": 3}, "params.selector"},
		{"click without selector", ActionClick, map[string]any{}, "params.selector"},
		{"type without text", ActionType, map[string]any{"selector": "#x"}, "params.text"},
		{"bad wait state", ActionWaitFor, map[string]any{"selector": "#x", "state": "gone"}, "params.state"},
		{"bad format", ActionContent, map[string]any{"format": "pdf"}, "params.format"},
		{"content cap", ActionContent, map[string]any{"max_bytes": 1 << 30}, "params.max_bytes"},
		{"timeout too long", ActionBack, map[string]any{"timeout_s": 100000}, "params.timeout_s"},
		{"screenshot path escapes", ActionScreenshot, map[string]any{"path": "../../etc/x.png"}, "params.path"},
		{"screenshot absolute path", ActionScreenshot, map[string]any{"path": "/etc/x.png"}, "params.path"},
		{"scroll with two modes", ActionScroll, map[string]any{"y": 10, "to": "top"}, "params"},
		{"params not an object", ActionBack, []int{1}, "params"},
		{"close with params", ActionClose, map[string]any{"x": 1}, "params.x"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := h.do("invalid", c.action, c.params)
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("err = %v, want a validation error", err)
			}
			if code, status, _ := errcode.Of(err); code != errcode.InvalidRequest || status != 400 {
				t.Fatalf("code %s %d", code, status)
			}
			if ve.Fields[0].Field != c.field {
				t.Fatalf("fields = %+v, want %s", ve.Fields, c.field)
			}
		})
	}
	if n := sessionProcs("invalid"); n != 0 {
		t.Fatalf("invalid requests started a browser (%d processes)", n)
	}
	recs := h.records("invalid", KindAction)
	if len(recs) == 0 || recs[0].Outcome != "invalid" {
		t.Fatalf("invalid actions not audited: %+v", recs)
	}
}

func TestActionErrors(t *testing.T) {
	p := newPages(t)
	closed := newTrap(t)
	closedHP := closed.hostPort()
	closed.Close()
	h := newHarness(t, harnessOpts{allow: []string{p.hostPort(), closedHP}})
	const s = "errs"
	h.must(s, ActionNavigate, map[string]any{"url": p.URL + "/"})

	_, err := h.do(s, ActionWaitFor, map[string]any{"selector": "#never", "timeout_s": 1})
	if code, status, _ := errcode.Of(err); code != errcode.BrowserTimeout || status != 504 {
		t.Fatalf("wait_for a missing element: %v (%s)", err, code)
	}
	_, err = h.do(s, ActionClick, map[string]any{"selector": "#a:b:c(", "timeout_s": 5})
	var ve *ValidationError
	if !errors.As(err, &ve) || ve.Fields[0].Field != "params.selector" {
		t.Fatalf("bad selector: %v", err)
	}
	_, err = h.do(s, ActionContent, map[string]any{"selector": "#nothing-here"})
	if code, _, _ := errcode.Of(err); code != errcode.NotFound {
		t.Fatalf("content of a missing element: %v", err)
	}
	_, err = h.do(s, ActionNavigate, map[string]any{"url": "http://" + closedHP + "/"})
	if code, status, msg := errcode.Of(err); code != errcode.NavigationFailed || status != 502 || !strings.Contains(msg, "net::ERR_") {
		t.Fatalf("navigate to a closed port: %v (%s %q)", err, code, msg)
	}
	big := h.must(s, ActionNavigate, map[string]any{"url": p.URL + "/big"})
	_ = big
	got := h.must(s, ActionContent, map[string]any{"max_bytes": 1000}).Data.(ContentResult)
	if !got.Truncated || got.Bytes != 1000 || len(got.Content) != 1000 {
		t.Fatalf("capped content: truncated=%v bytes=%d", got.Truncated, got.Bytes)
	}
	pos := h.must(s, ActionScroll, map[string]any{"y": 500}).Data.(ScrollResult)
	if pos.Y != 500 {
		t.Fatalf("scroll = %+v", pos)
	}
	if end := h.must(s, ActionScroll, map[string]any{"to": "bottom"}).Data.(ScrollResult); end.Y <= 500 {
		t.Fatalf("scroll to bottom = %+v", end)
	}
	if _, err := h.do("errs-fresh", ActionBack, nil); !errors.Is(err, ErrNoHistory) {
		t.Fatalf("back without history: %v", err)
	}
}

func TestScreenshotSymlinkEscape(t *testing.T) {
	p := newPages(t)
	h := newHarness(t, harnessOpts{allow: []string{p.hostPort()}})
	const s = "shot-escape"
	dir, err := h.ws.Ensure(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dir.Path, "out")); err != nil {
		t.Fatal(err)
	}
	h.must(s, ActionNavigate, map[string]any{"url": p.URL + "/"})
	_, err = h.do(s, ActionScreenshot, map[string]any{"path": "out/x.png"})
	if code, _, _ := errcode.Of(err); code != errcode.PathTraversal {
		t.Fatalf("screenshot through a symlink out: %v", err)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("wrote outside the workspace: %v", entries)
	}
}

// slowServer answers after a delay and records its peak concurrency.
// slowServer holds each page until a second one is requested, or for
// wait, and records the most it held at once.
type slowServer struct {
	*trap
	maxConcurrent, cur, wait atomic.Int64
}

func newSlow(t *testing.T) *slowServer {
	s := &slowServer{trap: newTrap(t)}
	s.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/favicon.ico" {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		n := s.cur.Add(1)
		defer s.cur.Add(-1)
		for {
			m := s.maxConcurrent.Load()
			if n <= m || s.maxConcurrent.CompareAndSwap(m, n) {
				break
			}
		}
		for deadline := time.Now().Add(time.Duration(s.wait.Load())); s.maxConcurrent.Load() < 2 && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		w.Write([]byte("<title>slow</title>slow"))
	})
	return s
}

func waitFor(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// standIn is a Chromium started with a DevTools port on 127.0.0.1: the
// stand-in for the browser inside an AIO sandbox.
type standIn struct {
	cmd   *exec.Cmd
	wsURL string
	dir   string
}

func startStandIn(t *testing.T) *standIn {
	t.Helper()
	path := requireChromium(t)
	dir, err := os.MkdirTemp(testDataDir, "aio-standin-")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", "--user-data-dir="+dir,
		"--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1", "about:blank")
	// A TMPDIR of its own (short: Chromium's singleton socket lives
	// there), or every run leaves an org.chromium.Chromium.* in /tmp.
	tmp := t.TempDir()
	cmd.Env = []string{"HOME=" + dir, "PATH=/usr/bin:/bin", "TMPDIR=" + tmp}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &standIn{cmd: cmd, dir: dir}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		killUsing(dir)
	})
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "DevTools listening on "); ok {
				found <- strings.TrimSpace(u)
			}
		}
	}()
	select {
	case s.wsURL = <-found:
	case <-time.After(20 * time.Second):
		t.Fatal("stand-in Chromium printed no DevTools URL")
	}
	return s
}

// standInLocator answers every session with the stand-in's DevTools URL.
type standInLocator struct{ url string }

func (l standInLocator) BrowserCDP(context.Context, string) (string, error) { return l.url, nil }

func TestSwitchingBackendKeepsOneBrowser(t *testing.T) {
	p := newPages(t)
	si := startStandIn(t)
	h := newHarness(t, harnessOpts{allow: []string{p.hostPort()}, aio: standInLocator{url: si.wsURL}})
	const s = "switch"

	res := h.must(s, ActionNavigate, map[string]any{"url": p.URL + "/"})
	if res.Backend != BackendExternal {
		t.Fatalf("backend = %s", res.Backend)
	}
	// Before: the session's external Chromium (a process tree) and the
	// stand-in are the two browsers under the test directory.
	if ext, mains := sessionProcs(s), browserMains(testDataDir); ext == 0 || len(mains) != 2 {
		t.Fatalf("before: %d external processes, browsers %v", ext, mains)
	}

	res = h.must(s, ActionNavigate, map[string]any{"url": p.URL + "/submit?name=aio"}, RouteContext{NeedsFileAccess: true})
	if res.Backend != BackendAIO || !res.Started {
		t.Fatalf("after switching: %+v", res)
	}
	if got := h.must(s, ActionContent, map[string]any{"selector": "#result"}, RouteContext{IsResearch: true}).Data.(ContentResult).Content; got != "Hello, aio!" {
		t.Fatalf("aio content = %q", got)
	}
	// After: no process of the external browser is left; the only browser
	// is the sandbox's, holding the session's one tab.
	if ext, mains := sessionProcs(s), browserMains(testDataDir); ext != 0 || len(mains) != 1 || !slices.Equal(mains, browserMains(si.dir)) {
		t.Fatalf("after: %d external processes, browsers %v (stand-in %v)", ext, mains, browserMains(si.dir))
	}
	if n := si.tabsAt(t, p.URL); n != 1 {
		t.Fatalf("%d session tabs in the aio browser", n)
	}
	if live := h.m.Live(); len(live) != 1 || live[s] != BackendAIO {
		t.Fatalf("live = %v", live)
	}

	// The aio browser is policed too: schemes, and every request it makes.
	if _, err := h.do(s, ActionNavigate, map[string]any{"url": "file:///etc/passwd"}, RouteContext{IsResearch: true}); err == nil {
		t.Fatal("file: navigation allowed on aio")
	}
	// (Allow records are written in the background, once the session is
	// quiet for a moment.)
	waitFor(t, 5*time.Second, func() bool {
		for _, r := range h.records(s, KindRequest) {
			if r.Detail["backend"] == BackendAIO && r.Detail["layer"] == layerFetch && r.Action == "allow" {
				return true
			}
		}
		return false
	})

	// And back: the aio tab is closed, one external browser again.
	res = h.must(s, ActionNavigate, map[string]any{"url": p.URL + "/"})
	if res.Backend != BackendExternal || !res.Started || sessionProcs(s) == 0 {
		t.Fatalf("switching back: %+v, %d processes", res, sessionProcs(s))
	}
	if n := si.tabsAt(t, p.URL); n != 0 {
		t.Fatalf("%d of our tabs left in the aio browser", n)
	}
}

func TestAIOUnavailable(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	_, err := h.do("noaio", ActionNavigate, map[string]any{"url": "http://127.0.0.1:1/"}, RouteContext{NeedsFileAccess: true})
	if code, status, _ := errcode.Of(err); code != errcode.ExecutorUnavailable || status != 503 {
		t.Fatalf("aio without a backend: %v", err)
	}
}

// tabsAt counts the stand-in's page targets showing a URL under prefix.
func (s *standIn) tabsAt(t *testing.T, prefix string) int {
	t.Helper()
	host := strings.TrimPrefix(s.wsURL, "ws://")
	host, _, _ = strings.Cut(host, "/")
	res, err := http.Get("http://" + host + "/json/list")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var targets []struct{ Type, URL string }
	if err := json.NewDecoder(res.Body).Decode(&targets); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, tg := range targets {
		if tg.Type == "page" && strings.HasPrefix(tg.URL, prefix) {
			n++
		}
	}
	return n
}

// TestScreenshotObeysWorkspaceLimits: a screenshot is written through the
// workspace file API, so the session's quota and the per-file limit apply
// to it as to an agent's own write, and a refused one leaves nothing.
func TestScreenshotObeysWorkspaceLimits(t *testing.T) {
	p := newPages(t)
	for _, tc := range []struct {
		name string
		opts workspace.Options
		code errcode.Code
	}{
		{"quota", workspace.Options{QuotaBytes: 1024}, errcode.QuotaExceeded},
		{"file size", workspace.Options{MaxFileBytes: 1024}, errcode.FileTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessOpts{allow: []string{p.hostPort()}, wsOpts: tc.opts})
			s := "shot-limit-" + tc.name[:4]
			h.must(s, ActionNavigate, map[string]any{"url": p.URL + "/"})
			_, err := h.do(s, ActionScreenshot, map[string]any{"path": "big.png"})
			if code, _, _ := errcode.Of(err); code != tc.code {
				t.Fatalf("screenshot over the %s: %v, want %s", tc.name, err, tc.code)
			}
			dir, err := h.ws.Ensure(t.Context(), s)
			if err != nil {
				t.Fatal(err)
			}
			if entries, _ := os.ReadDir(dir.Path); len(entries) != 0 {
				t.Errorf("a refused screenshot left %v", entries)
			}
		})
	}
}
