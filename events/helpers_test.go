package events_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/events"
	"github.com/sandgate/sandgate/internal/pgtest"
)

// opener opens the test's database as replica; every call opens the same
// database (on SQLite, close the previous handle first). Handles are
// closed when the test ends.
type opener func(t testing.TB, replica string) audit.Database

// eachDriver runs fn on SQLite, and on PostgreSQL when the test cluster
// is there (pgtest: skipped without one, failed without one under
// SANDGATE_REQUIRE_POSTGRES=1).
func eachDriver(t *testing.T, fn func(t *testing.T, open opener)) {
	t.Run(audit.DriverSQLite, func(t *testing.T) {
		t.Parallel()
		fn(t, sqliteOpener(t))
	})
	t.Run(audit.DriverPostgres, func(t *testing.T) {
		t.Parallel()
		fn(t, postgresOpener(t))
	})
}

func sqliteOpener(t testing.TB) opener {
	path := filepath.Join(t.TempDir(), "audit.db")
	return func(t testing.TB, replica string) audit.Database {
		t.Helper()
		db, err := audit.Open(context.Background(), path, audit.Options{Replica: replica})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return db
	}
}

func postgresOpener(t testing.TB) opener {
	dsn := pgtest.Schema(t)
	return func(t testing.TB, replica string) audit.Database {
		t.Helper()
		db, err := audit.OpenPostgres(context.Background(), dsn, audit.Options{Replica: replica})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return db
	}
}

