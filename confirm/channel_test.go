package confirm

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/confirm/slacktest"
	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/internal/pgtest"
)

// slackEnv is a hub with a Slack channel talking to the stand-in, and the
// channel's callback route behind a real listener.
type slackEnv struct {
	th    *testHub
	slack *slacktest.Server
	ch    *Slack
	cb    *httptest.Server
}

func newSlackEnv(t testing.TB, route Route) *slackEnv {
	t.Helper()
	sl := slacktest.New(t) // first: closed after the hub, which updates messages when it closes
	db := openTestDB(t)
	ch, err := NewSlack(SlackOptions{
		Name: "slack-ops", Route: route, APIURL: sl.APIURL(), BotToken: Secret(sl.Token), SigningSecret: Secret(sl.SigningSecret),
		Channel: sl.Channels[0], TeamID: sl.TeamID, Users: map[string]string{"U0ALICE": "alice"},
		PageURL: "https://gate.example.com", Audit: db,
	})
	if err != nil {
		t.Fatal(err)
	}
	th := newTestHub(t, HubOptions{Store: db, Channels: []Channel{ch}, ChannelRetryMin: 5 * time.Millisecond, ChannelRetryMax: 50 * time.Millisecond})
	cb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := th.ServeCallback(w, r, "slack-ops"); err != nil {
			_, status, _ := errcode.Of(err)
			http.Error(w, err.Error(), status)
		}
	}))
	t.Cleanup(cb.Close)
	return &slackEnv{th: th, slack: sl, ch: ch, cb: cb}
}

// posted waits for the message of approval id.
func (e *slackEnv) posted(t testing.TB, id string) slacktest.Message {
	t.Helper()
	var out slacktest.Message
	e.slack.Wait(t, 10*time.Second, "the message of "+id, func(ms []slacktest.Message) bool {
		for _, m := range ms {
			if _, b, ok := m.Button("approve"); ok && strings.HasPrefix(b["value"].(string), id+" ") {
				out = m
				return true
			}
		}
		return false
	})
	return out
}

// updated waits until the message ts says want in its header.
func (e *slackEnv) updated(t *testing.T, ts, want string) slacktest.Message {
	t.Helper()
	var out slacktest.Message
	e.slack.Wait(t, 10*time.Second, "the update of "+ts+" to "+want, func(ms []slacktest.Message) bool {
		for _, m := range ms {
			if m.TS == ts && m.Updates > 0 && strings.Contains(headerOf(m), want) {
				out = m
				return true
			}
		}
		return false
	})
	return out
}

func headerOf(m slacktest.Message) string {
	for _, b := range m.Blocks {
		if b["type"] == "header" {
			return b["text"].(map[string]any)["text"].(string)
		}
	}
	return ""
}

func blocksText(m slacktest.Message) string {
	b, _ := json.Marshal(m.Blocks)
	return string(b)
}

func callbacks(t *testing.T, db audit.Database) []audit.Record {
	t.Helper()
	page, err := db.Query(context.Background(), audit.Query{Kind: "approval.callback"})
	if err != nil {
		t.Fatal(err)
	}
	return page.Records
}

