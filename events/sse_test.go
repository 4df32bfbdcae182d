package events_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/events"
)

type sseMsg struct {
	id    int64
	event string
	data  events.Event
}

// sseStream is a client of one SSE response.
type sseStream struct {
	resp     *http.Response
	msgs     chan sseMsg
	comments chan string
	done     chan struct{} // closed when the server ends the stream
}

// openSSE serves l's stream for tenant and connects to it, resuming after
// lastEventID ("" for none) sent in the Last-Event-ID header.
func openSSE(t testing.TB, l *events.Log, tenant, lastEventID string) *sseStream {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { l.ServeSSE(w, r, tenant) }))
	t.Cleanup(srv.Close)
	h := http.Header{}
	if lastEventID != "" {
		h.Set("Last-Event-ID", lastEventID)
	}
	return connectSSE(t, srv.URL, h)
}

func connectSSE(t testing.TB, url string, h http.Header) *sseStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("SSE answered %s (%s): %s", resp.Status, resp.Header.Get("Content-Type"), b)
	}
	s := &sseStream{resp: resp, msgs: make(chan sseMsg, 1000), comments: make(chan string, 100), done: make(chan struct{})}
	go s.read(t)
	t.Cleanup(func() { resp.Body.Close() })
	return s
}

// read parses the stream as the EventSource specification does (the
// fields this server sends).
func (s *sseStream) read(t testing.TB) {
	defer close(s.done)
	sc := bufio.NewScanner(s.resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var m sseMsg
	var data []string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if len(data) > 0 {
				if err := json.Unmarshal([]byte(strings.Join(data, "\n")), &m.data); err != nil {
					t.Errorf("SSE data %q: %v", data, err)
				}
				s.msgs <- m
			}
			m, data = sseMsg{}, nil
		case strings.HasPrefix(line, ":"):
			select {
			case s.comments <- strings.TrimSpace(line[1:]):
			default:
			}
		default:
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "id":
				m.id, _ = strconv.ParseInt(value, 10, 64)
			case "event":
				m.event = value
			case "data":
				data = append(data, value)
			default:
				t.Errorf("SSE: unexpected field %q", line)
			}
		}
	}
}

// next returns the next n messages, failing after timeout.
func (s *sseStream) next(t testing.TB, n int, timeout time.Duration) []sseMsg {
	t.Helper()
	var out []sseMsg
	deadline := time.After(timeout)
	for len(out) < n {
		select {
		case m := <-s.msgs:
			if m.id != m.data.ID || m.event != m.data.Type {
				t.Errorf("SSE message id %d event %q carries event %d %q", m.id, m.event, m.data.ID, m.data.Type)
			}
			out = append(out, m)
		case <-deadline:
			ended := "still open"
			select {
			case <-s.done:
				ended = "ended by the server"
			default:
			}
			t.Fatalf("after %s the stream gave %d of %d messages (the stream is %s)", timeout, len(out), n, ended)
		}
	}
	return out
}

// none fails if a message comes within d.
func (s *sseStream) none(t testing.TB, d time.Duration) {
	t.Helper()
	select {
	case m := <-s.msgs:
		t.Errorf("unexpected SSE message: event %d %s of tenant %q", m.id, m.event, m.data.Tenant)
	case <-time.After(d):
	}
}

func msgIDs(ms []sseMsg) []int64 {
	out := make([]int64, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.id)
	}
	return out
}

