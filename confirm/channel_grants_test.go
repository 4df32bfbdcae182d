package confirm

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sandgate/sandgate/confirm/slacktest"
	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/policy"
)

// TestSlackGrantForTheSession: with grants, a run's Slack message offers
// the page's grants; "Approve for this session, 30 min" approves it and
// gives the grant, so the session's next identical request is answered
// by the grant without a message.
func TestSlackGrantForTheSession(t *testing.T) {
	sl := slacktest.New(t)
	db := openTestDB(t)
	eng, err := policy.New(context.Background(), policy.Options{EvalTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	g, err := OpenGrants(context.Background(), GrantOptions{Store: db, Policy: EngineGrants(eng, "PERMISSIVE")})
	if err != nil {
		t.Fatal(err)
	}
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

	a := confirmAsync(context.Background(), th.Hub, request("s1", "import subprocess\n"))
	v := waitPending(t, th.Hub, 1)[0]
	m := e.posted(t, v.ID)
	if _, _, ok := m.Button("approve_pattern"); !ok {
		t.Errorf("no pattern grant button: %s", blocksText(m))
	}
	if st, err := sl.Send(cb.URL, slacktest.Click{UserID: "U0ALICE", ActionID: "approve_session", Message: m}); err != nil || st != 200 {
		t.Fatalf("%d %v", st, err)
	}
	if out := a.wait(t); !out.Approved() || out.DecidedBy != "alice" {
		t.Fatalf("%+v", out)
	}
	e.updated(t, m.TS, "Approved for the session by alice")
	live, err := g.List(context.Background(), Approver{}, GrantQuery{SessionID: "s1", Live: true})
	if err != nil || len(live) != 1 || live[0].CreatedBy != "alice" || live[0].ExpiresAt.Sub(live[0].CreatedAt) != SessionGrantFor {
		t.Fatalf("grants %+v %v", live, err)
	}
	out, err := th.Confirm(context.Background(), request("s1", "import subprocess\n"))
	if err != nil || out.ApprovalID != live[0].ID {
		t.Fatalf("second request: %+v %v", out, err)
	}
	if n := len(sl.Messages()); n != 1 {
		t.Errorf("%d messages; the grant's request was posted", n)
	}
}
