package api

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/confirm"
)

// The approval page in a real browser: Debian's Chromium driven by chromedp.
//
// Under plain `go test` the test skips when Chromium is missing; with
// SANDGATE_REQUIRE_BROWSER=1 (make test) a missing browser is a failure.
// Screenshots go to $SANDGATE_ARTIFACTS/<test>/ or, without it, to
// <tmp>/sandgate-artifacts/<test>/ (logged). SANDGATE_UPDATE_DOCS=1 also
// writes the desktop screenshot to docs/approval-page.png.

// chromiumPath finds the browser or skips (fails when it is required).
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("SANDGATE_CHROMIUM"), "/usr/bin/chromium", "chromium", "chromium-browser"} {
		if p == "" {
			continue
		}
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	if os.Getenv("SANDGATE_REQUIRE_BROWSER") == "1" {
		t.Fatal("chromium not found and SANDGATE_REQUIRE_BROWSER=1 (install Debian's chromium: make deps)")
	}
	t.Skip("chromium not found; set SANDGATE_REQUIRE_BROWSER=1 to make this a failure")
	return ""
}

func artifactDir(t *testing.T) string {
	t.Helper()
	base := os.Getenv("SANDGATE_ARTIFACTS")
	if base == "" {
		base = filepath.Join(os.TempDir(), "sandgate-artifacts")
	}
	dir := filepath.Join(base, t.Name())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots in %s", dir)
	return dir
}

// chrome is one headless Chromium with one tab.
type chrome struct {
	t       *testing.T
	ctx     context.Context
	dataDir string
	mu      sync.Mutex
	errs    []string // uncaught exceptions and console errors of the page
}

func newBrowser(t *testing.T) *chrome {
	t.Helper()
	path := chromiumPath(t)
	// A fresh profile per run; it also tags every process of this browser
	// (their command lines name it), so the test can prove none survives.
	dataDir, err := os.MkdirTemp("", "sandgate-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		// Its own TMPDIR, where Chromium keeps its singleton socket: a
		// browser killed at the end (its graceful close timed out) left
		// an org.chromium.Chromium.* directory in /tmp.
		chromedp.Env("TMPDIR=" + t.TempDir()),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(dataDir),
		chromedp.WindowSize(1280, 800),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-breakpad", true),
		chromedp.Flag("disable-crash-reporter", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("no-pings", true),
		chromedp.Flag("force-color-profile", "srgb"),
		chromedp.Flag("hide-scrollbars", true),
	}
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	b := &chrome{t: t, ctx: ctx, dataDir: dataDir}
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(ctx, 15*time.Second)
		_ = chromedp.Cancel(cctx)
		ccancel()
		cancel()
		acancel()
		b.assertNoProcessesLeft()
		_ = os.RemoveAll(dataDir)
	})
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start chromium: %v", err)
	}
	if err := chromedp.Listen(ctx, func(ev any) {
		var msg string
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			msg = "exception: " + e.ExceptionDetails.Text
			if e.ExceptionDetails.Exception != nil {
				msg += " " + e.ExceptionDetails.Exception.Description
			}
		case *runtime.EventConsoleAPICalled:
			if e.Type != runtime.ConsoleAPICalledTypeError {
				return
			}
			msg = "console.error"
			for _, a := range e.Args {
				msg += " " + string(a.Value)
			}
		default:
			return
		}
		b.mu.Lock()
		b.errs = append(b.errs, msg)
		b.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	return b
}

// do runs steps with a bound, failing the test with what was being done.
func (b *chrome) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

func eval[T any](b *chrome, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

func (b *chrome) screenshot(dir, name string) []byte {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	return png
}

func (b *chrome) pageErrors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.errs)
}

