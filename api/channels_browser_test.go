package api

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/confirm"
)

// TestWebhookLinkDecidesInBrowser: the webhook channel's decision_url,
// opened in Chromium by an approver already signed in on the page (the
// token is in the tab's sessionStorage), selects the linked request among
// several; Approve there releases the run. A link to a request that is no
// longer waiting says so.
func TestWebhookLinkDecidesInBrowser(t *testing.T) {
	b := newBrowser(t)
	dir := artifactDir(t)
	var (
		mu    sync.Mutex
		links = map[string]string{} // session id -> decision_url
	)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p confirm.WebhookPayload
		body, _ := io.ReadAll(r.Body)
		if json.Unmarshal(body, &p) == nil && p.Type == confirm.WebhookApprovalRequested {
			mu.Lock()
			links[p.Data.Approval.SessionID] = p.Data.DecisionURL
			mu.Unlock()
		}
	}))
	t.Cleanup(recv.Close)
	var base string
	e := newApprovalEnv(t, approvalOpts{timeout: 30 * time.Second, channels: func(audit.Store) []confirm.Channel {
		ch, err := confirm.NewWebhook(confirm.WebhookOptions{Name: "hook", URL: recv.URL, Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
			PageURL: "http://page.invalid"}) // rewritten to the test server's address below
		if err != nil {
			t.Fatal(err)
		}
		return []confirm.Channel{ch}
	}})
	base = e.srv.URL
	link := func(session string) string {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			mu.Lock()
			l := links[session]
			mu.Unlock()
			if l != "" {
				return strings.Replace(l, "http://page.invalid", base, 1)
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Fatalf("no webhook for %s", session)
		return ""
	}
	first := e.runAsync("first", highRisk)
	v1 := pendingFor(t, e.hub, "first")
	second := e.runAsync("second", highRisk)
	v2 := pendingFor(t, e.hub, "second")
	l2 := link("second")
	if !strings.HasSuffix(l2, "/#approval="+v2.ID) {
		t.Fatalf("link %s", l2)
	}

	b.do("sign in on the page",
		chromedp.EmulateViewport(1280, 800),
		chromedp.Navigate(base+"/?token="+approverTok),
		chromedp.WaitVisible(chromedp.CSS(`#conn[data-state="live"]`)),
		chromedp.WaitVisible(cardSel(v1.ID, ".approve")),
	)
	// In the signed-in tab (a same-document navigation: hashchange) ...
	b.do("follow the webhook's link", chromedp.Navigate(l2),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`.card.selected[data-id=%q]`, v2.ID))),
	)
	// ... and as a fresh load (a link opened from elsewhere, the token
	// in the tab).
	b.do("select the first card", chromedp.Click(cardSel(v1.ID, ".code")),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`.card.selected[data-id=%q]`, v1.ID))))
	b.do("reload the link", chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS(`#conn[data-state="live"]`)),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`.card.selected[data-id=%q]`, v2.ID))),
	)
	b.screenshot(dir, "approval-page-linked.png")
	b.do("approve the linked request",
		chromedp.Click(cardSel(v2.ID, ".approve")),
		chromedp.WaitVisible(cardSel(v2.ID, `.banner[data-status="approved"]`)),
	)
	if out := second.wait(t); out.status != 200 {
		t.Fatalf("second: %d %s", out.status, out.raw)
	}
	if len(e.hub.Pending()) != 1 || e.hub.Pending()[0].ID != v1.ID {
		t.Fatal("the link's approval landed on another request")
	}
	b.do("follow the link again", chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS(`#conn[data-state="live"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#notice`)),
	)
	if n := eval[string](b, `document.getElementById("notice").textContent`); !strings.Contains(n, "no longer waiting") || !strings.Contains(n, "approved") {
		t.Errorf("notice %q", n)
	}
	first.cancel()
	<-first.done
	if errs := b.pageErrors(); len(errs) > 0 {
		t.Fatalf("page errors: %v", errs)
	}
}
