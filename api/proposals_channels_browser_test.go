package api

import (
	"encoding/json"
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

// TestProposalWebhookLinkInBrowser: the webhook channel's decision link
// for a proposal opens the page with that proposal marked (another
// pending one is not) and its reason field focused; the approver types a
// reason and presses Enter, which accepts it, and the webhook hears of
// the acceptance.
func TestProposalWebhookLinkInBrowser(t *testing.T) {
	b := newBrowser(t)
	var (
		mu  sync.Mutex
		got []map[string]any
	)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var p map[string]any
		_ = json.Unmarshal(body, &p)
		mu.Lock()
		got = append(got, p)
		mu.Unlock()
	}))
	t.Cleanup(recv.Close)
	const page = "http://gateway.invalid"
	e := newApprovalEnv(t, approvalOpts{timeout: time.Minute, grants: true, proposals: true,
		channels: func(audit.Store) []confirm.Channel {
			ch, err := confirm.NewWebhook(confirm.WebhookOptions{Name: "hook", URL: recv.URL,
				Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", PageURL: page})
			if err != nil {
				t.Fatal(err)
			}
			return []confirm.Channel{ch}
		}})
	other := proposeHost(t, e, "pl-1", "other.example.com")
	id := proposeHost(t, e, "pl-1", "data.example.com")
	link := ""
	deadline := time.Now().Add(10 * time.Second)
	for link == "" && time.Now().Before(deadline) {
		mu.Lock()
		for _, p := range got {
			if d := obj(p["data"]); obj(d["proposal"])["id"] == id {
				link, _ = d["decision_url"].(string)
			}
		}
		mu.Unlock()
		time.Sleep(5 * time.Millisecond)
	}
	frag, ok := strings.CutPrefix(link, page+"/")
	if !ok || frag != "#proposal="+id {
		t.Fatalf("decision_url %q", link)
	}
	b.do("open the link",
		chromedp.EmulateViewport(1400, 900),
		chromedp.Navigate(e.srv.URL+"/?token="+approverTok+frag),
		chromedp.WaitVisible(chromedp.CSS(`#proposals li.proposal.linked[data-id="`+id+`"]`)),
	)
	if n := eval[float64](b, `document.querySelectorAll('#proposals li.proposal.linked').length`); n != 1 {
		t.Errorf("%v proposals marked, want 1", n)
	}
	if got := eval[string](b, `document.activeElement.closest('li.proposal') ? document.activeElement.closest('li.proposal').dataset.id : ''`); got != id {
		t.Errorf("focus is in %q, want the linked proposal's reason", got)
	}
	b.do("accept with a reason",
		chromedp.SendKeys(chromedp.CSS(`#proposals li.proposal.linked .reason-input`), "the dataset is public\r"),
		chromedp.WaitNotPresent(chromedp.CSS(`#proposals li.proposal[data-id="`+id+`"]`)),
	)
	if r := e.do("GET", "/v1/proposals/"+id, approverTok, nil); r.body["status"] != "accepted" || r.body["reason"] != "the dataset is public" {
		t.Errorf("proposal after the page: %s", r.raw)
	}
	if r := e.do("GET", "/v1/proposals/"+other, approverTok, nil); r.body["status"] != "pending" {
		t.Errorf("the other proposal: %s", r.raw)
	}
	deadline = time.Now().Add(10 * time.Second)
	for accepted := false; !accepted; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the webhook was not told of the acceptance")
		}
		mu.Lock()
		for _, p := range got {
			accepted = accepted || p["type"] == "proposal.accepted" && obj(obj(p["data"])["proposal"])["id"] == id
		}
		mu.Unlock()
	}
	if errs := b.pageErrors(); len(errs) > 0 {
		t.Fatalf("page errors: %v", errs)
	}
}