// assertNoProcessesLeft fails the test if any process of this browser
// (found by its profile directory on the command line) outlives it; it
// kills those it finds, by pid, so none survives the test either way.
func (b *chrome) assertNoProcessesLeft() {
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids := processesMentioning(b.dataDir)
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			b.t.Errorf("chromium processes outlived the test (killed): %v", pids)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func processesMentioning(s string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if strings.Contains(string(cmdline), s) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// cardSel is the CSS selector of the card of approval id.
func cardSel(id, inner string) chromedp.CSS {
	return chromedp.CSS(fmt.Sprintf(`.card[data-id=%q] %s`, id, inner))
}

// pendingFor waits until the hub holds a pending approval for session.
func pendingFor(t *testing.T, hub *confirm.Hub, session string) confirm.View {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for _, v := range hub.Pending() {
			if v.SessionID == session {
				return v
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no pending approval for %s", session)
	return confirm.View{}
}

// checkLayout asserts the page fits the viewport (no sideways scrolling)
// and the card's buttons are on screen and big enough to hit.
func checkLayout(b *chrome, id, viewport string) {
	b.t.Helper()
	res := eval[map[string]float64](b, fmt.Sprintf(`(() => {
		const card = document.querySelector('.card[data-id=%q]');
		const ap = card.querySelector('.approve').getBoundingClientRect();
		const dn = card.querySelector('.deny').getBoundingClientRect();
		return {scrollW: document.documentElement.scrollWidth, innerW: window.innerWidth,
			apRight: ap.right, apW: ap.width, apH: ap.height, dnW: dn.width, dnH: dn.height,
			cardRight: card.getBoundingClientRect().right};
	})()`, id))
	if res["scrollW"] > res["innerW"] {
		b.t.Errorf("%s: the page scrolls sideways (%v > %v)", viewport, res["scrollW"], res["innerW"])
	}
	if res["apRight"] > res["innerW"] || res["cardRight"] > res["innerW"] {
		b.t.Errorf("%s: the card or its Approve button is off screen: %v", viewport, res)
	}
	for _, k := range []string{"apH", "dnH"} {
		if res[k] < 32 {
			b.t.Errorf("%s: %s = %v px, too small to hit", viewport, k, res[k])
		}
	}
}

func TestApprovalPageInBrowser(t *testing.T) {
	b := newBrowser(t)
	dir := artifactDir(t)
	e := newApprovalEnv(t, approvalOpts{})
	// The browser reaches the gateway through a proxy the test can cut, to
	// show the page reconnecting.
	proxy := newDropProxy(t, e.srv.Listener.Addr().String())

	b.do("open the page",
		chromedp.EmulateViewport(1280, 800),
		chromedp.Navigate(proxy.url()+"/?token="+approverTok),
		chromedp.WaitVisible(chromedp.CSS(`#conn[data-state="live"]`)),
	)
	// The token left the address bar for this tab's sessionStorage.
	if loc := eval[string](b, `location.href`); strings.Contains(loc, "token") {
		t.Fatalf("token still in the address bar: %s", loc)
	}
	if got := eval[string](b, `sessionStorage.getItem("sandgate.approver.token")`); got != approverTok {
		t.Fatalf("sessionStorage token %q", got)
	}
	if who := eval[string](b, `document.getElementById("who").textContent`); !strings.Contains(who, "p (approver)") {
		t.Fatalf("signed in as %q", who)
	}

	// 1. A HIGH-risk run_code blocks; the page shows it with the pattern
	// lines highlighted; clicking Approve lets it run.
	first := e.runAsync("build-7", highRisk)
	v := pendingFor(t, e.hub, "build-7")
	b.do("see the request", chromedp.WaitVisible(cardSel(v.ID, ".line.hit")))
	var want []string
	for _, p := range v.Patterns {
		if p.Line > 0 && !slices.Contains(want, strconv.Itoa(p.Line)) {
			want = append(want, strconv.Itoa(p.Line))
		}
	}
	slices.Sort(want)
	got := eval[[]string](b, fmt.Sprintf(`[...document.querySelectorAll('.card[data-id=%q] .line.hit')].map(e => e.dataset.line).sort()`, v.ID))
	if len(want) == 0 || !slices.Equal(got, want) {
		t.Fatalf("highlighted lines %v, patterns on lines %v", got, want)
	}
	if txt := eval[string](b, fmt.Sprintf(`document.querySelector('.card[data-id=%q]').textContent`, v.ID)); !strings.Contains(txt, "build-7") ||
		!strings.Contains(txt, "python") || !strings.Contains(txt, "HIGH") || !strings.Contains(txt, "risk.high") {
		t.Fatalf("card text %q", txt)
	}
	select {
	case <-first.done:
		t.Fatal("the HIGH-risk call returned before anyone approved it")
	default:
	}
	b.do("approve with a reason",
		chromedp.SendKeys(cardSel(v.ID, ".reason-input"), "expected build step"),
		chromedp.Click(cardSel(v.ID, ".approve")),
		chromedp.WaitVisible(cardSel(v.ID, `.banner[data-status="approved"]`)),
	)
	out := first.wait(t)
	if out.status != 200 || out.body["stdout"] != "hi\n\n" {
		t.Fatalf("approved call: %d %s", out.status, out.raw)
	}
	if a := obj(out.body["approval"]); a["status"] != "approved" || a["decided_by"] != "p" || a["reason"] != "expected build step" {
		t.Fatalf("approval %s", out.raw)
	}

	// 2. Two more requests wait; this is the screenshot of the README.
	second := e.runAsync("etl-42", "import socket\ns = socket.socket()\ns.connect(('10.0.0.5', 5432))\nprint('connected')")
	v2 := pendingFor(t, e.hub, "etl-42")
	third := e.runAsync("report-3", "import os, subprocess\nfiles = os.listdir('.')\nsubprocess.run(['tar', 'czf', 'out.tgz'] + files)\nprint(len(files))")
	v3 := pendingFor(t, e.hub, "report-3")
	b.do("see both", chromedp.WaitVisible(cardSel(v2.ID, ".line")), chromedp.WaitVisible(cardSel(v3.ID, ".line")),
		chromedp.WaitVisible(chromedp.CSS(`#history li[data-id="`+v.ID+`"]`)),
		chromedp.WaitNotPresent(cardSel(v.ID, "")),
	)
	desktop := b.screenshot(dir, "approval-page-1280x800.png")
	checkLayout(b, v2.ID, "1280x800")
	b.do("phone viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile))
	time.Sleep(300 * time.Millisecond) // let layout settle before the shot
	b.screenshot(dir, "approval-page-phone-390x844.png")
	checkLayout(b, v2.ID, "390x844")
	b.do("back to desktop", chromedp.EmulateViewport(1280, 800))

	// 3. Deny one from the page: its call gets 403 approval_denied.
	b.do("deny",
		chromedp.SendKeys(cardSel(v2.ID, ".reason-input"), "no database access from here"),
		chromedp.Click(cardSel(v2.ID, ".deny")),
		chromedp.WaitVisible(cardSel(v2.ID, `.banner[data-status="denied"]`)),
	)
	out = second.wait(t)
	if out.status != 403 || out.errCode() != "approval_denied" || !strings.Contains(string(out.raw), "no database access from here") {
		t.Fatalf("denied call: %d %s", out.status, out.raw)
	}

	// 4. Keyboard: select the third card and press "a".
	b.do("approve by keyboard",
		chromedp.Click(cardSel(v3.ID, ".risk")),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`.card.selected[data-id=%q]`, v3.ID))),
		chromedp.KeyEvent("a"),
		chromedp.WaitVisible(cardSel(v3.ID, `.banner[data-status="approved"]`)),
	)
	if out := third.wait(t); out.status != 200 || obj(out.body["approval"])["decided_by"] != "p" {
		t.Fatalf("keyboard-approved call: %d %s", out.status, out.raw)
	}
	b.do("history shows all three",
		chromedp.WaitVisible(chromedp.CSS(`#history li[data-id="`+v3.ID+`"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#history li[data-id="`+v2.ID+`"]`)),
	)
	b.screenshot(dir, "approval-page-history.png")
	if recs := e.auditRecords("etl-42"); len(recs) != 1 || recs[0].Approval == nil || recs[0].Approval.DecidedBy != "p" ||
		recs[0].Approval.Status != "denied" {
		t.Fatalf("audit %+v", recs)
	}

	// 5. The gateway goes away: the indicator says so and the page
	// reconnects by itself, getting the pending list again.
	fourth := e.runAsync("late-1", highRisk)
	v4 := pendingFor(t, e.hub, "late-1")
	b.do("see the late request", chromedp.WaitVisible(cardSel(v4.ID, ".line.hit")))
	proxy.dropAll() // the network drops the socket; the hub keeps the approval
	b.do("notice the loss", chromedp.WaitVisible(chromedp.CSS(`#conn[data-state="reconnecting"]`)))
	b.do("reconnect", chromedp.WaitVisible(chromedp.CSS(`#conn[data-state="live"]`)),
		chromedp.WaitVisible(cardSel(v4.ID, ".approve")))
	fourth.cancel()
	b.do("withdrawn shown", chromedp.WaitVisible(cardSel(v4.ID, `.banner[data-status="withdrawn"]`)))
	if txt := eval[string](b, fmt.Sprintf(`document.querySelector('.card[data-id=%q] .banner').textContent`, v4.ID)); !strings.Contains(txt, "Withdrawn") {
		t.Fatalf("withdrawn banner %q", txt)
	}
	<-fourth.done

	if errs := b.pageErrors(); len(errs) > 0 {
		t.Fatalf("page errors: %v", errs)
	}
	if os.Getenv("SANDGATE_UPDATE_DOCS") == "1" {
		if err := os.WriteFile(filepath.Join("..", "docs", "approval-page.png"), desktop, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// dropProxy forwards loopback TCP connections to target and can cut all
// of them at once.
type dropProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
}

func newDropProxy(t *testing.T, target string) *dropProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &dropProxy{ln: ln, target: target}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(u, c); u.Close() }()
			go func() { _, _ = io.Copy(c, u); c.Close() }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.dropAll()
	})
	return p
}

