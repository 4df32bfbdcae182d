package api

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/confirm"
	"github.com/sandgate/sandgate/confirm/slacktest"
)

// TestApprovalSlackChannel: a HIGH request held by a real gateway is
// posted to the stand-in Slack; callbacks to the gateway's route with a
// bad signature, a stale timestamp and an unmapped user are refused (401,
// 401, 403) and audited; a signed click from a mapped user approves it,
// the run returns 200 with the approval by that user, and the message is
// rewritten without its buttons; a replay afterwards changes nothing and
// is audited.
func TestApprovalSlackChannel(t *testing.T) {
	sl := slacktest.New(t)
	var sc *confirm.Slack
	e := newApprovalEnv(t, approvalOpts{timeout: 30 * time.Second,
		channels: func(st audit.Store) []confirm.Channel {
			var err error
			sc, err = confirm.NewSlack(confirm.SlackOptions{Name: "slack", APIURL: sl.APIURL(), BotToken: confirm.Secret(sl.Token),
				SigningSecret: confirm.Secret(sl.SigningSecret), Channel: sl.Channels[0], Users: map[string]string{"U0ALICE": "alice"},
				Route: confirm.Route{RiskLevels: []string{"HIGH", "CRITICAL"}}, Audit: st})
			if err != nil {
				t.Fatal(err)
			}
			return []confirm.Channel{sc}
		}})
	callback := e.srv.URL + "/v1/channels/slack/callback"
	call := e.runAsync("slack-1", highRisk)
	var m slacktest.Message
	sl.Wait(t, 10*time.Second, "the post", func(ms []slacktest.Message) bool {
		if len(ms) == 1 {
			m = ms[0]
		}
		return len(ms) == 1
	})
	if !strings.Contains(m.Text, "slack-1") {
		t.Errorf("text %q", m.Text)
	}

	refusals := []struct {
		name   string
		click  slacktest.Click
		status int
	}{
		{"bad signature", slacktest.Click{UserID: "U0ALICE", ActionID: "approve", BadSignature: true}, 401},
		{"stale", slacktest.Click{UserID: "U0ALICE", ActionID: "approve", At: time.Now().Add(-10 * time.Minute)}, 401},
		{"unmapped", slacktest.Click{UserID: "U0EVE", ActionID: "approve"}, 403},
	}
	for _, tc := range refusals {
		tc.click.Message = m
		if st, err := sl.Send(callback, tc.click); err != nil || st != tc.status {
			t.Fatalf("%s: %d %v, want %d", tc.name, st, err, tc.status)
		}
	}
	if len(e.hub.Pending()) != 1 {
		t.Fatal("a refused callback decided the request")
	}
	click := slacktest.Click{UserID: "U0ALICE", ActionID: "approve", Message: m}
	start := time.Now()
	if st, err := sl.Send(callback, click); err != nil || st != 200 {
		t.Fatalf("click: %d %v", st, err)
	}
	r := call.wait(t)
	t.Logf("callback to the released run: %s", time.Since(start))
	if r.status != 200 || obj(r.body["approval"])["decided_by"] != "alice" || obj(r.body["approval"])["status"] != "approved" {
		t.Fatalf("run: %d %s", r.status, r.raw)
	}
	sl.Wait(t, 10*time.Second, "the update", func(ms []slacktest.Message) bool {
		_, _, buttons := ms[0].Button("approve")
		return ms[0].Updates > 0 && !buttons && strings.Contains(ms[0].Text, "approved by alice")
	})
	if st, err := sl.Send(callback, click); err != nil || st != 200 {
		t.Fatalf("replay: %d %v", st, err)
	}

	page, err := e.audit.Query(context.Background(), audit.Query{Kind: "approval.callback"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, rec := range page.Records {
		got = append(got, rec.Outcome+":"+rec.ErrorCode+":"+rec.Principal)
	}
	want := []string{"denied:conflict:alice", "ok::alice", "denied:forbidden:slack:U0EVE", "denied:unauthorized:", "denied:unauthorized:"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("audit (newest first):\n got %v\nwant %v", got, want)
	}
	for _, c := range sl.Calls() {
		if c.Authorization != "Bearer "+sl.Token || c.Answer != "ok" {
			t.Errorf("call %+v", c)
		}
	}
	// Unknown channels are 404 with the API's error body.
	res := e.do("POST", "/v1/channels/nope/callback", "", nil)
	if res.status != 404 || res.errCode() != "not_found" {
		t.Errorf("unknown channel: %d %s", res.status, res.raw)
	}
}

// TestApprovalWebhookChannelLink: the webhook channel's signed request
// carries a link to this gateway's page naming the approval; the page is
// served there, and the decision it makes (the REST call the page's
// socket equals) releases the run.
func TestApprovalWebhookChannelLink(t *testing.T) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	var (
		mu  sync.Mutex
		got []map[string]any
	)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(r.Header.Get("webhook-id") + "." + r.Header.Get("webhook-timestamp") + "." + string(body)))
		if r.Header.Get("webhook-signature") != "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)) {
			w.WriteHeader(401)
			return
		}
		var p map[string]any
		_ = json.Unmarshal(body, &p)
		mu.Lock()
		got = append(got, p)
		mu.Unlock()
	}))
	t.Cleanup(recv.Close)
	pageURL := ""
	e := newApprovalEnv(t, approvalOpts{timeout: 30 * time.Second, channels: func(audit.Store) []confirm.Channel {
		ch, err := confirm.NewWebhook(confirm.WebhookOptions{Name: "hook", URL: recv.URL, Secret: secret,
			PageURL: "http://gateway.invalid"})
		if err != nil {
			t.Fatal(err)
		}
		return []confirm.Channel{ch}
	}})
	pageURL = "http://gateway.invalid"
	call := e.runAsync("hook-1", highRisk)
	var link string
	deadline := time.Now().Add(10 * time.Second)
	for link == "" && time.Now().Before(deadline) {
		mu.Lock()
		if len(got) > 0 {
			link, _ = obj(got[0]["data"])["decision_url"].(string)
		}
		mu.Unlock()
		time.Sleep(5 * time.Millisecond)
	}
	id := e.hub.Pending()[0].ID
	if link != pageURL+"/#approval="+id {
		t.Fatalf("link %q", link)
	}
	if res := e.do("GET", "/", "", nil); res.status != 200 {
		t.Fatalf("page: %d", res.status)
	}
	if res := e.do("POST", "/v1/approvals/"+id+"/decision", approverTok, map[string]any{"decision": "approve"}); res.status != 200 {
		t.Fatalf("decide: %d %s", res.status, res.raw)
	}
	if r := call.wait(t); r.status != 200 {
		t.Fatalf("run: %d %s", r.status, r.raw)
	}
}
