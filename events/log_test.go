package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/events"
)

func TestPublishSince(t *testing.T) {
	eachDriver(t, func(t *testing.T, open opener) {
		ctx := context.Background()
		l := openLog(t, open(t, "r1"), events.Config{}, nil)
		at := time.Now().Add(-time.Hour).Truncate(time.Second).Add(123456789).In(time.FixedZone("CEST", 2*3600))
		in := []events.Event{
			{Type: events.SessionCreated, Tenant: "acme", SessionID: "s1", Time: at, Data: json.RawMessage(`{ "labels": {"team": "ml"} }`)},
			{Type: events.RunFinished, Tenant: "globex", SessionID: "s2", Data: json.RawMessage(`{"code_sha256":"ab","exit_code":0}`)},
			{Type: events.EgressDenied, Tenant: "acme", Data: json.RawMessage("null")},
		}
		before := time.Now()
		for _, ev := range in {
			ev.ID = 99 // ignored
			if err := l.Publish(ctx, ev); err != nil {
				t.Fatal(err)
			}
		}
		all, err := l.Since(ctx, "", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(all) != 3 {
			t.Fatalf("Since: %d events, want 3", len(all))
		}
		for i, ev := range all {
			if ev.ID != int64(i+1) || ev.Type != in[i].Type || ev.Tenant != in[i].Tenant || ev.SessionID != in[i].SessionID {
				t.Errorf("event %d: %+v", i, ev)
			}
		}
		if !all[0].Time.Equal(at) || all[0].Time.Location() != time.UTC {
			t.Errorf("time %v, want %v in UTC", all[0].Time, at)
		}
		if all[1].Time.Before(before.Add(-time.Second)) || all[1].Time.After(time.Now()) {
			t.Errorf("a zero time became %v, want now", all[1].Time)
		}
		if string(all[0].Data) != `{"labels":{"team":"ml"}}` || string(all[2].Data) != `{}` {
			t.Errorf("data %s and %s, want compact JSON and {}", all[0].Data, all[2].Data)
		}

		for _, tc := range []struct {
			tenant string
			after  int64
			limit  int
			want   []int64
		}{
			{"acme", 0, 0, []int64{1, 3}},
			{"globex", 0, 0, []int64{2}},
			{"nobody", 0, 0, nil},
			{"", 1, 0, []int64{2, 3}},
			{"", 0, 2, []int64{1, 2}},
			{"acme", 1, 0, []int64{3}},
			{"", 3, 0, nil},
		} {
			evs, err := l.Since(ctx, tc.tenant, tc.after, tc.limit)
			if err != nil {
				t.Fatal(err)
			}
			var got []int64
			for _, ev := range evs {
				got = append(got, ev.ID)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("Since(%q, %d, %d) = %v, want %v", tc.tenant, tc.after, tc.limit, got, tc.want)
			}
		}
	})
}

func TestPublishRefuses(t *testing.T) {
	lb := &logBuffer{}
	l := openLog(t, sqliteOpener(t)(t, "r1"), events.Config{}, lb)
	for _, tc := range []struct {
		name string
		ev   events.Event
	}{
		{"no type", events.Event{}},
		{"type with a newline (would break an SSE field)", events.Event{Type: "session.created\ndata: x"}},
		{"type with a space", events.Event{Type: "session created"}},
		{"data not an object", events.Event{Type: events.RunFinished, Data: json.RawMessage(`[1,2]`)}},
		{"data not JSON", events.Event{Type: events.RunFinished, Data: json.RawMessage(`{"a":`)}},
		{"data too large", events.Event{Type: events.RunFinished, Data: json.RawMessage(`{"a":"` + strings.Repeat("x", events.MaxDataBytes) + `"}`)}},
		{"tenant too long", events.Event{Type: events.RunFinished, Tenant: strings.Repeat("t", 300)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := l.Publish(context.Background(), tc.ev)
			if !errors.Is(err, events.ErrInvalidEvent) {
				t.Fatalf("Publish: %v, want ErrInvalidEvent", err)
			}
			if code, status, _ := errcode.Of(err); code != errcode.InvalidRequest || status != 400 {
				t.Errorf("maps to %s %d, want invalid_request 400", code, status)
			}
		})
	}
	if evs, _ := l.Since(context.Background(), "", 0, 0); len(evs) != 0 {
		t.Errorf("refused events were stored: %+v", evs)
	}
	if n := strings.Count(lb.String(), "event not recorded"); n != 7 {
		t.Errorf("%d refusals logged, want 7 (a caller may ignore Publish's error):\n%s", n, lb.String())
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Publish(context.Background(), events.Event{Type: events.RunFinished}); !errors.Is(err, events.ErrClosed) {
		t.Errorf("Publish after Close: %v, want ErrClosed", err)
	}
}

// TestPublishMany: events published together are kept in one commit, in
// order, with consecutive ids after what was there; a refused one among
// them is left out (its error returned) and the others are kept; the
// next single event follows them.
func TestPublishMany(t *testing.T) {
	eachDriver(t, func(t *testing.T, open opener) {
		ctx := context.Background()
		l := openLog(t, open(t, "r1"), events.Config{}, nil)
		if err := l.Publish(ctx, events.Event{Type: events.SessionCreated, SessionID: "s0"}); err != nil {
			t.Fatal(err)
		}
		err := l.Publish(ctx,
			events.Event{Type: events.RunStarted, SessionID: "s1"},
			events.Event{Type: "not valid"},
			events.Event{Type: events.RunFinished, SessionID: "s1"},
			events.Event{Type: events.SessionDeleted, SessionID: "s1"})
		if !errors.Is(err, events.ErrInvalidEvent) {
			t.Fatalf("Publish with a refused event: %v, want ErrInvalidEvent", err)
		}
		if err := l.Publish(ctx, events.Event{Type: events.SessionCreated, SessionID: "s2"}); err != nil {
			t.Fatal(err)
		}
		all, err := l.Since(ctx, "", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for i, ev := range all {
			got = append(got, fmt.Sprintf("%d %s %s", ev.ID, ev.Type, ev.SessionID))
			if i > 0 && ev.ID != all[i-1].ID+1 {
				t.Errorf("ids not consecutive: %d after %d", ev.ID, all[i-1].ID)
			}
		}
		want := []string{"1 session.created s0", "2 run.started s1", "3 run.finished s1", "4 session.deleted s1", "5 session.created s2"}
		if strings.Join(got, "; ") != strings.Join(want, "; ") {
			t.Errorf("log holds %q, want %q", got, want)
		}
	})
}

// TestPublishOutlivesRequest: the event of something that happened is
// stored even when the request that caused it has ended.
func TestPublishOutlivesRequest(t *testing.T) {
	l := openLog(t, sqliteOpener(t)(t, "r1"), events.Config{}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Publish(ctx, events.Event{Type: events.SessionDeleted}); err != nil {
		t.Fatal(err)
	}
	if got := ids(t, l, "", 0); len(got) != 1 {
		t.Errorf("log holds %v", got)
	}
}

// TestReadersNeverSkip: with many concurrent publishers (on two replicas
// on PostgreSQL), a reader that repeatedly asks for what follows the last
// id it saw gets every id, in order, with no gaps: no event becomes
// visible after a higher id already was.
func TestReadersNeverSkip(t *testing.T) {
	eachDriver(t, func(t *testing.T, open opener) {
		ctx := context.Background()
		cfg := events.Config{Replica: "a"}
		logs := []*events.Log{openLog(t, open(t, "a"), cfg, nil)}
		if t.Name() == "TestReadersNeverSkip/postgres" {
			cfg.Replica = "b"
			logs = append(logs, openLog(t, open(t, "b"), cfg, nil))
		}
		const writers, perWriter = 8, 40
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for range perWriter {
					if err := logs[w%len(logs)].Publish(ctx, events.Event{Type: events.RunStarted}); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		stop := make(chan struct{})
		var seen []int64
		readerDone := make(chan struct{})
		go func() {
			defer close(readerDone)
			var after int64
			for {
				evs, err := logs[len(logs)-1].Since(ctx, "", after, 7)
				if err != nil {
					t.Error(err)
					return
				}
				for _, ev := range evs {
					seen = append(seen, ev.ID)
					after = ev.ID
				}
				if len(evs) == 0 {
					select {
					case <-stop:
						if after == writers*perWriter {
							return
						}
					default:
					}
				}
			}
		}()
		wg.Wait()
		close(stop)
		<-readerDone
		if len(seen) != writers*perWriter {
			t.Fatalf("the reader saw %d events, want %d", len(seen), writers*perWriter)
		}
		for i, id := range seen {
			if id != int64(i+1) {
				t.Fatalf("the reader saw id %d at position %d: an event was skipped", id, i)
			}
		}
	})
}

// TestPrune: events older than MaxAge go (a deliverer that has not sent
// them yet skips them: retention bounds how long a receiver may be
// away); ids are never reused.
func TestPrune(t *testing.T) {
	eachDriver(t, func(t *testing.T, open opener) {
		ctx := context.Background()
		l := openLog(t, open(t, "r1"), events.Config{MaxAge: time.Hour}, nil)
		for _, age := range []time.Duration{3 * time.Hour, 2 * time.Hour, 0} {
			ev := events.Event{Type: events.SessionExpired}
			if age > 0 {
				ev.Time = time.Now().Add(-age)
			}
			if err := l.Publish(ctx, ev); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := l.Prune(ctx); err != nil {
			t.Fatal(err)
		}
		if got := ids(t, l, "", 0); fmt.Sprint(got) != "[3]" {
			t.Errorf("after pruning the log holds %v, want [3]", got)
		}
		publish(t, l, "", events.SessionCreated, 1)
		if got := ids(t, l, "", 0); fmt.Sprint(got) != "[3 4]" {
			t.Errorf("after a prune and a publish: %v, want [3 4]", got)
		}
	})
}

func TestOpenRequiresReplicaOnPostgres(t *testing.T) {
	db := postgresOpener(t)(t, "r1")
	if _, err := events.Open(context.Background(), db, events.Config{}, nil); err == nil || !strings.Contains(err.Error(), "replica") {
		t.Errorf("Open without a replica name on PostgreSQL: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	const good = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	const short = "whsec_c2hvcnQ=" // "short"
	wh := func(url, secret string, types ...string) events.Webhook {
		return events.Webhook{Tenant: "acme", URL: url, Secret: secret, Types: types}
	}
	for _, tc := range []struct {
		name string
		cfg  events.Config
		want []string // every one must appear
	}{
		{"zero", events.Config{}, nil},
		{"good", events.Config{Webhooks: []events.Webhook{wh("https://example.com/hook", good, "session.*", "run.finished")}}, nil},
		{"scheme", events.Config{Webhooks: []events.Webhook{wh("ftp://example.com/", good)}}, []string{"webhooks[0].url", "http or https"}},
		{"no host", events.Config{Webhooks: []events.Webhook{wh("http:///path", good)}}, []string{"no host"}},
		{"missing url", events.Config{Webhooks: []events.Webhook{wh("", good)}}, []string{"webhooks[0].url: missing"}},
		{"secret prefix", events.Config{Webhooks: []events.Webhook{wh("https://example.com/", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")}}, []string{"webhooks[0].secret", "whsec_"}},
		{"secret base64", events.Config{Webhooks: []events.Webhook{wh("https://example.com/", "whsec_not*base64")}}, []string{"not valid base64"}},
		{"secret short", events.Config{Webhooks: []events.Webhook{wh("https://example.com/", short)}}, []string{"5 bytes, want 24 to 64"}},
		{"bad type", events.Config{Webhooks: []events.Webhook{wh("https://example.com/", good, "session created")}}, []string{"types[0]"}},
		{"duplicate", events.Config{Webhooks: []events.Webhook{wh("https://example.com/", good), wh("https://example.com/", good)}}, []string{"webhooks[1]: same tenant and url as webhooks[0]"}},
		{"durations", events.Config{RetryMin: 5 * time.Second, RetryMax: time.Second, Lease: -1}, []string{"retry_min", "events.lease"}},
		{"retry_min above the default retry_max", events.Config{RetryMin: 20 * time.Second}, []string{"retry_min 20s is above retry_max 10s"}},
		{"all at once", events.Config{Webhooks: []events.Webhook{
			wh("ftp://u:pw@example.com/?token=tok", short), wh("https://example.com/", "nope", "bad type"),
		}}, []string{"webhooks[0].url", "webhooks[0].secret", "webhooks[1].secret", "webhooks[1].types[0]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate accepted it")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			for _, secret := range []string{good[6:], short[6:], "pw", "tok"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error %q shows a credential", err)
				}
			}
			if _, oerr := events.Open(context.Background(), sqliteOpener(t)(t, "r1"), tc.cfg, nil); oerr == nil {
				t.Error("Open accepted the config Validate refuses")
			}
		})
	}
}

func TestWebhookNeverPrintsSecret(t *testing.T) {
	w := events.Webhook{Tenant: "acme", URL: "https://u:pw@example.com/hook?token=tok", Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}
	lb := &logBuffer{}
	log := newTextLogger(lb)
	log.Info("configured", "webhook", w)
	for _, s := range []string{fmt.Sprint(w), fmt.Sprintf("%+v %#v", w, w), fmt.Sprint([]events.Webhook{w}), lb.String()} {
		if strings.Contains(s, "MfKQ9r8") || strings.Contains(s, "pw") || strings.Contains(s, "tok") {
			t.Errorf("%q shows a credential", s)
		}
		if !strings.Contains(s, "example.com/hook") {
			t.Errorf("%q does not name the endpoint", s)
		}
	}
}
