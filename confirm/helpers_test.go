package confirm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/internal/pgtest"
)

// testHub is a hub on a real audit database behind a real listener. The
// test server trusts an X-Test-Approver header for identity: authentication
// is the api package's job and is tested there.
type testHub struct {
	*Hub
	db  audit.Database
	srv *httptest.Server
}

// openTestDB opens the database the hub tests run on: SQLite in a
// temporary directory, or, with SANDGATE_TEST_STORAGE_DRIVER=postgres (make
// test runs this package a second time so), a fresh schema in the test
// cluster. Closed when the test ends.
func openTestDB(t testing.TB) audit.Database {
	t.Helper()
	var (
		db  audit.Database
		err error
	)
	switch d := os.Getenv("SANDGATE_TEST_STORAGE_DRIVER"); d {
	case "", audit.DriverSQLite:
		db, err = audit.Open(context.Background(), filepath.Join(t.TempDir(), "audit.db"), audit.Options{})
	case audit.DriverPostgres:
		db, err = audit.OpenPostgres(context.Background(), pgtest.Schema(t), audit.Options{})
	default:
		t.Fatalf("SANDGATE_TEST_STORAGE_DRIVER=%q: want sqlite or postgres", d)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func newTestHub(t testing.TB, opts HubOptions) *testHub {
	t.Helper()
	db := opts.Store
	var sq audit.Database
	if db == nil {
		sq = openTestDB(t)
		opts.Store = sq
	} else {
		sq, _ = db.(audit.Database)
	}
	h, err := NewHub(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	th := &testHub{Hub: h, db: sq}
	th.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		who := Approver{Name: r.Header.Get("X-Test-Approver"), Role: "approver"}
		if ts := r.Header.Get("X-Test-Tenants"); ts != "" {
			who.Tenants = strings.Split(ts, ",")
		}
		if err := h.ServeWS(w, r, who); err != nil {
			http.Error(w, err.Error(), http.StatusForbidden)
		}
	}))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := h.Close(ctx); err != nil {
			t.Error(err)
		}
		th.srv.Close()
	})
	return th
}

func (th *testHub) wsURL() string { return "ws" + strings.TrimPrefix(th.srv.URL, "http") }

// wsClient is an approver's socket; a goroutine reads every message into
// events.
type wsClient struct {
	t      testing.TB
	ws     *websocket.Conn
	events chan msg
	held   []msg // read but not yet consumed by next
	closed chan struct{}
	// closeCode is the close frame's code, once closed is closed.
	closeCode int
}

// msg is a decoded server message plus the time it arrived.
type msg struct {
	Type       string          `json:"type"`
	ServerTime time.Time       `json:"server_time"`
	Approval   *View           `json:"approval"`
	Approver   *Approver       `json:"approver"`
	Pending    []View          `json:"pending"`
	History    []View          `json:"history"`
	Ref        string          `json:"ref"`
	OK         *bool           `json:"ok"`
	Error      *eventErr       `json:"error"`
	Raw        json.RawMessage `json:"-"`
	At         time.Time       `json:"-"`
}

func (th *testHub) dial(t testing.TB, name string) *wsClient {
	t.Helper()
	c, err := th.dialErr(name, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c.start(t)
}

func (th *testHub) dialErr(name string, hdr http.Header) (*wsClient, error) {
	if hdr == nil {
		hdr = http.Header{}
	}
	hdr.Set("X-Test-Approver", name)
	ws, res, err := websocket.DefaultDialer.Dial(th.wsURL(), hdr)
	if res != nil && res.Body != nil {
		res.Body.Close()
	}
	if err != nil {
		return nil, err
	}
	return &wsClient{ws: ws, events: make(chan msg, 4096), closed: make(chan struct{})}, nil
}

func (c *wsClient) start(t testing.TB) *wsClient {
	c.t = t
	go func() {
		defer close(c.closed)
		for {
			_, data, err := c.ws.ReadMessage()
			at := time.Now()
			if err != nil {
				if ce, ok := err.(*websocket.CloseError); ok {
					c.closeCode = ce.Code
				}
				return
			}
			var m msg
			if err := json.Unmarshal(data, &m); err != nil {
				t.Errorf("bad message %s: %v", data, err)
				return
			}
			m.Raw, m.At = data, at
			c.events <- m
		}
	}()
	t.Cleanup(func() { c.ws.Close() })
	return c
}

// next returns the first unconsumed message of type typ; messages of other
// types stay queued for later calls.
func (c *wsClient) next(typ string) msg {
	c.t.Helper()
	for i, m := range c.held {
		if m.Type == typ {
			c.held = append(c.held[:i], c.held[i+1:]...)
			return m
		}
	}
	timeout := time.After(10 * time.Second)
	for {
		select {
		case m := <-c.events:
			if m.Type == typ {
				return m
			}
			c.held = append(c.held, m)
		case <-c.closed:
			select {
			case m := <-c.events:
				if m.Type == typ {
					return m
				}
				c.held = append(c.held, m)
				continue
			default:
			}
			c.t.Fatalf("connection closed (code %d) while waiting for %s", c.closeCode, typ)
		case <-timeout:
			c.t.Fatalf("no %s event", typ)
		}
	}
}

func (c *wsClient) send(v any) {
	c.t.Helper()
	if err := c.ws.WriteJSON(v); err != nil {
		c.t.Fatal(err)
	}
}

// request builds a confirm.Request for code.
func request(session, code string) Request {
	sum := sha256.Sum256([]byte(code))
	return Request{
		RequestID: "req_" + session, SessionID: session, Language: "python", Code: code,
		CodeSHA256: hex.EncodeToString(sum[:]), RiskLevel: "HIGH",
		Patterns: []Pattern{{ID: "py.subprocess", Message: "runs a subprocess", Line: 1}},
		Reasons:  []Reason{{Code: "risk.high", Message: "HIGH risk needs approval"}},
		Executor: "subprocess", PolicyRevision: "sha256:rev", Principal: "agent-1",
		Context:  map[string]bool{"needs_browser": false, "needs_persistent_fs": false},
		Deadline: time.Now().Add(time.Minute),
	}
}

// asyncConfirm runs Confirm in a goroutine.
type asyncConfirm struct {
	done chan struct{}
	out  Outcome
	err  error
}

func confirmAsync(ctx context.Context, h *Hub, req Request) *asyncConfirm {
	a := &asyncConfirm{done: make(chan struct{})}
	go func() {
		defer close(a.done)
		a.out, a.err = h.Confirm(ctx, req)
	}()
	return a
}

func (a *asyncConfirm) wait(t testing.TB) Outcome {
	t.Helper()
	select {
	case <-a.done:
	case <-time.After(10 * time.Second):
		t.Fatal("Confirm did not return")
	}
	if a.err != nil {
		t.Fatalf("Confirm: %v", a.err)
	}
	return a.out
}

// waitPending waits until n approvals are pending.
func waitPending(t testing.TB, h *Hub, n int) []View {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if p := h.Pending(); len(p) == n {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("pending: %d, want %d", len(h.Pending()), n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (h *Hub) subCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

func (h *Hub) liveCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.live)
}