// TestSlackApproveFlow: a held request is posted as a Block Kit message
// (the token as bearer, the code's first lines, the patterns, the session
// context, Approve and Deny bound to the digest); a badly signed, a stale
// and an unmapped user's click are refused and audited and change
// nothing; a mapped user's click approves; a replay of it is refused
// (answered 200) and audited; the message is rewritten without buttons.
func TestSlackApproveFlow(t *testing.T) {
	e := newSlackEnv(t, Route{})
	code := "import subprocess\n" + strings.Repeat("x = 1\n", 40) + "subprocess.run(['id'])\n"
	req := request("s1", code)
	req.Tenant = "team-a"
	a := confirmAsync(context.Background(), e.th.Hub, req)
	v := waitPending(t, e.th.Hub, 1)[0]
	m := e.posted(t, v.ID)

	calls := e.slack.Calls()
	if c := calls[0]; c.Method != "chat.postMessage" || c.Authorization != "Bearer "+e.slack.Token ||
		c.ContentType != "application/json; charset=utf-8" || c.Answer != "ok" {
		t.Fatalf("first call: %+v", c)
	}
	txt := blocksText(m)
	for _, want := range []string{"import subprocess", "runs a subprocess", "py.subprocess", "team-a", "s1", "agent-1",
		"HIGH risk needs approval", "https://gate.example.com/#approval=" + v.ID, "first lines only"} {
		if !strings.Contains(txt, want) {
			t.Errorf("message lacks %q: %s", want, txt)
		}
	}
	if strings.Contains(txt, "subprocess.run(['id'])") {
		t.Error("the message carries the whole code, not an excerpt")
	}
	if _, b, _ := m.Button("deny"); b["value"] != v.ID+" "+v.Digest {
		t.Errorf("deny value %v, want the id and the digest", b["value"])
	}

	for _, tc := range []struct {
		name   string
		click  slacktest.Click
		status int
		code   string
	}{
		{"bad signature", slacktest.Click{UserID: "U0ALICE", ActionID: "approve", BadSignature: true}, 401, "unauthorized"},
		{"wrong secret", slacktest.Click{UserID: "U0ALICE", ActionID: "approve", Secret: "not-the-secret"}, 401, "unauthorized"},
		{"stale", slacktest.Click{UserID: "U0ALICE", ActionID: "approve", At: time.Now().Add(-6 * time.Minute)}, 401, "unauthorized"},
		{"future", slacktest.Click{UserID: "U0ALICE", ActionID: "approve", At: time.Now().Add(6 * time.Minute)}, 401, "unauthorized"},
		{"unmapped user", slacktest.Click{UserID: "U0MALLORY", ActionID: "approve"}, 403, "forbidden"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.click.Message = m
			st, err := e.slack.Send(e.cb.URL, tc.click)
			if err != nil || st != tc.status {
				t.Fatalf("status %d (%v), want %d", st, err, tc.status)
			}
			if p := e.th.Pending(); len(p) != 1 {
				t.Fatalf("the refused click decided: %d pending", len(p))
			}
			recs := callbacks(t, e.th.db)
			if len(recs) == 0 || recs[0].Outcome != audit.OutcomeDenied || recs[0].ErrorCode != tc.code {
				t.Fatalf("audit: %+v", recs)
			}
		})
	}
	if r := callbacks(t, e.th.db)[0]; r.Principal != "slack:U0MALLORY" || r.Detail["slack_user"] != "U0MALLORY" || r.Tenant != "team-a" ||
		r.Approval == nil || r.Approval.ID != v.ID {
		t.Errorf("unmapped user's record: %+v", r)
	}

	click := slacktest.Click{UserID: "U0ALICE", ActionID: "approve", Message: m}
	if st, err := e.slack.Send(e.cb.URL, click); err != nil || st != 200 {
		t.Fatalf("mapped click: %d %v", st, err)
	}
	out := a.wait(t)
	if !out.Approved() || out.DecidedBy != "alice" {
		t.Fatalf("outcome %+v", out)
	}
	if r := callbacks(t, e.th.db)[0]; r.Outcome != audit.OutcomeOK || r.Principal != "alice" || r.Approval.Status != StatusApproved {
		t.Errorf("decision record: %+v", r)
	}
	up := e.updated(t, m.TS, "Approved by alice")
	if _, _, ok := up.Button("approve"); ok {
		t.Error("the updated message still has buttons")
	}

	// A replay within the window (or a double click) changes nothing.
	if st, err := e.slack.Send(e.cb.URL, click); err != nil || st != 200 {
		t.Fatalf("replay: %d %v", st, err)
	}
	if r := callbacks(t, e.th.db)[0]; r.Outcome != audit.OutcomeDenied || r.ErrorCode != "conflict" || r.Approval.DecidedBy != "alice" {
		t.Errorf("replay record: %+v", r)
	}
	for _, c := range e.slack.Calls() {
		if c.Answer != "ok" {
			t.Errorf("call %s answered %s", c.Method, c.Answer)
		}
	}
}

