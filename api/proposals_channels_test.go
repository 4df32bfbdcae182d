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

// slackProposalEnv is an approval gateway with proposals and a Slack
// channel (alice mapped) on the stand-in Slack.
func slackProposalEnv(t *testing.T) (*approvalEnv, *slacktest.Server) {
	sl := slacktest.New(t)
	e := newApprovalEnv(t, approvalOpts{timeout: 30 * time.Second, grants: true, proposals: true,
		channels: func(st audit.Store) []confirm.Channel {
			sc, err := confirm.NewSlack(confirm.SlackOptions{Name: "slack", APIURL: sl.APIURL(), BotToken: confirm.Secret(sl.Token),
				SigningSecret: confirm.Secret(sl.SigningSecret), Channel: sl.Channels[0], Users: map[string]string{"U0ALICE": "alice"},
				Route: confirm.Route{RiskLevels: []string{"HIGH", "CRITICAL"}}, Audit: st, PageURL: "http://gateway.invalid"})
			if err != nil {
				t.Fatal(err)
			}
			return []confirm.Channel{sc}
		}})
	return e, sl
}

// proposeHost makes an egress_host proposal for session and returns its id.
func proposeHost(t *testing.T, e *approvalEnv, session, host string) string {
	t.Helper()
	r := e.do("POST", "/v1/sessions/"+session+"/proposals", agentTok, map[string]any{"kind": "egress_host", "value": host,
		"justification": "the task downloads its dataset from " + host})
	if r.status != 201 {
		t.Fatalf("propose: %d %s", r.status, r.raw)
	}
	return r.body["id"].(string)
}

// waitMessage waits for the stand-in Slack's message whose text holds
// want and for which cond holds.
func waitMessage(t *testing.T, sl *slacktest.Server, what, want string, cond func(slacktest.Message) bool) slacktest.Message {
	t.Helper()
	var m slacktest.Message
	sl.Wait(t, 10*time.Second, what, func(ms []slacktest.Message) bool {
		for _, x := range ms {
			if strings.Contains(x.Text, want) && cond(x) {
				m = x
				return true
			}
		}
		return false
	})
	return m
}

