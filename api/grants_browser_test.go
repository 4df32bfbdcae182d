package api

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sandgate/sandgate/audit"
)

// TestGrantsAndProposalsInBrowser: on the page, in Chromium, an approver
// answers a HIGH run with the "session, 30 min" key (s); the run returns
// and the grant is listed in force; an agent's egress proposal is listed
// with its replayed effect (the session's two earlier denials of the
// host) and accepted from the page; revoking the grant there ends it.
// SANDGATE_UPDATE_DOCS=1 writes the screenshot to docs/grants-and-proposals.png.
func TestGrantsAndProposalsInBrowser(t *testing.T) {
	b := newBrowser(t)
	dir := artifactDir(t)
	e := newApprovalEnv(t, approvalOpts{timeout: time.Minute, grants: true, proposals: true})
	ctx := t.Context()
	for i, host := range []string{"files.example.org", "files.example.org", "other.example.org"} {
		if err := e.audit.Append(ctx, &audit.Record{RequestID: fmt.Sprintf("r-%d", i), Kind: "egress", Tenant: "a", SessionID: "gb",
			Action: "deny", Outcome: audit.OutcomeDenied, Detail: map[string]string{"host": host, "port": "443", "scheme": "https",
				"rule": "default"}}); err != nil {
			t.Fatal(err)
		}
	}
	pr := e.do("POST", "/v1/sessions/gb/proposals", agentTok, map[string]any{"kind": "egress_host", "value": "files.example.org:443",
		"justification": "the task downloads its dataset from there"})
	if pr.status != 201 {
		t.Fatalf("propose: %d %s", pr.status, pr.raw)
	}
	pid := pr.body["id"].(string)

	call := e.runAsync("gb", highRisk)
	v := pendingFor(t, e.hub, "gb")
	b.do("open the page",
		chromedp.EmulateViewport(1400, 900),
		chromedp.Navigate(e.srv.URL+"/?token="+approverTok),
		chromedp.WaitVisible(chromedp.CSS(`#conn[data-state="live"]`)),
		chromedp.WaitVisible(cardSel(v.ID, ".approve-pattern")),
		chromedp.WaitVisible(chromedp.CSS(`#proposals li.proposal[data-id="`+pid+`"] .effect`)),
	)
	effect := eval[string](b, `document.querySelector('#proposals li.proposal .effect').textContent`)
	if !strings.Contains(effect, "2 would change") || strings.Count(effect, "files.example.org:443") != 2 || strings.Contains(effect, "other.example.org") {
		t.Errorf("effect on the page: %q", effect)
	}
	b.do("grant the session 30 minutes", chromedp.KeyEvent("s"))
	if r := call.wait(t); r.status != 200 {
		t.Fatalf("run: %d %s", r.status, r.raw)
	}
	b.do("the grant is listed", chromedp.WaitVisible(chromedp.CSS(`#grants li.grant .revoke`)))
	grant := eval[string](b, `document.querySelector('#grants li.grant').textContent`)
	if !strings.Contains(grant, "session gb") || !strings.Contains(grant, "min left") {
		t.Errorf("grant on the page: %q", grant)
	}
	png := b.screenshot(dir, "grants-and-proposals.png")
	if os.Getenv("SANDGATE_UPDATE_DOCS") == "1" {
		if err := os.WriteFile(filepath.Join("..", "docs", "grants-and-proposals.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b.do("accept the proposal",
		chromedp.SendKeys(chromedp.CSS(`#proposals li.proposal .reason-input`), "fine for this task"),
		chromedp.Click(chromedp.CSS(`#proposals li.proposal .approve`)),
		chromedp.WaitNotPresent(chromedp.CSS(`#proposals li.proposal[data-id="`+pid+`"]`)),
	)
	if r := e.do("GET", "/v1/proposals/"+pid, approverTok, nil); r.body["status"] != "accepted" || r.body["reason"] != "fine for this task" {
		t.Errorf("proposal after the page: %s", r.raw)
	}
	b.do("revoke the grant",
		chromedp.Click(chromedp.CSS(`#grants li.grant .revoke`)),
		chromedp.WaitNotPresent(chromedp.CSS(`#grants li.grant`)),
	)
	if r := e.do("GET", "/v1/grants?session_id=gb", approverTok, nil); !strings.Contains(string(r.raw), `"revoked_by":"p"`) {
		t.Errorf("grant after the page: %s", r.raw)
	}
	if errs := b.pageErrors(); len(errs) > 0 {
		t.Fatalf("page errors: %v", errs)
	}
}