// TestSlackUpdatedWhenDecidedElsewhere: a decision on the page, a deny in
// Slack, and the timeout each rewrite the message.
func TestSlackUpdatedWhenDecidedElsewhere(t *testing.T) {
	e := newSlackEnv(t, Route{})
	for _, tc := range []struct {
		name   string
		decide func(v View, m slacktest.Message)
		header string
		status string
	}{
		{"page", func(v View, _ slacktest.Message) {
			if _, err := e.th.Decide(context.Background(), v.ID, Approver{Name: "bob"}, Decision{Decision: "deny", Reason: "no"}); err != nil {
				t.Fatal(err)
			}
		}, "Denied by bob", StatusDenied},
		{"slack deny", func(_ View, m slacktest.Message) {
			if st, err := e.slack.Send(e.cb.URL, slacktest.Click{UserID: "U0ALICE", ActionID: "deny", Message: m}); err != nil || st != 200 {
				t.Fatalf("%d %v", st, err)
			}
		}, "Denied by alice", StatusDenied},
		{"timeout", func(View, slacktest.Message) {}, "Timed out", StatusTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := request("s-"+strings.ReplaceAll(tc.name, " ", "-"), "import os\nos.system('id')\n")
			if tc.status == StatusTimeout {
				req.Deadline = time.Now().Add(300 * time.Millisecond)
			}
			a := confirmAsync(context.Background(), e.th.Hub, req)
			v := waitPending(t, e.th.Hub, 1)[0]
			m := e.posted(t, v.ID)
			tc.decide(v, m)
			if out := a.wait(t); out.Status != tc.status {
				t.Fatalf("status %s, want %s", out.Status, tc.status)
			}
			e.updated(t, m.TS, tc.header)
		})
	}
}

// TestSlackRoutes: a channel hears only the tenants and risk levels routed
// to it, and its users decide only those tenants' requests.
func TestSlackRoutes(t *testing.T) {
	e := newSlackEnv(t, Route{Tenants: []string{"team-a"}, RiskLevels: []string{"critical"}})
	other := request("s-b", "import os\n")
	other.Tenant, other.RiskLevel = "team-b", "CRITICAL"
	high := request("s-high", "import os\n")
	high.Tenant = "team-a"
	mine := request("s-mine", "import os\n")
	mine.Tenant, mine.RiskLevel = "team-a", "CRITICAL"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, r := range []Request{other, high, mine} {
		confirmAsync(ctx, e.th.Hub, r)
	}
	waitPending(t, e.th.Hub, 3)
	e.slack.Wait(t, 10*time.Second, "one message", func(ms []slacktest.Message) bool { return len(ms) >= 1 })
	time.Sleep(100 * time.Millisecond) // the others, if they were (wrongly) routed, would arrive now
	ms := e.slack.Messages()
	if len(ms) != 1 || !strings.Contains(blocksText(ms[0]), "s-mine") {
		t.Fatalf("messages: %d, first %s", len(ms), blocksText(ms[0]))
	}
	if got := e.ch.opts.Route.Approver("alice"); len(got.Tenants) != 1 || got.Tenants[0] != "team-a" {
		t.Errorf("approver %+v", got)
	}
}

func TestRouteMatch(t *testing.T) {
	v := View{Tenant: "team-a", RiskLevel: "HIGH"}
	for _, tc := range []struct {
		r    Route
		want bool
	}{
		{Route{}, true},
		{Route{Tenants: []string{"team-a"}}, true},
		{Route{Tenants: []string{"team-b"}}, false},
		{Route{RiskLevels: []string{"high"}}, true},
		{Route{RiskLevels: []string{"CRITICAL"}}, false},
		{Route{Tenants: []string{"team-b", "team-a"}, RiskLevels: []string{"CRITICAL", "HIGH"}}, true},
	} {
		if got := tc.r.Match(v); got != tc.want {
			t.Errorf("%+v: %v, want %v", tc.r, got, tc.want)
		}
	}
}

