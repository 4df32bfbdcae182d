package events_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/events"
)

// TestSignatureVectors checks the test's verifier against the
// specification's published example and against tampering, so that the
// receivers' verification proves something.
func TestSignatureVectors(t *testing.T) {
	raw, err := os.ReadFile("testdata/signatures.json")
	if err != nil {
		t.Fatal(err)
	}
	var vectors []struct {
		Name      string `json:"name"`
		Secret    string `json:"secret"`
		ID        string `json:"id"`
		Timestamp string `json:"timestamp"`
		Payload   string `json:"payload"`
		Signature string `json:"signature"`
		Valid     bool   `json:"valid"`
	}
	if err := json.Unmarshal(raw, &vectors); err != nil {
		t.Fatal(err)
	}
	for _, v := range vectors {
		t.Run(v.Name, func(t *testing.T) {
			h := http.Header{}
			for k, val := range map[string]string{"webhook-id": v.ID, "webhook-timestamp": v.Timestamp, "webhook-signature": v.Signature} {
				if val != "" {
					h.Set(k, val)
				}
			}
			now := time.Unix(1614265330, 0) // the example's time
			err := verifySignature(v.Secret, h, []byte(v.Payload), now)
			if v.Valid && err != nil {
				t.Errorf("valid vector refused: %v", err)
			}
			if !v.Valid && err == nil {
				t.Error("invalid vector accepted")
			}
		})
	}
}

// TestDelivery: two endpoints, a tenant's with a type filter and an
// operator's for every tenant, each get exactly their events, in order,
// signed, each once, soon after Publish.
func TestDelivery(t *testing.T) {
	eachDriver(t, func(t *testing.T, open opener) {
		acme, ops := newReceiver(t), newReceiver(t)
		l := openLog(t, open(t, "r1"), events.Config{Webhooks: []events.Webhook{
			acme.webhook("acme", "session.*", events.RunFinished),
			ops.webhook(""),
		}}, nil)
		publish(t, l, "acme", events.SessionCreated, 3)
		publish(t, l, "globex", events.SessionCreated, 2)
		publish(t, l, "acme", events.RunStarted, 2)
		publish(t, l, "acme", events.RunFinished, 2)
		publish(t, l, "acme", events.SessionDeleted, 1)

		var wantAcme []int64
		evs, err := l.Since(context.Background(), "acme", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Type != events.RunStarted {
				wantAcme = append(wantAcme, ev.ID)
			}
		}
		wantOps := ids(t, l, "", 0)
		if len(wantOps) != 10 || len(wantAcme) != 6 {
			t.Fatalf("log holds %d events (%d for acme's endpoint), want 10 (6)", len(wantOps), len(wantAcme))
		}
		acme.waitAccepted(t, wantAcme, 10*time.Second)
		ops.waitAccepted(t, wantOps, 10*time.Second)
		time.Sleep(200 * time.Millisecond) // anything extra would arrive now
		if d := acme.check(t, wantAcme); d != 0 {
			t.Errorf("acme's endpoint got %d duplicates with a healthy receiver", d)
		}
		if d := ops.check(t, wantOps); d != 0 {
			t.Errorf("the operator's endpoint got %d duplicates with a healthy receiver", d)
		}
		for _, rq := range acme.requests() {
			if rq.event.Tenant != "acme" || rq.webhookID != events.WebhookID(rq.eventID) {
				t.Errorf("acme's endpoint got %+v", rq)
			}
			var data map[string]any
			if err := json.Unmarshal(rq.event.Data, &data); err != nil || data["code_sha256"] == nil {
				t.Errorf("event %d data %s: want the published object", rq.eventID, rq.event.Data)
			}
		}
	})
}