func (p *dropProxy) url() string { return "http://" + p.ln.Addr().String() }

func (p *dropProxy) dropAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func TestApprovalPageRejectsAgentToken(t *testing.T) {
	b := newBrowser(t)
	e := newApprovalEnv(t, approvalOpts{})
	b.do("open with an agent token",
		chromedp.Navigate(e.srv.URL+"/?token="+agentTok),
		chromedp.WaitVisible(chromedp.CSS(`#conn[data-state="auth"]`)),
	)
	if txt := eval[string](b, `document.getElementById("conn-text").textContent`); !strings.Contains(txt, "Not an approver token") {
		t.Fatalf("indicator %q", txt)
	}
}

// TestApprovalPageTenantScopeInBrowser: the page of lead-a, an approver
// limited to team-a, shows team-a's requests only, each card naming its
// tenant; team-b's, even one that arrives while the page is open, never
// reaches it. The unrestricted approver's page shows both tenants' cards
// and decides team-b's.
func TestApprovalPageTenantScopeInBrowser(t *testing.T) {
	b := newBrowser(t)
	dir := artifactDir(t)
	e := newApprovalEnv(t, approvalOpts{})
	callA := e.runAsyncAs(teamATok, "etl", highRisk)
	va := pendingForTenant(t, e.hub, "team-a", "etl")
	callB := e.runAsyncAs(teamBTok, "etl", highRisk)
	vb := pendingForTenant(t, e.hub, "team-b", "etl")

	b.do("open lead-a's page",
		chromedp.EmulateViewport(1280, 800),
		chromedp.Navigate(e.srv.URL+"/?token="+leadATok),
		chromedp.WaitVisible(chromedp.CSS(`#conn[data-state="live"]`)),
		chromedp.WaitVisible(cardSel(va.ID, ".approve")),
	)
	if who := eval[string](b, `document.getElementById("who").textContent`); !strings.Contains(who, "lead-a") || !strings.Contains(who, "team-a") {
		t.Fatalf("signed in as %q", who)
	}
	if got := eval[string](b, fmt.Sprintf(`document.querySelector('.card[data-id=%q] .tenant').textContent`, va.ID)); got != "team-a" {
		t.Fatalf("card tenant %q", got)
	}
	// A team-b request, then a team-a one: once the second is shown, the
	// first would have been too, had it been sent.
	callB2 := e.runAsyncAs(teamBTok, "late", highRisk)
	vb2 := pendingForTenant(t, e.hub, "team-b", "late")
	callA2 := e.runAsyncAs(teamATok, "late", highRisk)
	va2 := pendingForTenant(t, e.hub, "team-a", "late")
	b.do("see team-a's second request", chromedp.WaitVisible(cardSel(va2.ID, ".approve")))
	html := eval[string](b, `document.documentElement.outerHTML`)
	if n := eval[int](b, `document.querySelectorAll('.card').length`); n != 2 {
		t.Fatalf("lead-a's page shows %d cards, want team-a's 2", n)
	}
	for _, id := range []string{vb.ID, vb2.ID} {
		if strings.Contains(html, id) {
			t.Fatalf("lead-a's page holds team-b's approval %s", id)
		}
	}
	b.screenshot(dir, "approval-page-lead-a.png")
	b.do("approve team-a's first request",
		chromedp.Click(cardSel(va.ID, ".approve")),
		chromedp.WaitVisible(cardSel(va.ID, `.banner[data-status="approved"]`)),
	)
	if out := callA.wait(t); out.status != 200 || obj(out.body["approval"])["decided_by"] != "lead-a" {
		t.Fatalf("team-a's call: %d %s", out.status, out.raw)
	}

	b.do("open the unrestricted approver's page",
		chromedp.Navigate(e.srv.URL+"/?token="+approverTok),
		chromedp.WaitVisible(chromedp.CSS(`#conn[data-state="live"]`)),
		chromedp.WaitVisible(cardSel(vb.ID, ".approve")),
		chromedp.WaitVisible(cardSel(vb2.ID, ".approve")),
		chromedp.WaitVisible(cardSel(va2.ID, ".approve")),
	)
	for id, want := range map[string]string{vb.ID: "team-b", vb2.ID: "team-b", va2.ID: "team-a"} {
		if got := eval[string](b, fmt.Sprintf(`document.querySelector('.card[data-id=%q] .tenant').textContent`, id)); got != want {
			t.Errorf("card %s shows tenant %q, want %q", id, got, want)
		}
	}
	b.screenshot(dir, "approval-page-all-tenants.png")
	b.do("deny team-b's first request",
		chromedp.Click(cardSel(vb.ID, ".deny")),
		chromedp.WaitVisible(cardSel(vb.ID, `.banner[data-status="denied"]`)),
	)
	if out := callB.wait(t); out.status != 403 || out.errCode() != "approval_denied" {
		t.Fatalf("team-b's call: %d %s", out.status, out.raw)
	}
	for _, c := range []*pendingCall{callA2, callB2} {
		c.cancel()
		<-c.done
	}
	if errs := b.pageErrors(); len(errs) > 0 {
		t.Fatalf("page errors: %v", errs)
	}
}