// TestSlackFailuresNeverBlock: Slack failing (5xx, rate limited, transient
// errors) is retried with backoff until the post goes through; a
// permanent error is not retried; and while Slack is down the request is
// decided on the page and times out as usual.
func TestSlackFailuresNeverBlock(t *testing.T) {
	t.Run("retried", func(t *testing.T) {
		e := newSlackEnv(t, Route{})
		e.slack.FailNext(slacktest.Failure{Status: 503}, slacktest.Failure{Error: "internal_error"}, slacktest.Failure{Status: 429})
		a := confirmAsync(context.Background(), e.th.Hub, request("s1", "import os\n"))
		v := waitPending(t, e.th.Hub, 1)[0]
		e.posted(t, v.ID)
		if n := len(e.slack.Calls()); n != 4 {
			t.Errorf("%d calls, want 3 failures and the post", n)
		}
		if _, err := e.th.Decide(context.Background(), v.ID, Approver{Name: "bob"}, Decision{Decision: "approve"}); err != nil {
			t.Fatal(err)
		}
		a.wait(t)
	})
	t.Run("permanent", func(t *testing.T) {
		e := newSlackEnv(t, Route{})
		e.slack.FailNext(slacktest.Failure{Error: "invalid_auth"})
		req := request("s1", "import os\n")
		req.Deadline = time.Now().Add(300 * time.Millisecond)
		a := confirmAsync(context.Background(), e.th.Hub, req)
		if out := a.wait(t); out.Status != StatusTimeout {
			t.Fatalf("status %s", out.Status)
		}
		time.Sleep(50 * time.Millisecond)
		if n := len(e.slack.Calls()); n != 1 {
			t.Errorf("%d calls, want 1 (invalid_auth is not retried)", n)
		}
	})
	t.Run("down", func(t *testing.T) {
		e := newSlackEnv(t, Route{})
		fails := make([]slacktest.Failure, 1000)
		for i := range fails {
			fails[i] = slacktest.Failure{Status: 500}
		}
		e.slack.FailNext(fails...)
		a := confirmAsync(context.Background(), e.th.Hub, request("s1", "import os\n"))
		v := waitPending(t, e.th.Hub, 1)[0]
		if _, err := e.th.Decide(context.Background(), v.ID, Approver{Name: "bob"}, Decision{Decision: "approve"}); err != nil {
			t.Fatal(err)
		}
		if out := a.wait(t); !out.Approved() {
			t.Fatalf("%+v", out)
		}
		if len(e.slack.Messages()) != 0 {
			t.Error("a message was posted while Slack was down")
		}
	})
}