// TestDeliveryWokenByPublish: a healthy receiver gets each event because
// Publish wakes the deliverer, not because a poll comes round: the poll is
// an hour here, so an event that arrives at all arrived on the wake-up.
// The figures are logged; the target (p99 ≤ 200 ms) is a benchmark's
// (BenchmarkPublishToWebhook, make bench-report), not this test's.
func TestDeliveryWokenByPublish(t *testing.T) {
	eachDriver(t, func(t *testing.T, open opener) {
		rcv := newReceiver(t)
		l := openLog(t, open(t, "r1"), events.Config{Webhooks: []events.Webhook{rcv.webhook("acme")}, PollInterval: time.Hour}, nil)
		const n = 100
		var lat []time.Duration
		var last int64
		for i := range n {
			start := time.Now()
			publish(t, l, "acme", events.RunFinished, 1)
			last++
			rcv.waitAccepted(t, []int64{last}, 30*time.Second)
			lat = append(lat, rcv.acceptedAt(last).Sub(start))
			if i%10 == 0 {
				time.Sleep(5 * time.Millisecond)
			}
		}
		t.Logf("Publish → webhook arrival over %d events: p50 %s, p99 %s, max %s", n,
			percentile(lat, 50), percentile(lat, 99), percentile(lat, 100))
	})
}

// outage is how a receiver is unavailable.
type outage struct {
	name  string
	start func(*receiver)
	end   func(*receiver)
}

var outages = []outage{
	{"503", func(r *receiver) { r.setFailing(true) }, func(r *receiver) { r.setFailing(false) }},
	{"refused", func(r *receiver) { r.down() }, func(r *receiver) { r.up() }},
}

// runOutage publishes before and during an outage of length d and checks
// that once the receiver is back everything arrives, in order, with
// duplicates under their first webhook-id, within retryMax (plus slack)
// of the receiver's return. It returns that recovery delay.
func runOutage(t *testing.T, open opener, o outage, d time.Duration, cfg events.Config) time.Duration {
	rcv := newReceiver(t)
	cfg.Webhooks = []events.Webhook{rcv.webhook("acme")}
	l := openLog(t, open(t, "r1"), cfg, nil)
	publish(t, l, "acme", events.SessionCreated, 2)
	rcv.waitAccepted(t, ids(t, l, "acme", 0), 10*time.Second)

	o.start(rcv)
	began := time.Now()
	// Events keep coming during the outage.
	for time.Since(began) < d {
		publish(t, l, "acme", events.RunFinished, 1)
		time.Sleep(min(d/5, time.Until(began.Add(d))+time.Millisecond))
	}
	o.end(rcv)
	back := time.Now()
	want := ids(t, l, "acme", 0)
	rcv.waitAccepted(t, want, cfg.RetryMax+15*time.Second)
	var recovered time.Duration
	for _, id := range want {
		recovered = max(recovered, rcv.acceptedAt(id).Sub(back))
	}
	time.Sleep(100 * time.Millisecond)
	dups := rcv.check(t, want)
	t.Logf("outage %s of %s: %d events, %d requests (%d duplicates), all delivered %s after the receiver came back",
		o.name, d, len(want), len(rcv.requests()), dups, recovered.Round(time.Millisecond))
	// How soon the backlog arrives is a figure, not a test (a loaded
	// machine stretches it): waitAccepted above bounds it generously, and
	// BenchmarkPublishToWebhook measures delivery latency.
	return recovered
}

// TestOutage: nothing published during a receiver outage is lost.
func TestOutage(t *testing.T) {
	for _, o := range outages {
		for _, d := range []time.Duration{1500 * time.Millisecond} {
			t.Run(o.name+"/"+d.String(), func(t *testing.T) {
				eachDriver(t, func(t *testing.T, open opener) {
					runOutage(t, open, o, d, fastRetries(events.Config{}))
				})
			})
		}
	}
}

// TestOutage60s is issue 27's acceptance point: a 60 s receiver outage
// loses nothing, with the default retry settings, and the backlog
// arrives within seconds of the receiver's return. It runs under make
// test (in parallel with other packages) and is skipped with -short.
func TestOutage60s(t *testing.T) {
	if testing.Short() {
		t.Skip("a 60 s outage; skipped with -short")
	}
	t.Parallel()
	for _, o := range outages {
		t.Run(o.name, func(t *testing.T) {
			t.Parallel()
			eachDriver(t, func(t *testing.T, open opener) {
				runOutage(t, open, o, 60*time.Second, events.Config{})
			})
		})
	}
}