// openLog opens a Log on db, closed when the test ends, logging to lb.
// The replica is "r1" unless cfg names one.
func openLog(t testing.TB, db audit.Database, cfg events.Config, lb *logBuffer) *events.Log {
	t.Helper()
	if cfg.Replica == "" {
		cfg.Replica = "r1"
	}
	var log *slog.Logger
	if lb != nil {
		log = slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	l, err := events.Open(context.Background(), db, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// fastRetries are the retry settings of the tests that are not about the
// defaults: an outage of a second or two costs a few attempts.
func fastRetries(cfg events.Config) events.Config {
	cfg.RetryMin, cfg.RetryMax = 50*time.Millisecond, 400*time.Millisecond
	return cfg
}

// logBuffer collects log output, safe for concurrent writers.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// newSecret is a fresh Standard Webhooks secret.
func newSecret(t testing.TB) string {
	t.Helper()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(key)
}

// verifySignature checks a delivery as the Standard Webhooks specification
// tells a consumer to, written from the specification and independent of
// the package's signing code: the three headers must be present, the
// timestamp within five minutes of now, and one of the space-delimited
// "v1,<base64>" signatures must equal HMAC-SHA256 with the base64-decoded
// part of the whsec_ secret over "{webhook-id}.{webhook-timestamp}.{body}",
// compared in constant time.
func verifySignature(secret string, h http.Header, body []byte, now time.Time) error {
	id, ts, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return errors.New("missing webhook-id, webhook-timestamp or webhook-signature")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("webhook-timestamp %q is not integer seconds", ts)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > 5*time.Minute || d < -5*time.Minute {
		return fmt.Errorf("webhook-timestamp %s is %s away from now", ts, d)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return fmt.Errorf("secret: %w", err)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "." + string(body)))
	expected := mac.Sum(nil)
	for s := range strings.SplitSeq(sigs, " ") {
		version, sig, ok := strings.Cut(s, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(sig)
		if err == nil && hmac.Equal(got, expected) {
			return nil
		}
	}
	return errors.New("no v1 signature matches")
}

// request is one request that reached a receiver.
type request struct {
	webhookID string
	timestamp string
	eventID   int64
	event     events.Event
	status    int // what the receiver answered
	at        time.Time
}

// receiver is a loopback webhook endpoint. It verifies every request's
// signature, can fail (503) or go away (connection refused) for a while,
// and keeps every request in arrival order.
type receiver struct {
	t      testing.TB
	secret string
	addr   string

	mu       sync.Mutex
	srv      *http.Server
	failing  bool
	stalls   int           // how many more requests are processed but answered late
	stallFor time.Duration // how late
	reqs     []request
	accepted map[int64]time.Time // first 2xx answer per event id
	problems []string
	changed  chan struct{} // closed and replaced at every request
}

func newReceiver(t testing.TB) *receiver {
	t.Helper()
	r := &receiver{t: t, secret: newSecret(t), accepted: make(map[int64]time.Time), changed: make(chan struct{})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.addr = ln.Addr().String()
	r.serve(ln)
	t.Cleanup(func() { r.down() })
	return r
}

// URL is the receiver's URL, with path and query.
func (r *receiver) URL(pathAndQuery string) string { return "http://" + r.addr + pathAndQuery }

func (r *receiver) webhook(tenant string, types ...string) events.Webhook {
	return events.Webhook{Tenant: tenant, URL: r.URL("/hook"), Secret: r.secret, Types: types}
}

func (r *receiver) serve(ln net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(r.handle), ReadHeaderTimeout: 5 * time.Second}
	r.mu.Lock()
	r.srv = srv
	r.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
}

// down closes the listener and every connection: attempts are refused.
func (r *receiver) down() {
	r.mu.Lock()
	srv := r.srv
	r.srv = nil
	r.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

// up listens again on the same address.
func (r *receiver) up() {
	r.t.Helper()
	var ln net.Listener
	var err error
	for range 50 { // the port may linger briefly
		if ln, err = net.Listen("tcp", r.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		r.t.Fatalf("receiver up again on %s: %v", r.addr, err)
	}
	r.serve(ln)
}

func (r *receiver) setFailing(f bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failing = f
}

// stall makes the next n requests be processed (accepted) but answered
// only after d: a sender whose timeout is shorter never sees the answer,
// as when a response is lost, and sends the event again.
func (r *receiver) stall(n int, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stalls, r.stallFor = n, d
}

func (r *receiver) handle(w http.ResponseWriter, req *http.Request) {
	var late time.Duration
	defer func() {
		if late > 0 {
			time.Sleep(late)
		}
	}()
	body, err := io.ReadAll(req.Body)
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	defer func() {
		close(r.changed)
		r.changed = make(chan struct{})
	}()
	if err != nil {
		r.problems = append(r.problems, "read body: "+err.Error())
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if req.Method != http.MethodPost || req.Header.Get("Content-Type") != "application/json" {
		r.problems = append(r.problems, fmt.Sprintf("%s with content-type %q", req.Method, req.Header.Get("Content-Type")))
	}
	if err := verifySignature(r.secret, req.Header, body, now); err != nil {
		r.problems = append(r.problems, "signature: "+err.Error())
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var ev events.Event
	if err := json.Unmarshal(body, &ev); err != nil {
		r.problems = append(r.problems, "body: "+err.Error())
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	rq := request{webhookID: req.Header.Get("webhook-id"), timestamp: req.Header.Get("webhook-timestamp"),
		eventID: ev.ID, event: ev, at: now, status: http.StatusNoContent}
	if r.failing {
		rq.status = http.StatusServiceUnavailable
	} else if r.stalls > 0 {
		r.stalls--
		late = r.stallFor
	}
	r.reqs = append(r.reqs, rq)
	if rq.status/100 == 2 {
		if _, seen := r.accepted[ev.ID]; !seen {
			r.accepted[ev.ID] = now
		}
	}
	w.WriteHeader(rq.status)
}

// waitAccepted waits until every id in want was accepted, failing the test
// after timeout.
func (r *receiver) waitAccepted(t testing.TB, want []int64, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		r.mu.Lock()
		missing := 0
		for _, id := range want {
			if _, ok := r.accepted[id]; !ok {
				missing++
			}
		}
		ch := r.changed
		r.mu.Unlock()
		if missing == 0 {
			return
		}
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("after %s, %d of %d events still not delivered (accepted: %v)", timeout, missing, len(want), r.acceptedIDs())
		}
		select {
		case <-ch:
		case <-time.After(min(left, 100*time.Millisecond)):
		}
	}
}

// waitRequests waits until the receiver has seen n requests.
func (r *receiver) waitRequests(t testing.TB, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		r.mu.Lock()
		got, ch := len(r.reqs), r.changed
		r.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s the receiver saw %d requests, want %d", timeout, got, n)
		}
		select {
		case <-ch:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (r *receiver) acceptedIDs() []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]int64, 0, len(r.accepted))
	for id := range r.accepted {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (r *receiver) acceptedAt(id int64) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.accepted[id]
}

func (r *receiver) requests() []request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.reqs)
}

// check asserts what a user of the endpoint would: every request was
// signed correctly; exactly the events want (in id order) were accepted,
// and no others; every request for an event carried the same webhook-id;
// and no request for an event came before every earlier event of want
// was accepted (in-order delivery). It returns how many requests were
// duplicates of an accepted event.
func (r *receiver) check(t testing.TB, want []int64) (duplicates int) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.problems {
		t.Errorf("receiver: %s", p)
	}
	got := make([]int64, 0, len(r.accepted))
	for id := range r.accepted {
		got = append(got, id)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("accepted events %v, want %v", got, want)
	}
	ids := make(map[int64]string)
	accepted := make(map[int64]bool)
	for _, rq := range r.reqs {
		if prev, ok := ids[rq.eventID]; ok && prev != rq.webhookID {
			t.Errorf("event %d came with webhook-id %q and %q", rq.eventID, prev, rq.webhookID)
		}
		ids[rq.eventID] = rq.webhookID
		if accepted[rq.eventID] {
			duplicates++
		}
		for _, w := range want {
			if w < rq.eventID && !accepted[w] {
				t.Errorf("event %d was sent before event %d was delivered", rq.eventID, w)
				break
			}
		}
		if rq.status/100 == 2 {
			accepted[rq.eventID] = true
		}
	}
	return duplicates
}

// publish publishes n events of tenant and returns their ids (read back
// from the log: Publish does not return them).
func publish(t testing.TB, l *events.Log, tenant string, typ string, n int) {
	t.Helper()
	for i := range n {
		ev := events.Event{Type: typ, Tenant: tenant, SessionID: fmt.Sprintf("s%d", i),
			Data: json.RawMessage(fmt.Sprintf(`{"n": %d, "code_sha256": "%064x"}`, i, i))}
		if err := l.Publish(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
	}
}

// ids returns the ids of every event after afterID that tenant sees.
func ids(t testing.TB, l *events.Log, tenant string, afterID int64) []int64 {
	t.Helper()
	var out []int64
	for {
		evs, err := l.Since(context.Background(), tenant, afterID, events.MaxLimit)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			out = append(out, ev.ID)
			afterID = ev.ID
		}
		if len(evs) < events.MaxLimit {
			return out
		}
	}
}

// percentile returns the p-th percentile (0..100) of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s)-1) * p / 100)
	return s[i]
}

func newTextLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