func TestSlackRejectsMalformedPayloads(t *testing.T) {
	e := newSlackEnv(t, Route{})
	post := func(body string) int {
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		req, _ := http.NewRequest("POST", e.cb.URL, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-Slack-Request-Timestamp", ts)
		req.Header.Set("X-Slack-Signature", slacktest.Sign(e.slack.SigningSecret, ts, []byte(body)))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	for _, body := range []string{"", "payload=", "payload=%7B%22type%22%3A%22view_submission%22%7D", "payload=%7B%22type%22%3A%22block_actions%22%7D"} {
		if st := post(body); st != 400 {
			t.Errorf("%q: %d, want 400", body, st)
		}
	}
	if err := e.th.ServeCallback(httptest.NewRecorder(), httptest.NewRequest("POST", "/", nil), "nope"); err != ErrNoChannel {
		t.Errorf("unknown channel: %v", err)
	}
}

func TestSlackSignatureMatchesSlacksExample(t *testing.T) {
	// The worked example of Slack's "Verifying requests from Slack".
	secret := "8f742231b10e8888abcd99yyyzzz85a5"
	body := "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
	want := "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
	if got := SlackSignature([]byte(secret), "1531420618", []byte(body)); got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	if got := slacktest.Sign(secret, "1531420618", []byte(body)); got != want {
		t.Fatalf("slacktest: got %s, want %s", got, want)
	}
}

func TestSecretNeverPrints(t *testing.T) {
	s := Secret("xoxb-very-secret")
	for _, got := range []string{s.String(), s.GoString(), s.LogValue().String()} {
		if strings.Contains(got, "very-secret") {
			t.Errorf("printed %q", got)
		}
	}
}

func TestExcerpt(t *testing.T) {
	long := strings.Repeat("a", 3000)
	for _, tc := range []struct {
		code, want string
		cut        bool
	}{
		{"", "", false},
		{"print(1)\n", "print(1)", false},
		{strings.Repeat("x\n", 20), strings.TrimSuffix(strings.Repeat("x\n", 20), "\n"), false},
		{strings.Repeat("x\n", 21), strings.TrimSuffix(strings.Repeat("x\n", 20), "\n"), true},
		{long, long[:2000], true},
		{strings.Repeat("é", 1500), strings.Repeat("é", 1000), true},
	} {
		got, cut := Excerpt(tc.code)
		if got != tc.want || cut != tc.cut {
			t.Errorf("Excerpt(%.20q...) = %.20q..., %v; want %.20q..., %v", tc.code, got, cut, tc.want, tc.cut)
		}
	}
}

// webhookReceiver verifies Standard Webhooks signatures on its own (not
// with the gateway's code) and keeps what it accepted.
type webhookReceiver struct {
	t       *testing.T
	key     []byte
	srv     *httptest.Server
	mu      sync.Mutex
	got     []WebhookPayload
	ids     []string
	refused int
	fail    int // answer 500 to this many first deliveries
}

func newWebhookReceiver(t *testing.T, secret string) *webhookReceiver {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		t.Fatal(err)
	}
	wr := &webhookReceiver{t: t, key: key}
	wr.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		id, ts := r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp")
		mac := hmac.New(sha256.New, wr.key)
		mac.Write([]byte(id + "." + ts + "." + string(body)))
		want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
		sec, _ := strconv.ParseInt(ts, 10, 64)
		ok := false
		for _, sig := range strings.Fields(r.Header.Get("webhook-signature")) {
			ok = ok || hmac.Equal([]byte(sig), []byte(want))
		}
		wr.mu.Lock()
		defer wr.mu.Unlock()
		if !ok || time.Since(time.Unix(sec, 0)).Abs() > 5*time.Minute || id == "" {
			wr.refused++
			w.WriteHeader(400)
			return
		}
		if wr.fail > 0 {
			wr.fail--
			w.WriteHeader(500)
			return
		}
		var p WebhookPayload
		if err := json.Unmarshal(body, &p); err != nil {
			w.WriteHeader(400)
			return
		}
		wr.got, wr.ids = append(wr.got, p), append(wr.ids, id)
		w.WriteHeader(204)
	}))
	t.Cleanup(wr.srv.Close)
	return wr
}

func (wr *webhookReceiver) payloads() ([]WebhookPayload, []string, int) {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	return append([]WebhookPayload(nil), wr.got...), append([]string(nil), wr.ids...), wr.refused
}

const testWebhookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// TestWebhookChannel: the held request and its outcome reach a receiver
// that checks Standard Webhooks signatures independently, with an excerpt
// (never the whole code), the link to the page, and one webhook-id per
// message across retries.
func TestWebhookChannel(t *testing.T) {
	wr := newWebhookReceiver(t, testWebhookSecret)
	wr.fail = 2
	ch, err := NewWebhook(WebhookOptions{Name: "hook", URL: wr.srv.URL + "/hook?token=abc", Secret: testWebhookSecret,
		PageURL: "https://gate.example.com/"})
	if err != nil {
		t.Fatal(err)
	}
	th := newTestHub(t, HubOptions{Channels: []Channel{ch}, ChannelRetryMin: 5 * time.Millisecond, ChannelRetryMax: 20 * time.Millisecond})
	code := strings.Repeat("print('hello')\n", 30) + "SECRET_TAIL = 1\n"
	a := confirmAsync(context.Background(), th.Hub, request("s1", code))
	v := waitPending(t, th.Hub, 1)[0]
	waitFor(t, func() bool { p, _, _ := wr.payloads(); return len(p) == 1 })
	if _, err := th.Decide(context.Background(), v.ID, Approver{Name: "bob"}, Decision{Decision: "approve"}); err != nil {
		t.Fatal(err)
	}
	a.wait(t)
	waitFor(t, func() bool { p, _, _ := wr.payloads(); return len(p) == 2 })
	ps, ids, refused := wr.payloads()
	if refused != 0 {
		t.Errorf("%d deliveries failed verification", refused)
	}
	req, res := ps[0], ps[1]
	if req.Type != "approval.requested" || res.Type != "approval.resolved" || ids[0] != v.ID+".requested" || ids[1] != v.ID+".resolved" {
		t.Fatalf("types %s %s ids %v", req.Type, res.Type, ids)
	}
	d := req.Data
	if d.DecisionURL != "https://gate.example.com/#approval="+v.ID || d.Approval.ID != v.ID || d.Approval.Digest != v.Digest ||
		!d.Approval.CodeTruncated || strings.Contains(d.Approval.CodeExcerpt, "SECRET_TAIL") || !strings.HasPrefix(d.Approval.CodeExcerpt, "print('hello')") ||
		len(d.Approval.Patterns) != 1 || d.Approval.Status != StatusPending {
		t.Errorf("requested: %+v", d)
	}
	if a := res.Data.Approval; a.Status != StatusApproved || a.DecidedBy != "bob" || a.CodeExcerpt != "" {
		t.Errorf("resolved: %+v", a)
	}
}

func TestWebhookChannelConfig(t *testing.T) {
	for _, o := range []WebhookOptions{
		{URL: "https://x.example/h", Secret: "nope"},
		{URL: "ftp://x.example/h", Secret: testWebhookSecret},
		{URL: "", Secret: testWebhookSecret},
	} {
		if _, err := NewWebhook(o); err == nil {
			t.Errorf("%+v accepted", o)
		} else if strings.Contains(err.Error(), "MfKQ9r8") {
			t.Errorf("the error quotes the secret: %v", err)
		}
	}
	if _, err := NewSlack(SlackOptions{Name: "s"}); err == nil {
		t.Error("a Slack channel without a token, secret or channel was accepted")
	}
}