// TestRestartMidOutage: the gateway stops while the receiver is down and
// starts again on the same database; everything published before and
// after arrives once the receiver is back.
func TestRestartMidOutage(t *testing.T) {
	for _, how := range []string{"close", "crash"} {
		t.Run(how, func(t *testing.T) {
			eachDriver(t, func(t *testing.T, open opener) {
				rcv := newReceiver(t)
				cfg := fastRetries(events.Config{Webhooks: []events.Webhook{rcv.webhook("acme")}, Lease: time.Second})
				db := open(t, "r1")
				l := openLog(t, db, cfg, nil)
				publish(t, l, "acme", events.SessionCreated, 1)
				rcv.waitAccepted(t, []int64{1}, 10*time.Second)

				rcv.setFailing(true)
				publish(t, l, "acme", events.RunStarted, 3)
				rcv.waitRequests(t, 4, 10*time.Second) // event 2 failed at least twice
				if how == "crash" {
					l.Crash()
				} else if err := l.Close(); err != nil {
					t.Fatal(err)
				}
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}

				// The same replica name on restart: a crashed run's lease is
				// this process's own (and on SQLite, anyone's).
				l2 := openLog(t, open(t, "r1"), cfg, nil)
				publish(t, l2, "acme", events.RunFinished, 3)
				time.Sleep(300 * time.Millisecond)
				rcv.setFailing(false)
				want := ids(t, l2, "acme", 0)
				if len(want) != 7 {
					t.Fatalf("after the restart the log holds %v, want 7 events", want)
				}
				rcv.waitAccepted(t, want, 15*time.Second)
				time.Sleep(100 * time.Millisecond)
				rcv.check(t, want)
			})
		})
	}
}

// TestLostAnswers: the receiver processes events but its answers come too
// late (lost): each is sent again with the same webhook-id, a fresh
// timestamp and a valid signature, so the receiver can drop the duplicate;
// nothing is lost and order holds.
func TestLostAnswers(t *testing.T) {
	eachDriver(t, func(t *testing.T, open opener) {
		rcv := newReceiver(t)
		cfg := fastRetries(events.Config{Webhooks: []events.Webhook{rcv.webhook("acme")}, Timeout: 300 * time.Millisecond})
		l := openLog(t, open(t, "r1"), cfg, nil)
		rcv.stall(3, 1500*time.Millisecond) // past a second, so the retry's timestamp differs
		publish(t, l, "acme", events.RunFinished, 4)
		want := ids(t, l, "acme", 0)
		rcv.waitAccepted(t, want, 15*time.Second)
		waitDelivered(t, l, want[len(want)-1])
		if d := rcv.check(t, want); d < 3 {
			t.Errorf("%d duplicates, want at least 3 (one per lost answer)", d)
		}
		stamps := map[int64]map[string]bool{}
		for _, rq := range rcv.requests() {
			if stamps[rq.eventID] == nil {
				stamps[rq.eventID] = map[string]bool{}
			}
			stamps[rq.eventID][rq.timestamp] = true
		}
		if len(stamps[want[0]]) < 2 {
			t.Errorf("the retries of event %d carried the timestamps %v, want a fresh one per attempt", want[0], stamps[want[0]])
		}
		ds := waitDelivered(t, l, want[0])
		if ds[0].Attempts < 2 || ds[0].WebhookID != events.WebhookID(want[0]) {
			t.Errorf("delivery record %+v, want the timed-out attempt counted", ds[0])
		}
	})
}