// TestProposalInSlack: a new proposal is posted to Slack with its effect
// and Accept and Reject buttons; clicks with a bad signature, a stale
// timestamp or from an unmapped user are refused (401, 401, 403) and
// leave it pending; a signed click from a mapped user accepts it (the
// agent reads accepted, by alice), the message is rewritten without its
// buttons, a replayed click changes nothing and is audited, and a
// revocation through the API rewrites the message again. Another proposal
// is rejected from Slack.
func TestProposalInSlack(t *testing.T) {
	e, sl := slackProposalEnv(t)
	callback := e.srv.URL + "/v1/channels/slack/callback"
	id := proposeHost(t, e, "ps-1", "data.example.com")
	m := waitMessage(t, sl, "the post", "data.example.com", func(m slacktest.Message) bool { return true })
	if _, _, ok := m.Button("proposal_accept"); !ok || !strings.Contains(m.Text, "ps-1") {
		t.Fatalf("message %q %v", m.Text, m.Blocks)
	}
	blocks, _ := json.Marshal(m.Blocks)
	if !strings.Contains(string(blocks), "Effect") || !strings.Contains(string(blocks), "the task downloads its dataset") ||
		!strings.Contains(string(blocks), "http://gateway.invalid/#proposal="+id) {
		t.Errorf("blocks: %s", blocks)
	}
	for _, tc := range []struct {
		name   string
		click  slacktest.Click
		status int
	}{
		{"bad signature", slacktest.Click{UserID: "U0ALICE", ActionID: "proposal_accept", BadSignature: true}, 401},
		{"stale", slacktest.Click{UserID: "U0ALICE", ActionID: "proposal_accept", At: time.Now().Add(-10 * time.Minute)}, 401},
		{"unmapped", slacktest.Click{UserID: "U0EVE", ActionID: "proposal_accept"}, 403},
	} {
		tc.click.Message = m
		if st, err := sl.Send(callback, tc.click); err != nil || st != tc.status {
			t.Fatalf("%s: %d %v, want %d", tc.name, st, err, tc.status)
		}
	}
	own := func(id string) map[string]any {
		return e.do("GET", "/v1/sessions/ps-1/proposals/"+id, agentTok, nil).body
	}
	if p := own(id); p["status"] != "pending" {
		t.Fatalf("a refused click decided the proposal: %v", p)
	}
	click := slacktest.Click{UserID: "U0ALICE", ActionID: "proposal_accept", Message: m}
	if st, err := sl.Send(callback, click); err != nil || st != 200 {
		t.Fatalf("click: %d %v", st, err)
	}
	if p := own(id); p["status"] != "accepted" || p["decided_by"] != "alice" {
		t.Fatalf("after the click: %v", p)
	}
	noButtons := func(m slacktest.Message) bool { _, _, b := m.Button("proposal_accept"); return m.Updates > 0 && !b }
	waitMessage(t, sl, "the update", "accepted by alice", noButtons)
	if st, err := sl.Send(callback, click); err != nil || st != 200 {
		t.Fatalf("replay: %d %v", st, err)
	}
	if r := e.do("DELETE", "/v1/proposals/"+id, approverTok, nil); r.status != 200 {
		t.Fatalf("revoke: %d %s", r.status, r.raw)
	}
	waitMessage(t, sl, "the revocation", "revoked by p", noButtons)

	other := proposeHost(t, e, "ps-1", "mirror.example.com")
	m2 := waitMessage(t, sl, "the second post", "mirror.example.com", func(m slacktest.Message) bool { return true })
	if st, err := sl.Send(callback, slacktest.Click{UserID: "U0ALICE", ActionID: "proposal_reject", Message: m2}); err != nil || st != 200 {
		t.Fatalf("reject click: %d %v", st, err)
	}
	if p := own(other); p["status"] != "rejected" || p["decided_by"] != "alice" {
		t.Fatalf("after the reject click: %v", p)
	}
	waitMessage(t, sl, "the rejection", "rejected by alice", noButtons)

	page, err := e.audit.Query(context.Background(), audit.Query{Kind: "proposal.callback"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, rec := range page.Records {
		got = append(got, rec.Outcome+":"+rec.ErrorCode+":"+rec.Principal+":"+rec.Detail["proposal_id"])
	}
	want := []string{"ok::alice:" + other, "denied:conflict:alice:" + id, "ok::alice:" + id, "denied:forbidden:slack:U0EVE:" + id}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("audit (newest first):\n got %v\nwant %v", got, want)
	}
	// The unverified clicks are refused before anything of them is read.
	page, err = e.audit.Query(context.Background(), audit.Query{Kind: "approval.callback"})
	if err != nil || len(page.Records) != 2 || page.Records[0].ErrorCode != "unauthorized" {
		t.Errorf("unverified clicks: %v %+v", err, page.Records)
	}
}

// TestProposalWebhook: the webhook channel's signed requests tell of a
// new proposal, with its effect and a link to this gateway's page naming
// it, and of its decision there.
func TestProposalWebhook(t *testing.T) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	var (
		mu  sync.Mutex
		got []map[string]any
		ids []string
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
		got, ids = append(got, p), append(ids, r.Header.Get("webhook-id"))
		mu.Unlock()
	}))
	t.Cleanup(recv.Close)
	e := newApprovalEnv(t, approvalOpts{timeout: 30 * time.Second, grants: true, proposals: true,
		channels: func(audit.Store) []confirm.Channel {
			ch, err := confirm.NewWebhook(confirm.WebhookOptions{Name: "hook", URL: recv.URL, Secret: secret,
				PageURL: "http://gateway.invalid"})
			if err != nil {
				t.Fatal(err)
			}
			return []confirm.Channel{ch}
		}})
	wait := func(n int) []map[string]any {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			mu.Lock()
			out := append([]map[string]any(nil), got...)
			mu.Unlock()
			if len(out) >= n {
				return out
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Fatalf("%d webhook requests, want %d", len(got), n)
		return nil
	}
	id := proposeHost(t, e, "pw-1", "data.example.com")
	first := wait(1)[0]
	data := obj(first["data"])
	p := obj(data["proposal"])
	if first["type"] != "proposal.requested" || p["id"] != id || p["value"] != "data.example.com" || p["effect"] == nil ||
		data["decision_url"] != "http://gateway.invalid/#proposal="+id {
		t.Fatalf("requested: %v", first)
	}
	if res := e.do("POST", "/v1/proposals/"+id+"/decision", approverTok, map[string]any{"decision": "accept"}); res.status != 200 {
		t.Fatalf("decide: %d %s", res.status, res.raw)
	}
	second := wait(2)[1]
	if second["type"] != "proposal.accepted" || obj(obj(second["data"])["proposal"])["decided_by"] != "p" {
		t.Fatalf("decided: %v", second)
	}
	mu.Lock()
	defer mu.Unlock()
	if ids[0] != id+".requested" || ids[1] != id+".accepted" {
		t.Errorf("webhook ids %v", ids)
	}
}
