package api

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sandgate/sandgate/confirm"
)

// TestEgressGrantInBrowser: on the page, in Chromium, a held network
// request offers a grant under a path prefix that starts as the request's
// path; the approver shortens it to /v1/ and clicks: the request is
// approved, the grant (POST, the host, /v1/) is recorded and listed in
// force.
func TestEgressGrantInBrowser(t *testing.T) {
	b := newBrowser(t)
	e := newApprovalEnv(t, approvalOpts{timeout: time.Minute, grants: true})
	type result struct {
		out confirm.Outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := e.hub.Confirm(context.Background(), confirm.Request{Kind: confirm.KindEgress,
			Target: "POST api.example.org:443/v1/items/7", RequestID: "req-eg", Tenant: "a", SessionID: "eg", RiskLevel: "LOW",
			Principal: "a", Deadline: time.Now().Add(time.Minute), Via: "egress proxy"})
		done <- result{out, err}
	}()
	v := pendingFor(t, e.hub, "eg")
	b.do("open the page",
		chromedp.EmulateViewport(1400, 900),
		chromedp.Navigate(e.srv.URL+"/?token="+approverTok),
		chromedp.WaitVisible(chromedp.CSS(`#conn[data-state="live"]`)),
		chromedp.WaitVisible(cardSel(v.ID, ".approve-grant")),
	)
	if got := eval[string](b, `document.querySelector('.card .grant-prefix').value`); got != "/v1/items/7" {
		t.Errorf("the prefix starts as %q, want the request's path", got)
	}
	b.do("grant POST under /v1/",
		chromedp.SetValue(cardSel(v.ID, ".grant-prefix"), "/v1/"),
		chromedp.Click(cardSel(v.ID, ".approve-grant")),
	)
	select {
	case r := <-done:
		if r.err != nil || !r.out.Approved() || r.out.DecidedBy != "p" {
			t.Fatalf("the held request: %+v %v", r.out, r.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the held request was not answered")
	}
	// The held request is let go when the approval is resolved; the grant
	// is recorded right after, before the page is answered.
	var r resp
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if r = e.do("GET", "/v1/grants?session_id=eg", approverTok, nil); strings.Contains(string(r.raw), `"kind":"egress"`) {
			break
		}
	}
	if !strings.Contains(string(r.raw), `"path_prefix":"/v1/"`) || !strings.Contains(string(r.raw), `"method":"POST"`) ||
		!strings.Contains(string(r.raw), `"kind":"egress"`) {
		t.Fatalf("grants: %s", r.raw)
	}
	b.do("the grant is listed", chromedp.WaitVisible(chromedp.CSS(`#grants li.grant .revoke`)))
	if g := eval[string](b, `document.querySelector('#grants li.grant').textContent`); !strings.Contains(g, "POST api.example.org:443 under /v1/") {
		t.Errorf("grant on the page: %q", g)
	}
	if errs := b.pageErrors(); len(errs) > 0 {
		t.Fatalf("page errors: %v", errs)
	}
}