// TestDeliveriesLog: an admin reads what happened to each delivery,
// without the endpoint's credentials or secret.
func TestDeliveriesLog(t *testing.T) {
	eachDriver(t, func(t *testing.T, open opener) {
		rcv := newReceiver(t)
		lb := &logBuffer{}
		wh := rcv.webhook("acme")
		wh.URL = "http://hookuser:hookpass@" + strings.TrimPrefix(rcv.URL("/hook?token=qtoken123"), "http://")
		l := openLog(t, open(t, "r1"), fastRetries(events.Config{Webhooks: []events.Webhook{wh}}), lb)
		ctx := context.Background()

		publish(t, l, "acme", events.SessionCreated, 1)
		rcv.waitAccepted(t, []int64{1}, 10*time.Second)
		rcv.setFailing(true)
		publish(t, l, "acme", events.RunFinished, 2)
		rcv.waitRequests(t, 4, 10*time.Second)

		// During the outage: event 2 is pending, with why and when next;
		// event 3 waits behind it, unattempted.
		pending, err := l.Deliveries(ctx, events.DeliveryQuery{Pending: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(pending) != 1 || pending[0].EventID != 2 {
			t.Fatalf("pending deliveries %+v, want event 2's alone", pending)
		}
		p := pending[0]
		if p.Attempts < 2 || p.LastStatus != 503 || !strings.Contains(p.LastError, "503") || p.NextAttempt == nil ||
			p.DeliveredAt != nil || p.WebhookID != "evt_2" || p.Tenant != "acme" || p.EventType != events.RunFinished ||
			p.Replica != "r1" {
			t.Errorf("pending delivery %+v", p)
		}

		rcv.setFailing(false)
		rcv.waitAccepted(t, []int64{1, 2, 3}, 10*time.Second)
		var all []events.Delivery
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			var err error
			if all, err = l.Deliveries(ctx, events.DeliveryQuery{Tenant: "acme"}); err != nil {
				t.Fatal(err)
			}
			if len(all) == 3 && all[0].DeliveredAt != nil { // the last 2xx is recorded just after it arrived
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("deliveries %+v, want 3 delivered", all)
			}
		}
		for i, d := range all {
			if d.EventID != int64(3-i) {
				t.Errorf("delivery %d is of event %d, want newest first", i, d.EventID)
			}
			if d.DeliveredAt == nil || d.NextAttempt != nil || d.LastStatus != 204 || d.LastError != "" {
				t.Errorf("delivered record %+v", d)
			}
			if want := "http://" + rcv.addr + "/hook"; d.Endpoint != want {
				t.Errorf("endpoint %q, want %q (no userinfo, no query)", d.Endpoint, want)
			}
		}
		if all[1].Attempts < 3 {
			t.Errorf("event 2 took %d attempts, want the failed ones counted", all[1].Attempts)
		}
		for _, q := range []events.DeliveryQuery{
			{Endpoint: all[0].EndpointID}, {Endpoint: all[0].Endpoint}, {EventID: 2}, {BeforeEventID: 3, Limit: 1}, {Tenant: "globex"},
		} {
			got, err := l.Deliveries(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			want := map[bool]int{true: 3, false: 1}[q.EventID == 0 && q.Limit == 0]
			if q.Tenant == "globex" {
				want = 0
			}
			if len(got) != want {
				t.Errorf("Deliveries(%+v): %d records, want %d", q, len(got), want)
			}
		}
		raw, _ := json.Marshal(all)
		logs := lb.String()
		for _, secret := range []string{rcv.secret, strings.TrimPrefix(rcv.secret, "whsec_"), "hookpass", "qtoken123"} {
			if strings.Contains(string(raw), secret) || strings.Contains(logs, secret) {
				t.Errorf("a credential (%.8s…) shows in the delivery log or the logs", secret)
			}
		}
		if !strings.Contains(logs, "webhook delivery failed") {
			t.Errorf("the failed attempts were not logged:\n%s", logs)
		}
	})
}

// TestRefusedErrorText: an attempt that got no answer says why in a few
// words, without the URL.
func TestRefusedErrorText(t *testing.T) {
	rcv := newReceiver(t)
	rcv.down()
	wh := rcv.webhook("acme")
	wh.URL += "?token=qtoken123"
	l := openLog(t, sqliteOpener(t)(t, "r1"), fastRetries(events.Config{Webhooks: []events.Webhook{wh}}), nil)
	publish(t, l, "acme", events.SessionCreated, 1)
	deadline := time.Now().Add(10 * time.Second)
	for {
		ds, err := l.Deliveries(context.Background(), events.DeliveryQuery{})
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 1 {
			d := ds[0]
			if d.LastStatus != 0 || !strings.Contains(d.LastError, "refused") || strings.Contains(d.LastError, "qtoken123") ||
				len(d.LastError) > 210 {
				t.Errorf("refused attempt recorded as %+v", d)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no delivery record after 10 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestTwoReplicas: two gateways on one PostgreSQL database, both
// configured with the same endpoint and both publishing: the endpoint gets
// every event, from one replica at a time, and an SSE reader on one
// replica sees the other's events.
func TestTwoReplicas(t *testing.T) {
	open := postgresOpener(t)
	rcv := newReceiver(t)
	cfg := events.Config{Webhooks: []events.Webhook{rcv.webhook("acme")}}
	ca, cb := cfg, cfg
	ca.Replica, cb.Replica = "a", "b"
	a := openLog(t, open(t, "a"), ca, nil)
	b := openLog(t, open(t, "b"), cb, nil)

	stream := openSSE(t, b, "acme", "")
	done := make(chan struct{})
	const perReplica = 40
	go func() {
		defer close(done)
		for range perReplica {
			publish(t, b, "acme", events.RunFinished, 1)
		}
	}()
	for range perReplica {
		publish(t, a, "acme", events.RunStarted, 1)
	}
	<-done
	want := ids(t, a, "acme", 0)
	if len(want) != 2*perReplica {
		t.Fatalf("the log holds %d events, want %d", len(want), 2*perReplica)
	}
	rcv.waitAccepted(t, want, 20*time.Second)
	time.Sleep(200 * time.Millisecond)
	if d := rcv.check(t, want); d != 0 {
		t.Errorf("%d duplicates with a healthy receiver and no failover", d)
	}
	ds, err := a.Deliveries(context.Background(), events.DeliveryQuery{Limit: events.MaxLimit})
	if err != nil {
		t.Fatal(err)
	}
	replicas := map[string]int{}
	for _, d := range ds {
		replicas[d.Replica]++
	}
	if len(replicas) != 1 {
		t.Errorf("deliveries made by %v, want one replica", replicas)
	}

	got := stream.next(t, len(want), 10*time.Second)
	var gotIDs []int64
	for _, m := range got {
		gotIDs = append(gotIDs, m.id)
	}
	if !slices.Equal(gotIDs, want) {
		t.Errorf("SSE on replica b got %v, want %v", gotIDs, want)
	}

	// Latency of a's event to b's reader (LISTEN/NOTIFY, not the poll).
	var lat []time.Duration
	for range 20 {
		start := time.Now()
		publish(t, a, "acme", events.SessionCreated, 1)
		stream.next(t, 1, 5*time.Second)
		lat = append(lat, time.Since(start))
	}
	t.Logf("publish on a → SSE reader on b: p50 %s, max %s", percentile(lat, 50), percentile(lat, 100))
	if p := percentile(lat, 50); p >= 100*time.Millisecond {
		t.Errorf("p50 %s: other replicas' events wait for the poll", p)
	}
}

// TestFailover: the replica delivering an endpoint dies; once its lease
// lapses the other takes over and nothing is lost.
func TestFailover(t *testing.T) {
	open := postgresOpener(t)
	rcv := newReceiver(t)
	cfg := events.Config{Webhooks: []events.Webhook{rcv.webhook("acme")}, Lease: time.Second}
	ca, cb := cfg, cfg
	ca.Replica, cb.Replica = "a", "b"
	dba := open(t, "a")
	a := openLog(t, dba, ca, nil)
	time.Sleep(100 * time.Millisecond) // a takes the lease first
	b := openLog(t, open(t, "b"), cb, nil)

	publish(t, a, "acme", events.SessionCreated, 1)
	rcv.waitAccepted(t, []int64{1}, 10*time.Second)
	ds := waitDelivered(t, b, 1)
	holder, survivor := a, b
	if ds[0].Replica == "b" {
		holder, survivor = b, a
	}
	rcv.setFailing(true)
	publish(t, survivor, "acme", events.RunStarted, 2)
	rcv.waitRequests(t, 2, 10*time.Second)
	holder.Crash()
	killed := time.Now()
	rcv.setFailing(false)
	publish(t, survivor, "acme", events.RunFinished, 2)
	want := ids(t, survivor, "acme", 0)
	rcv.waitAccepted(t, want, 15*time.Second)
	t.Logf("after the holder died, its backlog arrived in %s (lease %s)",
		rcv.acceptedAt(want[len(want)-1]).Sub(killed).Round(time.Millisecond), cfg.Lease)
	time.Sleep(100 * time.Millisecond)
	rcv.check(t, want)
	survivorName := map[bool]string{true: "a", false: "b"}[survivor == a]
	if ds := waitDelivered(t, survivor, want[len(want)-1]); ds[0].Replica != survivorName {
		t.Errorf("the last event was delivered by %+v, want replica %s", ds, survivorName)
	}
}

// TestSlowReceiverKeepsLease: an attempt that takes longer than a lease
// (a slow receiver, within Config.Timeout) keeps its replica's lease, so
// the other replica does not send the same event meanwhile.
func TestSlowReceiverKeepsLease(t *testing.T) {
	open := postgresOpener(t)
	rcv := newReceiver(t)
	cfg := events.Config{Webhooks: []events.Webhook{rcv.webhook("acme")}, Lease: 600 * time.Millisecond, Timeout: 5 * time.Second}
	ca, cb := cfg, cfg
	ca.Replica, cb.Replica = "a", "b"
	a := openLog(t, open(t, "a"), ca, nil)
	openLog(t, open(t, "b"), cb, nil)
	rcv.stall(1, 2*time.Second) // answered 204, after more than three leases
	publish(t, a, "acme", events.RunFinished, 2)
	rcv.waitAccepted(t, []int64{1, 2}, 10*time.Second)
	waitDelivered(t, a, 2)
	if d := rcv.check(t, []int64{1, 2}); d != 0 {
		t.Errorf("%d duplicates: the other replica took over during a slow attempt", d)
	}
	ds, err := a.Deliveries(context.Background(), events.DeliveryQuery{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if d.Attempts != 1 || d.Replica != ds[0].Replica {
			t.Errorf("delivery %+v, want one attempt each, all by one replica", d)
		}
	}
}

// waitDelivered waits until the delivery of event id is recorded as
// delivered (the record commits just after the receiver answered).
func waitDelivered(t testing.TB, l *events.Log, id int64) []events.Delivery {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ds, err := l.Deliveries(context.Background(), events.DeliveryQuery{EventID: id})
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 1 && ds[0].DeliveredAt != nil {
			return ds
		}
		if time.Now().After(deadline) {
			t.Fatalf("event %d: deliveries %+v, want one delivered", id, ds)
		}
	}
}

// TestNewEndpointStartsAtTheEnd: an endpoint added to the config gets the
// events after it was added, not the whole retained log.
func TestNewEndpointStartsAtTheEnd(t *testing.T) {
	open := sqliteOpener(t)
	db := open(t, "r1")
	l := openLog(t, db, events.Config{}, nil)
	publish(t, l, "acme", events.SessionCreated, 3)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	rcv := newReceiver(t)
	l = openLog(t, db, events.Config{Webhooks: []events.Webhook{rcv.webhook("acme")}}, nil)
	publish(t, l, "acme", events.SessionDeleted, 1)
	rcv.waitAccepted(t, []int64{4}, 10*time.Second)
	time.Sleep(200 * time.Millisecond)
	rcv.check(t, []int64{4})
}