// TestEgressApprovalInBrowser: a network request on the page says which
// session wants which host, lists the session's recent connections, and
// "Allow for this session" approves it with the session scope.
func TestEgressApprovalInBrowser(t *testing.T) {
	b := newBrowser(t)
	dir := artifactDir(t)
	e := newApprovalEnv(t, approvalOpts{})
	ctx := t.Context()
	// The session's earlier connection, as the egress proxy records it.
	if err := e.audit.Append(ctx, &audit.Record{RequestID: "r-net", Kind: "egress", Tenant: "a", SessionID: "net",
		Action: "allow", Outcome: audit.OutcomeOK, Detail: map[string]string{"host": "pypi.org", "port": "443",
			"rule": "demo-pypi", "bytes_up": "812", "bytes_down": "40960"}}); err != nil {
		t.Fatal(err)
	}
	done := make(chan confirm.Outcome, 1)
	go func() {
		o, err := e.hub.Confirm(ctx, confirm.Request{Kind: confirm.KindEgress, Target: "files.example.org:443",
			RequestID: "r-net", Tenant: "a", SessionID: "net", RiskLevel: "LOW", Principal: "a", Via: "egress proxy",
			Reasons:  []confirm.Reason{{Code: "egress.approval", Message: "files.example.org:443 is not on an allow-list"}},
			Deadline: time.Now().Add(time.Minute)})
		if err != nil {
			t.Error(err)
		}
		done <- o
	}()
	v := pendingFor(t, e.hub, "net")
	b.do("open the page",
		chromedp.EmulateViewport(1280, 800),
		chromedp.Navigate(e.srv.URL+"/?token="+approverTok),
		chromedp.WaitVisible(chromedp.CSS(`#conn[data-state="live"]`)),
		chromedp.WaitVisible(cardSel(v.ID, ".approve-session")),
		chromedp.WaitVisible(cardSel(v.ID, ".conns li")),
	)
	if got := eval[string](b, fmt.Sprintf(`document.querySelector('.card[data-id=%q] .wants').textContent`, v.ID)); got != "Session net wants to connect to files.example.org:443" {
		t.Errorf("card says %q", got)
	}
	if got := eval[string](b, fmt.Sprintf(`document.querySelector('.card[data-id=%q] .conns li').textContent`, v.ID)); !strings.Contains(got, "pypi.org:443") || !strings.Contains(got, "demo-pypi") {
		t.Errorf("recent connection %q", got)
	}
	if eval[bool](b, fmt.Sprintf(`!document.querySelector('.card[data-id=%q] .code').hidden`, v.ID)) {
		t.Error("a network request shows a code box")
	}
	b.screenshot(dir, "egress-approval.png")
	b.do("allow for the session",
		chromedp.Click(cardSel(v.ID, ".approve-session")),
		chromedp.WaitVisible(cardSel(v.ID, `.banner[data-status="approved"]`)),
	)
	if o := <-done; !o.Approved() || o.Scope != confirm.ScopeSession || o.DecidedBy != "p" {
		t.Fatalf("outcome %+v", o)
	}
	if errs := b.pageErrors(); len(errs) > 0 {
		t.Fatalf("page errors: %v", errs)
	}
}