func TestEscapeClip(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"a<b>&c", 100, "a&lt;b&gt;&amp;c"},
		{strings.Repeat("<", 10), 12, "&lt;&lt;…"},
		{"héllo", 5, "h…"},
	} {
		if got := escapeClip(tc.in, tc.n); got != tc.want || len(got) > tc.n {
			t.Errorf("escapeClip(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

// TestSlackFleet: on PostgreSQL, the replica holding a request posts it;
// a click reaching another replica decides it there, the holder's waiting
// request is released, and the holder rewrites the message.
func TestSlackFleet(t *testing.T) {
	sl := slacktest.New(t)
	newCh := func() Channel {
		ch, err := NewSlack(SlackOptions{Name: "slack", APIURL: sl.APIURL(), BotToken: Secret(sl.Token), SigningSecret: Secret(sl.SigningSecret),
			Channel: sl.Channels[0], Users: map[string]string{"U0ALICE": "alice"}})
		if err != nil {
			t.Fatal(err)
		}
		return ch
	}
	// One schema, two replicas, each with its own channel (as each
	// gateway builds its own from the same configuration).
	dsn := pgtest.Schema(t)
	var hubs []*Hub
	for _, name := range []string{"a", "b"} {
		db, err := audit.OpenPostgres(t.Context(), dsn, audit.Options{Replica: name})
		if err != nil {
			t.Fatal(err)
		}
		h, err := NewHub(t.Context(), HubOptions{Store: db, Replica: name, ListenDSN: dsn, Channels: []Channel{newCh()},
			ChannelRetryMin: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		hubs = append(hubs, h)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = h.Close(ctx)
			_ = db.Close()
		})
	}
	a, b := hubs[0], hubs[1]
	cb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := b.ServeCallback(w, r, "slack"); err != nil {
			_, status, _ := errcode.Of(err)
			http.Error(w, err.Error(), status)
		}
	}))
	t.Cleanup(cb.Close)
	wait := confirmAsync(t.Context(), a, request("s1", "import subprocess\n"))
	waitPending(t, a, 1)
	var m slacktest.Message
	sl.Wait(t, 10*time.Second, "the post", func(ms []slacktest.Message) bool {
		if len(ms) > 0 {
			m = ms[0]
		}
		return len(ms) == 1
	})
	if st, err := sl.Send(cb.URL, slacktest.Click{UserID: "U0ALICE", ActionID: "approve", Message: m}); err != nil || st != 200 {
		t.Fatalf("click on B: %d %v", st, err)
	}
	if out := wait.wait(t); !out.Approved() || out.DecidedBy != "alice" {
		t.Fatalf("A's outcome %+v", out)
	}
	sl.Wait(t, 10*time.Second, "the update", func(ms []slacktest.Message) bool {
		return ms[0].Updates == 1 && strings.Contains(ms[0].Text, "approved by alice")
	})
	if n := len(sl.Messages()); n != 1 {
		t.Errorf("%d messages for one request", n)
	}
}

// TestSlackEgressForSession: a network request's message names the host
// and offers "Allow for this session", which approves with the session
// scope, as the page's button does.
func TestSlackEgressForSession(t *testing.T) {
	e := newSlackEnv(t, Route{})
	req := Request{Kind: KindEgress, Target: "files.example.org:443", RequestID: "req_e", Tenant: "team-a", SessionID: "s-net",
		RiskLevel: "HIGH", Reasons: []Reason{{Code: "egress.ask", Message: "no rule allows this host"}}, Principal: "agent-1",
		Deadline: time.Now().Add(time.Minute)}
	a := confirmAsync(context.Background(), e.th.Hub, req)
	v := waitPending(t, e.th.Hub, 1)[0]
	m := e.posted(t, v.ID)
	if txt := blocksText(m); !strings.Contains(txt, "files.example.org:443") || !strings.Contains(m.Text, "network request") {
		t.Errorf("message %s / %s", m.Text, txt)
	}
	if st, err := e.slack.Send(e.cb.URL, slacktest.Click{UserID: "U0ALICE", ActionID: "approve_session", Message: m}); err != nil || st != 200 {
		t.Fatalf("%d %v", st, err)
	}
	if out := a.wait(t); !out.Approved() || out.Scope != ScopeSession {
		t.Fatalf("%+v", out)
	}
	e.updated(t, m.TS, "Approved for the session by alice")
}

// TestSlackUpdatedAtShutdown: Close interrupts a pending request and waits
// for the channel to say so before it returns.
func TestSlackUpdatedAtShutdown(t *testing.T) {
	e := newSlackEnv(t, Route{})
	a := confirmAsync(context.Background(), e.th.Hub, request("s1", "import os\n"))
	v := waitPending(t, e.th.Hub, 1)[0]
	m := e.posted(t, v.ID)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.th.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if out := a.wait(t); out.Status != StatusInterrupted {
		t.Fatalf("%+v", out)
	}
	for _, got := range e.slack.Messages() {
		if got.TS == m.TS && (got.Updates != 1 || !strings.Contains(headerOf(got), "Interrupted")) {
			t.Fatalf("after Close: %d updates, header %q", got.Updates, headerOf(got))
		}
	}
}
