package confirm

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sandgate/sandgate/confirm/slacktest"
	"github.com/sandgate/sandgate/errcode"
)

// TestSlackEgressGrant: with grants, a held egress request's Slack
// message offers "POST under <path>, this session, 30 min"; the click
// approves it and gives the grant, so the session's next POST beneath the
// path is answered by the grant without a message.
func TestSlackEgressGrant(t *testing.T) {
	sl := slacktest.New(t)
	g, db := newEgressGrants(t)
	ch, err := NewSlack(SlackOptions{Name: "slack-ops", APIURL: sl.APIURL(), BotToken: Secret(sl.Token), SigningSecret: Secret(sl.SigningSecret),
		Channel: sl.Channels[0], TeamID: sl.TeamID, Users: map[string]string{"U0ALICE": "alice"}, Audit: db, Grants: true})
	if err != nil {
		t.Fatal(err)
	}
	th := newTestHub(t, HubOptions{Store: db, Channels: []Channel{ch}, Grants: g})
	cb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := th.ServeCallback(w, r, "slack-ops"); err != nil {
			_, status, _ := errcode.Of(err)
			http.Error(w, err.Error(), status)
		}
	}))
	t.Cleanup(cb.Close)
	e := &slackEnv{th: th, slack: sl, ch: ch, cb: cb}

	a := confirmAsync(context.Background(), th.Hub, heldRequest("s1", "POST", "/v1/items"))
	v := waitPending(t, th.Hub, 1)[0]
	m := e.posted(t, v.ID)
	_, button, ok := m.Button("approve_grant")
	if text, _ := button["text"].(map[string]any); !ok || text["text"] != "POST under /v1/items, this session, 30 min" {
		t.Fatalf("grant button %v %v: %s", button, ok, blocksText(m))
	}
	if st, err := sl.Send(cb.URL, slacktest.Click{UserID: "U0ALICE", ActionID: "approve_grant", Message: m}); err != nil || st != 200 {
		t.Fatalf("%d %v", st, err)
	}
	if out := a.wait(t); !out.Approved() || out.DecidedBy != "alice" {
		t.Fatalf("%+v", out)
	}
	live, err := g.List(context.Background(), Approver{}, GrantQuery{SessionID: "s1", Live: true})
	if err != nil || len(live) != 1 || live[0].Kind != KindEgress || live[0].PathPrefix != "/v1/items" ||
		live[0].ExpiresAt.Sub(live[0].CreatedAt) != SessionGrantFor {
		t.Fatalf("grants %+v %v", live, err)
	}
	out, err := th.Confirm(context.Background(), heldRequest("s1", "POST", "/v1/items/9"))
	if err != nil || out.ApprovalID != live[0].ID {
		t.Fatalf("second request: %+v %v", out, err)
	}
	if n := len(sl.Messages()); n != 1 {
		t.Errorf("%d messages; the grant's request was posted", n)
	}
}
