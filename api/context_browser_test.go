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
// stated intent (context.intent), the session so far (an earlier run with
// an excerpt of its output, redacted; a file written, then edited, with
// the edit's diff; a binary file, said to be binary) and the grant that almost
// matched, with the policy's reason (the pattern it lacks); the API
// answers the same. SANDGATE_UPDATE_DOCS=1 writes docs/approval-context.png.
func TestApprovalContextInBrowser(t *testing.T) {
	b := newBrowser(t)
	dir := artifactDir(t)
	e := newApprovalEnv(t, approvalOpts{timeout: time.Minute, grants: true})
	// The run prints a secret-shaped line: the page shows its output
	// redacted.
	if r := e.do("POST", "/v1/sessions/cx/run_code", agentTok, runCode("print('warming up')\nprint('api_token=' + 'x7'*8)", "python")); r.status != 200 {
		t.Fatalf("safe run: %d %s", r.status, r.raw)
	}
	if r := e.do("PUT", "/v1/sessions/cx/files/content?path=notes.txt", agentTok, "one\ntwo\n"); r.status >= 300 {
		t.Fatalf("write: %d %s", r.status, r.raw)
	}
	if r := e.do("POST", "/v1/sessions/cx/files/edit", agentTok, map[string]any{"path": "notes.txt", "old": "two", "new": "deux"}); r.status >= 300 {
		t.Fatalf("edit: %d %s", r.status, r.raw)
	}
	if r := e.do("PUT", "/v1/sessions/cx/files/content?path=blob.bin", agentTok, "PK\x00\x01"); r.status >= 300 {
		t.Fatalf("binary write: %d %s", r.status, r.raw)
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
	if tl, _ := ctxBody.body["timeline"].([]any); len(tl) < 5 {
		t.Fatalf("timeline: %s", ctxBody.raw)
	}
	if raw := string(ctxBody.raw); !strings.Contains(raw, "warming up") || !strings.Contains(raw, "api_token=[redacted]") ||
		strings.Contains(raw, "x7x7x7x7") || !strings.Contains(raw, `-two\n+deux\n`) || !strings.Contains(raw, `"binary":true`) {
		t.Fatalf("the timeline lacks the run's excerpt, the edit's diff or the binary file, or shows the secret: %s", raw)
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
	excerpt := eval[string](b, fmt.Sprintf(`[...document.querySelectorAll('.card[data-id=%q] .timeline pre.excerpt')].map(p => p.textContent).join('|')`, w.ID))
	if !strings.Contains(excerpt, "warming up") || !strings.Contains(excerpt, "api_token=[redacted]") || strings.Contains(excerpt, "x7x7") {
		t.Errorf("output excerpt on the page: %q", excerpt)
	}
	// The edit's diff: its removed and added lines, each a line of its
	// own colour.
	diff := eval[[]any](b, fmt.Sprintf(`[...document.querySelectorAll('.card[data-id=%q] .timeline pre.diff span')].map(s => s.className + ' ' + s.textContent)`, w.ID))
	if d := fmt.Sprint(diff); !strings.Contains(d, "d-del -two") || !strings.Contains(d, "d-add +deux") || !strings.Contains(d, "d-hunk @@") {
		t.Errorf("diff on the page: %v", diff)
	}
	if !strings.Contains(timeline, "binary") {
		t.Errorf("the binary file's write does not say binary: %q", timeline)
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