// TestSSEResume: a reader that resumes with Last-Event-ID gets exactly the
// events it missed, then the live ones.
func TestSSEResume(t *testing.T) {
	eachDriver(t, func(t *testing.T, open opener) {
		l := openLog(t, open(t, "r1"), events.Config{}, nil)
		publish(t, l, "acme", events.SessionCreated, 5)

		for _, tc := range []struct {
			name   string
			resume string
			want   []int64
		}{
			{"after 2", "2", []int64{3, 4, 5}},
			{"after 0 replays everything", "0", []int64{1, 2, 3, 4, 5}},
			{"after the end", "5", nil},
			{"from another log (beyond the end)", "999", nil},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s := openSSE(t, l, "", tc.resume)
				if got := msgIDs(s.next(t, len(tc.want), 5*time.Second)); !slices.Equal(got, tc.want) {
					t.Errorf("replayed %v, want %v", got, tc.want)
				}
				s.none(t, 100*time.Millisecond)
			})
		}

		// Query parameter, for clients that cannot set the header; then live.
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { l.ServeSSE(w, r, "") }))
		t.Cleanup(srv.Close) // after the stream's own cleanup closed it
		s := connectSSE(t, srv.URL+"?last_event_id=3", http.Header{})
		if got := msgIDs(s.next(t, 2, 5*time.Second)); !slices.Equal(got, []int64{4, 5}) {
			t.Errorf("?last_event_id=3 replayed %v, want [4 5]", got)
		}
		fresh := openSSE(t, l, "", "")
		start := time.Now()
		publish(t, l, "acme", events.RunFinished, 1)
		for _, st := range []*sseStream{s, fresh} {
			m := st.next(t, 1, 5*time.Second)[0]
			if m.id != 6 || m.event != events.RunFinished || m.data.Tenant != "acme" || m.data.Time.IsZero() {
				t.Errorf("live message %+v", m)
			}
		}
		t.Logf("Publish → live SSE message: %s", time.Since(start))
		fresh.none(t, 100*time.Millisecond) // no replay without a resume point
	})
}

// TestSSETenantFilter: a tenant's stream carries its events only; the
// admin stream carries all.
func TestSSETenantFilter(t *testing.T) {
	eachDriver(t, func(t *testing.T, open opener) {
		lb := &logBuffer{}
		l := openLog(t, open(t, "r1"), events.Config{}, lb)
		// CI's run once got neither message on PostgreSQL, the stream
		// open: the log says what the handler met.
		defer func() {
			if t.Failed() {
				t.Logf("the log's log:\n%s", lb)
			}
		}()
		acme, admin := openSSE(t, l, "acme", "0"), openSSE(t, l, "", "0")
		publish(t, l, "acme", events.SessionCreated, 1)
		publish(t, l, "globex", events.SessionCreated, 1)
		publish(t, l, "", events.EgressDenied, 1)
		publish(t, l, "acme", events.SessionDeleted, 1)
		if got := msgIDs(acme.next(t, 2, 5*time.Second)); !slices.Equal(got, []int64{1, 4}) {
			t.Errorf("acme's stream: %v, want [1 4]", got)
		}
		acme.none(t, 150*time.Millisecond)
		if got := msgIDs(admin.next(t, 4, 5*time.Second)); !slices.Equal(got, []int64{1, 2, 3, 4}) {
			t.Errorf("the admin stream: %v, want [1 2 3 4]", got)
		}
	})
}

// TestSSEKeepaliveAndClose: an idle stream gets comment lines; Close ends
// every stream.
func TestSSEKeepaliveAndClose(t *testing.T) {
	l := openLog(t, sqliteOpener(t)(t, "r1"), events.Config{Keepalive: 100 * time.Millisecond}, nil)
	s := openSSE(t, l, "", "")
	deadline := time.After(5 * time.Second)
	for seen := 0; seen < 2; {
		select {
		case c := <-s.comments:
			if c == "keepalive" {
				seen++
			}
		case <-deadline:
			t.Fatal("no keepalive comments on an idle stream")
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the stream is still open after Close")
	}
}

func TestSSEBadLastEventID(t *testing.T) {
	l := openLog(t, sqliteOpener(t)(t, "r1"), events.Config{}, nil)
	for _, v := range []string{"abc", "-1", "1.5", "99999999999999999999"} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/v1/events", nil)
		req.Header.Set("Last-Event-ID", v)
		l.ServeSSE(rec, req, "")
		if rec.Code != http.StatusBadRequest {
			t.Errorf("Last-Event-ID %q: %d, want 400", v, rec.Code)
		}
	}
}
