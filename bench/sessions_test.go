package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/events"
)

// TestVerifyWebhook checks the receiver's verification against the
// Standard Webhooks reference libraries' example and its variations.
func TestVerifyWebhook(t *testing.T) {
	key, err := base64.StdEncoding.DecodeString("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	const (
		id   = "msg_p5jXN8AQM9LWM0D4loKWxJek"
		ts   = "1614265330"
		body = `{"test": 2432232314}`
		sig  = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	)
	now := time.Unix(1614265330, 0)
	for _, c := range []struct {
		name, id, ts, sig, body string
		now                     time.Time
		ok                      bool
	}{
		{"reference example", id, ts, sig, body, now, true},
		{"one of several signatures", id, ts, "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= " + sig, body, now, true},
		{"another scheme only", id, ts, "v1a,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", body, now, false},
		{"tampered body", id, ts, sig, `{"test": 2432232315}`, now, false},
		{"another id", id + "x", ts, sig, body, now, false},
		{"another timestamp", id, "1614265331", sig, body, now, false},
		{"too old", id, ts, sig, body, now.Add(6 * time.Minute), false},
		{"no signature", id, ts, "", body, now, false},
	} {
		err := verifyWebhook(key, c.id, c.ts, c.sig, []byte(c.body), c.now)
		if (err == nil) != c.ok {
			t.Errorf("%s: verify = %v, want ok %v", c.name, err, c.ok)
		}
	}
}

// TestHookReceiverVerifiesTheLog delivers one run.finished through the
// real event log (SQLite) to the receiver, which must verify it and
// match it to its request id; a delivery signed with another key is
// refused.
func TestHookReceiverVerifiesTheLog(t *testing.T) {
	ctx := context.Background()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	rcv := newHookReceiver(key)
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	db, err := audit.Open(ctx, filepath.Join(t.TempDir(), "audit.db"), audit.Options{Synchronous: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	secret := "whsec_" + base64.StdEncoding.EncodeToString(key)
	l, err := events.Open(ctx, db, events.Config{Webhooks: []events.Webhook{{URL: srv.URL + "/hook", Secret: secret}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Publish(ctx, events.Event{Type: events.RunFinished, Tenant: "t", SessionID: "s",
		Data: []byte(`{"request_id":"req-1","outcome":"success"}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := rcv.wait(ctx, "req-1", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	rcv.mu.Lock()
	bad, total := rcv.bad, rcv.total
	rcv.mu.Unlock()
	if bad != 0 || total != 1 {
		t.Fatalf("bad %d, total %d; want 0 and 1", bad, total)
	}

	other := make([]byte, 32)
	_, _ = rand.Read(other)
	wrong := newHookReceiver(other)
	srv2 := httptest.NewServer(wrong)
	defer srv2.Close()
	l.Close()
	l2, err := events.Open(ctx, db, events.Config{Webhooks: []events.Webhook{{URL: srv2.URL + "/hook", Secret: secret}},
		RetryMin: time.Hour, RetryMax: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if err := l2.Publish(ctx, events.Event{Type: events.RunFinished, Data: []byte(`{"request_id":"req-2"}`)}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		wrong.mu.Lock()
		bad, got := wrong.bad, len(wrong.finished)
		wrong.mu.Unlock()
		if got != 0 {
			t.Fatal("a delivery signed with another key was accepted")
		}
		if bad > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no delivery reached the second receiver")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSessionsReport renders the section and targets from a result set,
// and says "not measured" for the parts that did not run.
func TestSessionsReport(t *testing.T) {
	st := func(p50 float64) stats { return stats{P50: p50, P95: 2 * p50, P99: 3 * p50, N: 300} }
	rep := &report{Unavailable: map[string]string{"sessions-events": "no python3"}, Sessions: &sessionsResult{
		Forward: &abResult{Key: "forward", Name: "GET", Concurrency: 1, Sides: []sideResult{
			{Label: fwdViaLabel, Stats: st(1.2)}, {Label: fwdDirectLabel, Stats: st(0.3)}}},
		Open: &abResult{Key: "open", Name: "open", Concurrency: 1, Sides: []sideResult{
			{Label: openNewLabel, Stats: st(0.6)}, {Label: pointWriteLabel, Stats: st(0.2)},
			{Label: openCachedLabel, Stats: st(0.001)}, {Label: openRecordLabel, Stats: st(0.03)}, {Label: pointReadLabel, Stats: st(0.02)}}},
		OpenSync: "full",
	}}
	ts, lines := sessionsTargets(rep)
	if len(ts) != 3 || len(lines) != 1 {
		t.Fatalf("targets %+v lines %q", ts, lines)
	}
	if !ts[0].Met || !strings.Contains(ts[0].Measured, "+0.90 ms") {
		t.Errorf("forward target: %+v", ts[0])
	}
	if ts[1].Met || !strings.Contains(ts[1].Reason, "600 µs") {
		t.Errorf("open target: %+v", ts[1])
	}
	if !ts[2].Missing || !strings.Contains(ts[2].verdict(), "no python3") {
		t.Errorf("events target: %+v", ts[2])
	}
	md := sessionsMarkdown(rep.Sessions)
	for _, want := range []string{"## Sessions (issue 27)", "### Forwarding to the owner replica", "### Session open",
		"4.00×, +0.900 ms (against " + fwdDirectLabel + ")", "perf/latency-open-c1.svg"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "### Event delivery") {
		t.Error("markdown has an event delivery section without a result")
	}
}
