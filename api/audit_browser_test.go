package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"

	"github.com/sandgate/sandgate/audit"
)

// TestAuditViewInBrowser: an admin, in Chromium, keyboard only, filters
// the audit log of a real gateway by session (and is told which filter is
// bad), opens a record, verifies the chain, then verifies again after one
// record was edited in the SQLite file underneath, and the view names
// that record; the NDJSON export downloads the filtered records. Its keys
// never reach the approval queue it hides, and an approver's token gets
// no audit view. SANDGATE_UPDATE_DOCS=1 writes docs/audit-view-verified.png
// and docs/audit-view-broken.png.
func TestAuditViewInBrowser(t *testing.T) {
	b := newBrowser(t)
	dir := artifactDir(t)
	e := newApprovalEnv(t, approvalOpts{timeout: time.Minute})
	for i, s := range []string{"build-1", "build-2", "build-1"} {
		if r := e.do("POST", "/v1/sessions/"+s+"/run_code", agentTok, runCode(fmt.Sprintf("print(%d)", i), "python")); r.status != 200 {
			t.Fatalf("run: %d %s", r.status, r.raw)
		}
	}
	denied := audit.Record{RequestID: "req-egress-1", Kind: "egress", Tenant: "a", SessionID: "build-2", Action: "deny",
		Outcome: audit.OutcomeDenied, Detail: map[string]string{"host": "files.example.org", "port": "443", "rule": "default"}}
	if err := e.audit.Append(t.Context(), &denied); err != nil {
		t.Fatal(err)
	}
	if r := e.do("POST", "/v1/sessions/build-2/run_code", agentTok, runCode("exit(3)", "python")); r.status != 200 {
		t.Fatalf("failing run: %d %s", r.status, r.raw)
	}
	// A request held for approval while the admin reads the log.
	held := e.runAsync("build-3", highRisk)
	v := pendingFor(t, e.hub, "build-3")

	b.do("open the audit view",
		chromedp.EmulateViewport(1400, 900),
		chromedp.Navigate(e.srv.URL+"/?token="+adminTok),
		chromedp.WaitVisible(chromedp.CSS(`#conn[data-state="live"]`)),
		chromedp.WaitVisible(cardSel(v.ID, ".approve")),
		chromedp.WaitVisible(chromedp.CSS(`#audit-btn`)),
		chromedp.KeyEvent("v"),
		chromedp.WaitVisible(chromedp.CSS(`#audit-view tbody tr`)),
	)
	if n := eval[int](b, `document.querySelectorAll('#audit-view tbody tr').length`); n < 5 {
		t.Errorf("audit view lists %d records, want at least 5", n)
	}
	b.do("the queue's keys do nothing here", chromedp.KeyEvent("a"), chromedp.KeyEvent("d"))
	if r := e.do("GET", "/v1/approvals/"+v.ID, approverTok, nil); r.body["status"] != "pending" {
		t.Fatalf("a key in the audit view decided the hidden request: %s", r.raw)
	}

	b.do("a bad filter is named",
		chromedp.KeyEvent("/"),
		chromedp.SendKeys(chromedp.CSS(`#audit-since`), "yesterday\r"),
		chromedp.WaitVisible(chromedp.CSS(`#audit-since.invalid`)),
	)
	if s := eval[string](b, `document.querySelector('.a-status').textContent`); !strings.Contains(s, "since") || !strings.Contains(s, "invalid_request") {
		t.Errorf("bad filter status %q", s)
	}
	eval[string](b, `document.querySelector('#audit-since').value = '1h'`) // an hour ago: every record here
	b.do("filter by session, in the last hour",
		chromedp.SendKeys(chromedp.CSS(`#audit-session_id`), "build-2\r"),
		chromedp.WaitNotPresent(chromedp.CSS(`#audit-since.invalid`)),
	)
	sessions := eval[[]string](b, `[...document.querySelectorAll('#audit-view tbody tr .a-session')].map(td => td.textContent)`)
	if len(sessions) != 3 || strings.Join(sessions, ",") != "build-2,build-2,build-2" {
		t.Errorf("rows of session build-2: %v", sessions)
	}
	b.do("and by outcome",
		chromedp.SendKeys(chromedp.CSS(`#audit-outcome`), "denied\r"),
		chromedp.WaitNotPresent(chromedp.CSS(`#audit-view tbody tr:nth-child(2)`)),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#audit-view tbody tr[data-id="%d"]`, denied.ID))),
	)
	if n := eval[int](b, `document.querySelectorAll('#audit-view tbody tr').length`); n != 1 {
		t.Errorf("session build-2, denied: %d rows, want 1", n)
	}
	b.do("clear the filters, open the second record, verify the chain",
		chromedp.KeyEvent("x"),
		chromedp.WaitVisible(chromedp.CSS(`#audit-view tbody tr:nth-child(5)`)),
		chromedp.KeyEvent("j"),
		chromedp.KeyEvent("\r"),
		chromedp.WaitVisible(chromedp.CSS(`#audit-view .a-detail dl`)),
		chromedp.KeyEvent("c"),
		chromedp.WaitVisible(chromedp.CSS(`.a-chain[data-state="ok"]`)),
	)
	chain := eval[string](b, `document.querySelector('.a-chain').textContent`)
	if !strings.Contains(chain, "Chain verified") || !strings.Contains(chain, "in local") {
		t.Errorf("chain banner %q", chain)
	}
	updateDocs(t, b.screenshot(dir, "audit-view-verified.png"), "audit-view-verified.png")

	// Someone with the database file rewrites the denial as allowed.
	tamperAudit(t, filepath.Join(e.dataDir, "audit.db"),
		fmt.Sprintf(`UPDATE records SET outcome = 'ok', action = 'allow' WHERE id = %d`, denied.ID))
	b.do("verify again",
		chromedp.KeyEvent("c"),
		chromedp.WaitVisible(chromedp.CSS(`.a-chain[data-state="broken"]`)),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#audit-view tbody tr.broken[data-id="%d"]`, denied.ID))),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#audit-view .a-detail[data-id="%d"] .a-broken-note`, denied.ID))),
	)
	chain = eval[string](b, `document.querySelector('.a-chain').textContent`)
	if !strings.Contains(chain, fmt.Sprintf("#%d", denied.ID)) || !strings.Contains(chain, "req-egress-1") || !strings.Contains(chain, "header") && !strings.Contains(chain, "hash") {
		t.Errorf("broken chain banner %q, want record %d named", chain, denied.ID)
	}
	if n := eval[int](b, `document.querySelectorAll('#audit-view tbody tr.broken').length`); n != 1 {
		t.Errorf("%d rows marked broken, want 1", n)
	}
	updateDocs(t, b.screenshot(dir, "audit-view-broken.png"), "audit-view-broken.png")

	dl := t.TempDir()
	if _, err := chromedp.CallBrowser(b.ctx, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
		Behavior: browser.SetDownloadBehaviorBehaviorAllow, DownloadPath: dl}); err != nil {
		t.Fatal(err)
	}
	b.do("export NDJSON",
		chromedp.SendKeys(chromedp.CSS(`#audit-session_id`), "build-1\r"),
		chromedp.WaitNotPresent(chromedp.CSS(`#audit-view tbody tr:nth-child(3)`)),
		chromedp.KeyEvent("e"),
		chromedp.WaitVisible(chromedp.CSS(`.a-status[data-kind="done"]`)),
	)
	lines := downloaded(t, dl)
	if len(lines) != 2 {
		t.Fatalf("export: %d lines, want session build-1's 2 records", len(lines))
	}
	for _, l := range lines {
		var rec audit.Record
		if err := json.Unmarshal(l, &rec); err != nil || rec.SessionID != "build-1" || rec.Kind != "run_code" {
			t.Errorf("export line %s: %v", l, err)
		}
	}

	b.do("back to the queue, which still decides", chromedp.KeyEvent("v"), chromedp.WaitVisible(cardSel(v.ID, ".approve")),
		chromedp.KeyEvent("a"))
	if r := held.wait(t); r.status != 200 {
		t.Errorf("held run after the audit view: %d %s", r.status, r.raw)
	}
	if errs := b.pageErrors(); len(errs) > 0 {
		t.Fatalf("page errors: %v", errs)
	}

	b.do("an approver gets no audit view",
		chromedp.Navigate(e.srv.URL+"/?token="+approverTok+"#audit"),
		chromedp.WaitVisible(chromedp.CSS(`#conn[data-state="live"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#audit-refused`)),
	)
	if s := eval[string](b, `document.querySelector('#audit-refused').textContent`); !strings.Contains(s, "admin") {
		t.Errorf("approver's notice %q", s)
	}
	if eval[bool](b, `!document.querySelector('#audit-btn').hidden || !document.querySelector('#audit-view').hidden`) {
		t.Error("an approver's page shows the audit view")
	}
}

// updateDocs writes a screenshot to docs/ when SANDGATE_UPDATE_DOCS=1.
func updateDocs(t *testing.T, png []byte, name string) {
	t.Helper()
	if os.Getenv("SANDGATE_UPDATE_DOCS") != "1" {
		return
	}
	if err := os.WriteFile(filepath.Join("..", "docs", name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// downloaded waits for the one finished file in dir and returns its lines.
func downloaded(t *testing.T, dir string) [][]byte {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		files, _ := filepath.Glob(filepath.Join(dir, "sandgate-audit-*.ndjson"))
		if len(files) == 1 {
			raw, err := os.ReadFile(files[0])
			if err != nil {
				t.Fatal(err)
			}
			return bytes.Split(bytes.TrimSuffix(raw, []byte("\n")), []byte("\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	entries, _ := os.ReadDir(dir)
	t.Fatalf("no export downloaded in %s: %v", dir, entries)
	return nil
}
