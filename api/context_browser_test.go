package api

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// socketRisk is HIGH code with another pattern than highRisk's
// (python.net.socket); it is never run.
const socketRisk = "import socket\ns = socket.socket()\n"

// TestApprovalContextInBrowser: a held run's card shows the agent's
// stated intent (context.intent), the session so far (an earlier run and a file written) and the grant that almost
// matched, with the policy's reason (the pattern it lacks); the API
// answers the same. SANDGATE_UPDATE_DOCS=1 writes docs/approval-context.png.
func TestApprovalContextInBrowser(t *testing.T) {
	b := newBrowser(t)
	dir := artifactDir(t)
	e := newApprovalEnv(t, approvalOpts{timeout: time.Minute, grants: true})
	if r := e.do("POST", "/v1/sessions/cx/run_code", agentTok, runCode("print('warming up')", "python")); r.status != 200 {
		t.Fatalf("safe run: %d %s", r.status, r.raw)
	}
	if r := e.do("PUT", "/v1/sessions/cx/files/content?path=notes.txt", agentTok, "one\ntwo\n"); r.status >= 300 {
		t.Fatalf("write: %d %s", r.status, r.raw)
	}
	first := e.runAsync("cx", highRisk)
	v := pendingFor(t, e.hub, "cx")
	if r := e.do("POST", "/v1/approvals/"+v.ID+"/decision", approverTok, map[string]any{"decision": "approve", "scope": "session", "for_s": 1800}); r.status != 200 {
		t.Fatalf("grant: %d %s", r.status, r.raw)
	}
	first.wait(t)

	held := e.postAsync(agentTok, "cx", map[string]any{"code": socketRisk, "language": "python",
		"context": map[string]any{"intent": "check that the build server answers on its port"}})
	w := pendingFor(t, e.hub, "cx")
	if w.Intent != "check that the build server answers on its port" {
		t.Errorf("intent %q", w.Intent)
	}
	ctxBody := e.do("GET", "/v1/approvals/"+w.ID+"/context", approverTok, nil)
	near, _ := ctxBody.body["near_grants"].([]any)
	if len(near) != 1 || !strings.Contains(fmt.Sprint(obj(near[0])["why"]), "pattern python.net.socket is not among the grant's") {
		t.Fatalf("context: %s", ctxBody.raw)
	}
	if tl, _ := ctxBody.body["timeline"].([]any); len(tl) < 3 {
		t.Fatalf("timeline: %s", ctxBody.raw)
	}
	b.do("open the page",
		chromedp.EmulateViewport(1400, 900),
		chromedp.Navigate(e.srv.URL+"/?token="+approverTok),
		chromedp.WaitVisible(chromedp.CSS(`#conn[data-state="live"]`)),
		chromedp.WaitVisible(cardSel(w.ID, ".timeline li")),
		chromedp.WaitVisible(cardSel(w.ID, ".near li")),
	)
	timeline := eval[string](b, fmt.Sprintf(`document.querySelector('.card[data-id=%q] .timeline').textContent`, w.ID))
	if !strings.Contains(timeline, "run_code") || !strings.Contains(timeline, "notes.txt") || !strings.Contains(timeline, "exit 0") {
		t.Errorf("timeline on the page: %q", timeline)
	}
	if got := eval[string](b, fmt.Sprintf(`document.querySelector('.card[data-id=%q] .intent').textContent`, w.ID)); !strings.Contains(got, "build server answers") {
		t.Errorf("intent on the page: %q", got)
	}
	nearText := eval[string](b, fmt.Sprintf(`document.querySelector('.card[data-id=%q] .near').textContent`, w.ID))
	if !strings.Contains(nearText, "session cx") || !strings.Contains(nearText, "python.net.socket") {
		t.Errorf("near grants on the page: %q", nearText)
	}
	png := b.screenshot(dir, "approval-context.png")
	if os.Getenv("SANDGATE_UPDATE_DOCS") == "1" {
		if err := os.WriteFile(filepath.Join("..", "docs", "approval-context.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e.do("POST", "/v1/approvals/"+w.ID+"/decision", approverTok, map[string]any{"decision": "deny"})
	held.wait(t)
	if errs := b.pageErrors(); len(errs) > 0 {
		t.Fatalf("page errors: %v", errs)
	}
}
