package confirm

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/errcode"
)

func TestApproveOverSocketAndConflict(t *testing.T) {
	th := newTestHub(t, HubOptions{})
	alice, bob := th.dial(t, "alice"), th.dial(t, "bob")
	for _, c := range []*wsClient{alice, bob} {
		if s := c.next(EventSnapshot); len(s.Pending) != 0 || s.Approver == nil {
			t.Fatalf("snapshot %s", s.Raw)
		}
	}
	a := confirmAsync(t.Context(), th.Hub, request("s1", "import subprocess\nsubprocess.run(['id'])"))
	reqA, reqB := alice.next(EventRequested).Approval, bob.next(EventRequested).Approval
	if reqA.ID != reqB.ID || reqA.Code == "" || reqA.Patterns[0].Line != 1 || reqA.Digest == "" || reqA.Status != StatusPending {
		t.Fatalf("requested %+v", reqA)
	}
	alice.send(map[string]any{"type": "decide", "ref": "r1", "id": reqA.ID, "decision": "approve", "reason": "looks fine", "digest": reqA.Digest})
	res := alice.next(EventResult)
	if res.Ref != "r1" || res.OK == nil || !*res.OK || res.Approval.Status != StatusApproved || res.Approval.DecidedBy != "alice" {
		t.Fatalf("result %s", res.Raw)
	}
	out := a.wait(t)
	if !out.Approved() || out.DecidedBy != "alice" || out.Reason != "looks fine" || out.ApprovalID != reqA.ID ||
		out.TimeToDecide <= 0 || out.DecidedAt.IsZero() {
		t.Fatalf("outcome %+v", out)
	}
	// Bob's late decision: 409 with who decided first.
	bob.send(map[string]any{"type": "decide", "ref": "r2", "id": reqA.ID, "decision": "deny", "digest": reqA.Digest})
	res = bob.next(EventResult)
	if *res.OK || res.Error.Code != errcode.Conflict || res.Approval == nil || res.Approval.DecidedBy != "alice" ||
		res.Approval.Status != StatusApproved {
		t.Fatalf("late result %s", res.Raw)
	}
	// Both saw the resolution.
	for _, c := range []*wsClient{alice, bob} {
		if r := c.next(EventResolved); r.Approval.Status != StatusApproved || r.Approval.Code != "" {
			t.Fatalf("resolved %s", r.Raw)
		}
	}
}

func TestFirstDecisionWinsUnderRace(t *testing.T) {
	th := newTestHub(t, HubOptions{})
	a := confirmAsync(t.Context(), th.Hub, request("s1", "x"))
	id := waitPending(t, th.Hub, 1)[0].ID
	const n = 16
	var wg sync.WaitGroup
	wins := make(chan View, n)
	conflicts := make(chan *ConflictError, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := "approve"
			if i%2 == 1 {
				d = "deny"
			}
			v, err := th.Decide(context.Background(), id, Approver{Name: string(rune('a' + i))}, Decision{Decision: d})
			var ce *ConflictError
			switch {
			case err == nil:
				wins <- v
			case errors.As(err, &ce):
				conflicts <- ce
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	close(wins)
	close(conflicts)
	if len(wins) != 1 || len(conflicts) != n-1 {
		t.Fatalf("%d wins, %d conflicts", len(wins), len(conflicts))
	}
	win := <-wins
	for ce := range conflicts {
		if ce.Approval.DecidedBy != win.DecidedBy || ce.Approval.Status != win.Status {
			t.Fatalf("conflict names %+v, winner %+v", ce.Approval, win)
		}
		if code, status, _ := errcode.Of(ce); code != errcode.Conflict || status != 409 {
			t.Fatalf("conflict maps to %s %d", code, status)
		}
	}
	if out := a.wait(t); out.Status != win.Status || out.DecidedBy != win.DecidedBy {
		t.Fatalf("outcome %+v, winner %+v", out, win)
	}
	// The database agrees, and refuses to change its mind.
	got, err := th.store.get(t.Context(), id)
	if err != nil || got.Status != win.Status || got.DecidedBy != win.DecidedBy {
		t.Fatalf("stored %+v %v", got, err)
	}
	err = th.db.WriteTx(t.Context(), func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, th.db.Rebind(`UPDATE approvals SET status = 'denied' WHERE id = ?`), id)
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "single-use") {
		t.Fatalf("updating a resolved row: %v", err)
	}
}

func TestDigestMismatchAndReplayRefused(t *testing.T) {
	th := newTestHub(t, HubOptions{})
	first := confirmAsync(t.Context(), th.Hub, request("s1", "print('approved code')"))
	v1 := waitPending(t, th.Hub, 1)[0]
	if _, err := th.Decide(t.Context(), v1.ID, Approver{Name: "p"}, Decision{Decision: "approve", Digest: v1.Digest}); err != nil {
		t.Fatal(err)
	}
	if out := first.wait(t); !out.Approved() {
		t.Fatalf("%+v", out)
	}

	// Different code in the same session: a new approval, a new digest.
	second := confirmAsync(t.Context(), th.Hub, request("s1", "import os\nos.system('rm -rf /tmp/x')"))
	v2 := waitPending(t, th.Hub, 1)[0]
	if v2.ID == v1.ID || v2.Digest == v1.Digest {
		t.Fatalf("second approval reuses id or digest: %+v", v2)
	}
	// Replaying the first approval's id does not approve the new code.
	_, err := th.Decide(t.Context(), v1.ID, Approver{Name: "p"}, Decision{Decision: "approve", Digest: v1.Digest})
	var ce *ConflictError
	if !errors.As(err, &ce) || ce.Approval.ID != v1.ID {
		t.Fatalf("replayed id: %v", err)
	}
	// A decision carrying the digest the approver saw for other code is
	// refused and changes nothing.
	_, err = th.Decide(t.Context(), v2.ID, Approver{Name: "p"}, Decision{Decision: "approve", Digest: v1.Digest})
	if !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("mismatched digest: %v", err)
	}
	if p := th.Pending(); len(p) != 1 || p[0].ID != v2.ID {
		t.Fatalf("pending after refusal: %+v", p)
	}
	if _, err := th.Decide(t.Context(), v2.ID, Approver{Name: "p"}, Decision{Decision: "deny", Reason: "no", Digest: v2.Digest}); err != nil {
		t.Fatal(err)
	}
	if out := second.wait(t); out.Status != StatusDenied || out.Reason != "no" {
		t.Fatalf("%+v", out)
	}
}

func TestDecisionValidation(t *testing.T) {
	th := newTestHub(t, HubOptions{})
	confirmAsync(t.Context(), th.Hub, request("s1", "x"))
	id := waitPending(t, th.Hub, 1)[0].ID
	for name, tc := range map[string]struct {
		id   string
		who  Approver
		d    Decision
		want error
	}{
		"bad decision": {id, Approver{Name: "p"}, Decision{Decision: "yes"}, ErrInvalidDecision},
		"long reason":  {id, Approver{Name: "p"}, Decision{Decision: "deny", Reason: strings.Repeat("x", MaxReasonBytes+1)}, ErrReasonTooLong},
		"no identity":  {id, Approver{}, Decision{Decision: "approve"}, ErrNoIdentity},
		"unknown id":   {"apr_nope", Approver{Name: "p"}, Decision{Decision: "approve"}, ErrNotFound},
		"wrong digest": {id, Approver{Name: "p"}, Decision{Decision: "approve", Digest: "sha256:00"}, ErrDigestMismatch},
	} {
		if _, err := th.Decide(t.Context(), tc.id, tc.who, tc.d); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
	if len(th.Pending()) != 1 {
		t.Fatal("a refused decision resolved the approval")
	}
}

func TestTimeout(t *testing.T) {
	th := newTestHub(t, HubOptions{})
	c := th.dial(t, "p")
	c.next(EventSnapshot)
	req := request("s1", "x")
	req.Deadline = time.Now().Add(200 * time.Millisecond)
	start := time.Now()
	out := confirmAsync(t.Context(), th.Hub, req).wait(t)
	if out.Status != StatusTimeout || out.DecidedBy != "" || time.Since(start) < 150*time.Millisecond {
		t.Fatalf("%+v after %v", out, time.Since(start))
	}
	c.next(EventRequested)
	if r := c.next(EventResolved); r.Approval.Status != StatusTimeout {
		t.Fatalf("%s", r.Raw)
	}
	if v, err := th.Get(t.Context(), out.ApprovalID); err != nil || v.Status != StatusTimeout {
		t.Fatalf("%+v %v", v, err)
	}
}

func TestDefaultTimeoutWithoutDeadline(t *testing.T) {
	th := newTestHub(t, HubOptions{Timeout: 100 * time.Millisecond})
	req := request("s1", "x")
	req.Deadline = time.Time{}
	if out := confirmAsync(t.Context(), th.Hub, req).wait(t); out.Status != StatusTimeout {
		t.Fatalf("%+v", out)
	}
}

func TestWithdrawnWhenAgentLeaves(t *testing.T) {
	th := newTestHub(t, HubOptions{})
	c := th.dial(t, "p")
	c.next(EventSnapshot)
	ctx, cancel := context.WithCancel(t.Context())
	a := confirmAsync(ctx, th.Hub, request("s1", "x"))
	id := c.next(EventRequested).Approval.ID
	cancel()
	if out := a.wait(t); out.Status != StatusWithdrawn {
		t.Fatalf("%+v", out)
	}
	r := c.next(EventResolved)
	if r.Approval.ID != id || r.Approval.Status != StatusWithdrawn {
		t.Fatalf("%s", r.Raw)
	}
	// Deciding it now is a conflict that says it was withdrawn.
	_, err := th.Decide(t.Context(), id, Approver{Name: "p"}, Decision{Decision: "approve"})
	var ce *ConflictError
	if !errors.As(err, &ce) || ce.Approval.Status != StatusWithdrawn {
		t.Fatalf("%v", err)
	}
}

func TestReconnectGetsPendingAndHistory(t *testing.T) {
	th := newTestHub(t, HubOptions{})
	done := confirmAsync(t.Context(), th.Hub, request("s0", "y"))
	v := waitPending(t, th.Hub, 1)[0]
	if _, err := th.Decide(t.Context(), v.ID, Approver{Name: "p"}, Decision{Decision: "deny", Reason: "nope"}); err != nil {
		t.Fatal(err)
	}
	done.wait(t)
	confirmAsync(t.Context(), th.Hub, request("s1", "a"))
	confirmAsync(t.Context(), th.Hub, request("s2", "b"))
	waitPending(t, th.Hub, 2)
	for i := range 2 {
		c := th.dial(t, "p")
		s := c.next(EventSnapshot)
		if len(s.Pending) != 2 || s.Pending[0].Code == "" || s.Approver.Name != "p" {
			t.Fatalf("connect %d: snapshot %s", i, s.Raw)
		}
		if len(s.History) != 1 || s.History[0].Status != StatusDenied || s.History[0].Reason != "nope" {
			t.Fatalf("connect %d: history %s", i, s.Raw)
		}
		c.ws.Close()
		<-c.closed
	}
	deadline := time.Now().Add(5 * time.Second)
	for th.liveCount() != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := th.liveCount(); n != 0 {
		t.Fatalf("%d connections still live after the clients left", n)
	}
}

func TestSlowClientDoesNotDelayOthers(t *testing.T) {
	// A hub that blocked on the slow client would hold every later event
	// until the slow client's write timed out (WriteTimeout); the fast
	// client must get each event far sooner than that.
	// SendBuffer 48: the fast client's queue must ride out the test's
	// bursts (80 requests, then 80 resolutions as their deadlines pass)
	// while the fast client's goroutines wait for a CPU on a loaded
	// machine (16 dropped it after 41 resolutions once, with every other
	// package's tests running); the slow client still fills it long before
	// the 80th request.
	th := newTestHub(t, HubOptions{SendBuffer: 48, WriteTimeout: 30 * time.Second})
	// The slow client never reads, with a tiny receive buffer: the kernel
	// soon stops taking data for it, its writer blocks, its queue fills,
	// and the hub drops it.
	d := websocket.Dialer{NetDialContext: (&net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return errors.Join(err, serr)
	}}).DialContext}
	slow, _, err := d.Dial(th.wsURL(), http.Header{"X-Test-Approver": {"slow"}})
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	fast := dialLoad(t, th, "fast") // reads without decoding the code
	defer fast.ws.Close()
	if err := fast.waitFor(EventSnapshot, 1, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return th.subCount() == 2 })

	big := strings.Repeat("# filler that fills socket buffers quickly\n", 1000) // ~44 KB per event
	const n = 80
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		time.Sleep(2 * time.Millisecond) // a burst, not one instant
		go func() {
			defer wg.Done()
			req := request(fmt.Sprintf("s%d", i), big+fmt.Sprint(i))
			req.Deadline = time.Now().Add(time.Second)
			_, _ = th.Confirm(t.Context(), req)
		}()
	}
	if err := fast.waitFor(EventRequested, n, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return th.subCount() == 1 })
	wg.Wait()
	if err := fast.waitFor(EventResolved, n, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	fast.mu.Lock()
	defer fast.mu.Unlock()
	// 15 s: half the slow client's 30 s WriteTimeout, so an event held
	// behind the slow client's blocked write still fails, with room for
	// a fast client starved of CPU on a loaded machine.
	for _, l := range fast.lat {
		if l > 15*time.Second {
			t.Fatalf("an event reached the fast client after %v", l)
		}
	}
}

func TestOriginCheck(t *testing.T) {
	th := newTestHub(t, HubOptions{AllowedOrigins: []string{"https://gate.example.com"}})
	host := strings.TrimPrefix(th.srv.URL, "http://")
	for _, tc := range []struct {
		origin string
		ok     bool
	}{
		{"", true}, // not a browser
		{"http://" + host, true},
		{"HTTP://" + strings.ToUpper(host), true},
		{"https://gate.example.com", true},
		{"https://gate.example.com:443", true},
		{"http://gate.example.com", false},
		{"https://evil.example.com", false},
		{"http://" + host + ".evil.com", false},
		{"https://" + host, false},
		{"null", false},
		{"http://" + host + "/path", false},
		{"file://", false},
	} {
		hdr := http.Header{}
		if tc.origin != "" {
			hdr.Set("Origin", tc.origin)
		}
		c, err := th.dialErr("p", hdr)
		if (err == nil) != tc.ok {
			t.Errorf("origin %q: err %v, want ok=%v", tc.origin, err, tc.ok)
		}
		if c != nil {
			c.ws.Close()
		}
	}
}

func TestNormalizeOrigin(t *testing.T) {
	for in, want := range map[string]string{
		"http://Example.COM:80":    "http://example.com",
		"https://example.com:8443": "https://example.com:8443",
		"http://[::1]:8080":        "http://[::1]:8080",
		"http://[::1]":             "http://[::1]",
		"http://u@example.com":     "",
		"ws://example.com":         "",
		"http://example.com?x=1":   "",
	} {
		got, ok := normalizeOrigin(in)
		if got != want || ok != (want != "") {
			t.Errorf("%q: %q %v, want %q", in, got, ok, want)
		}
	}
}

func TestTokenFromSubprotocol(t *testing.T) {
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("Sec-WebSocket-Protocol", "sandgate.v1, sandgate.bearer.c2VjcmV0LXRva2Vu")
	if tok, ok := TokenFromSubprotocol(r); !ok || tok != "secret-token" {
		t.Fatalf("%q %v", tok, ok)
	}
	r.Header.Set("Sec-WebSocket-Protocol", "sandgate.v1, sandgate.bearer.!!!")
	if _, ok := TokenFromSubprotocol(r); ok {
		t.Fatal("accepted a malformed token")
	}
	r.Header.Set("Sec-WebSocket-Protocol", "sandgate.v1")
	if _, ok := TokenFromSubprotocol(r); ok {
		t.Fatal("found a token where none was offered")
	}
}

func TestSubprotocolNegotiation(t *testing.T) {
	th := newTestHub(t, HubOptions{})
	d := websocket.Dialer{Subprotocols: []string{Subprotocol, BearerProtocolPrefix + "c2VjcmV0"}}
	ws, res, err := d.Dial(th.wsURL(), http.Header{"X-Test-Approver": {"p"}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if got := res.Header.Get("Sec-WebSocket-Protocol"); got != Subprotocol {
		t.Fatalf("selected %q: the token must never be echoed", got)
	}
}

func TestCloseInterruptsAndClosesConnections(t *testing.T) {
	th := newTestHub(t, HubOptions{})
	c := th.dial(t, "p")
	c.next(EventSnapshot)
	a := confirmAsync(t.Context(), th.Hub, request("s1", "x"))
	c.next(EventRequested)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := th.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if out := a.wait(t); out.Status != StatusInterrupted {
		t.Fatalf("%+v", out)
	}
	if r := c.next(EventResolved); r.Approval.Status != StatusInterrupted {
		t.Fatalf("%s", r.Raw)
	}
	select {
	case <-c.closed:
	case <-time.After(5 * time.Second):
		t.Fatal("connection not closed")
	}
	if c.closeCode != websocket.CloseGoingAway {
		t.Fatalf("close code %d", c.closeCode)
	}
	if th.liveCount() != 0 {
		t.Fatal("live connections after Close")
	}
	if _, err := th.Confirm(t.Context(), request("s2", "x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Confirm after Close: %v", err)
	}
	if _, err := th.dialErr("p", nil); err == nil {
		t.Fatal("connected after Close")
	}
}

func TestCloseForcesUnresponsiveClients(t *testing.T) {
	th := newTestHub(t, HubOptions{})
	// A raw client that completes the handshake and then never reads.
	c, err := th.dialErr("p", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.ws.Close()
	waitFor(t, func() bool { return th.liveCount() == 1 })
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := th.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Close took %v", d)
	}
	if th.liveCount() != 0 {
		t.Fatal("live connections after Close")
	}
}

func TestRestartResolvesLeftoversAsInterrupted(t *testing.T) {
	db, err := audit.Open(t.Context(), t.TempDir()+"/audit.db", audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// The first process asks and then "dies" without closing its hub.
	h1, err := NewHub(t.Context(), HubOptions{Store: db})
	if err != nil {
		t.Fatal(err)
	}
	ctx1, kill := context.WithCancel(t.Context())
	defer kill()
	confirmAsync(ctx1, h1, request("s1", "x"))
	id := waitPending(t, h1, 1)[0].ID

	th := newTestHub(t, HubOptions{Store: db})
	v, err := th.Get(t.Context(), id)
	if err != nil || v.Status != StatusInterrupted || v.Code != "" || v.Reason == "" {
		t.Fatalf("after restart: %+v %v", v, err)
	}
	c := th.dial(t, "p")
	s := c.next(EventSnapshot)
	if len(s.Pending) != 0 || len(s.History) != 1 || s.History[0].Status != StatusInterrupted {
		t.Fatalf("snapshot %s", s.Raw)
	}
	// The old process's approval cannot be decided by the new one.
	_, err = th.Decide(t.Context(), id, Approver{Name: "p"}, Decision{Decision: "approve"})
	var ce *ConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("%v", err)
	}
}

func TestConfirmRefusesInconsistentCodeHash(t *testing.T) {
	th := newTestHub(t, HubOptions{})
	req := request("s1", "print(1)")
	req.Code = "print(2)"
	if _, err := th.Confirm(t.Context(), req); !errors.Is(err, ErrCodeMismatch) {
		t.Fatalf("%v", err)
	}
}

func TestKeepalivePings(t *testing.T) {
	// 1 s, not tens of milliseconds: the hub's read deadline is two
	// intervals, renewed only by a pong, so a scheduling stall of about
	// one interval on a loaded machine would close the socket. Only
	// TestDeadClientIsDropped, where expiry is the point, uses a tiny one.
	th := newTestHub(t, HubOptions{PingInterval: time.Second})
	c, err := th.dialErr("p", nil)
	if err != nil {
		t.Fatal(err)
	}
	pings := make(chan struct{}, 10)
	c.ws.SetPingHandler(func(string) error {
		select {
		case pings <- struct{}{}:
		default:
		}
		return c.ws.WriteControl(websocket.PongMessage, nil, time.Now().Add(time.Second))
	})
	c.start(t)
	// Three pings take three intervals, past the 2-interval read deadline
	// set when the connection opened: only the pongs kept it open.
	for range 3 {
		select {
		case <-pings:
		case <-c.closed:
			t.Fatal("connection closed although the client answered pings")
		case <-time.After(5 * time.Second):
			t.Fatal("no ping")
		}
	}
	select {
	case <-c.closed:
		t.Fatal("connection closed although the client answered pings")
	default:
	}
}

func TestClientPingAndCloseAnsweredByTheWriter(t *testing.T) {
	th := newTestHub(t, HubOptions{})
	c, err := th.dialErr("p", nil)
	if err != nil {
		t.Fatal(err)
	}
	pong := make(chan string, 1)
	c.ws.SetPongHandler(func(data string) error { pong <- data; return nil })
	c.start(t)
	c.next(EventSnapshot)
	if err := c.ws.WriteControl(websocket.PingMessage, []byte("hello"), time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-pong:
		if got != "hello" {
			t.Fatalf("pong %q", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no pong")
	}
	if err := c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "bye"),
		time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the hub did not answer the close frame")
	}
	if c.closeCode != websocket.CloseNormalClosure {
		t.Fatalf("close code %d", c.closeCode)
	}
	waitFor(t, func() bool { return th.liveCount() == 0 })
}

func TestDeadClientIsDropped(t *testing.T) {
	th := newTestHub(t, HubOptions{PingInterval: 50 * time.Millisecond})
	// This client never answers pings (it never reads, so pongs are never
	// sent): after two intervals the hub closes it.
	c, err := th.dialErr("p", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.ws.Close()
	waitFor(t, func() bool { return th.liveCount() == 1 })
	waitFor(t, func() bool { return th.liveCount() == 0 })
}

func TestSocketRejectsGarbage(t *testing.T) {
	th := newTestHub(t, HubOptions{})
	c := th.dial(t, "p")
	c.next(EventSnapshot)
	if err := c.ws.WriteMessage(websocket.TextMessage, []byte("{")); err != nil {
		t.Fatal(err)
	}
	if e := c.next(EventError); e.Error.Code != errcode.InvalidRequest {
		t.Fatalf("%s", e.Raw)
	}
	c.send(map[string]any{"type": "hello", "ref": "x"})
	if e := c.next(EventError); e.Ref != "x" {
		t.Fatalf("%s", e.Raw)
	}
	c.send(map[string]any{"type": "decide", "ref": "y", "id": "apr_unknown", "decision": "approve"})
	if e := c.next(EventResult); *e.OK || e.Error.Code != errcode.NotFound {
		t.Fatalf("%s", e.Raw)
	}
	// An oversized message closes the connection (read limit).
	_ = c.ws.WriteMessage(websocket.TextMessage, []byte(strings.Repeat("x", maxClientMessage+1)))
	select {
	case <-c.closed:
	case <-time.After(5 * time.Second):
		t.Fatal("oversized message did not close the connection")
	}
}

func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestPublishedNamesThePendingApproval: Published is called once, with the
// id approvers see, while the approval is still pending, and the channel
// (Via) reaches the approvers' view without entering the digest.
func TestPublishedNamesThePendingApproval(t *testing.T) {
	th := newTestHub(t, HubOptions{})
	c := th.dial(t, "p")
	c.next(EventSnapshot)
	req := request("s1", "import subprocess\nsubprocess.run(['id'])")
	plain := req.Digest()
	req.Via = "MCP, client test-agent 1.0"
	published := make(chan string, 2)
	req.Published = func(id string) {
		if v, err := th.Get(t.Context(), id); err != nil || v.Status != StatusPending {
			t.Errorf("at Published, approval %s is %+v (%v), want pending", id, v, err)
		}
		published <- id
	}
	a := confirmAsync(t.Context(), th.Hub, req)
	seen := c.next(EventRequested).Approval
	var id string
	select {
	case id = <-published:
	case <-time.After(10 * time.Second):
		t.Fatal("Published was not called")
	}
	if id != seen.ID || seen.Via != req.Via || seen.Digest != plain {
		t.Fatalf("published %q; approvers saw id %q via %q digest %s (without Via: %s)", id, seen.ID, seen.Via, seen.Digest, plain)
	}
	if _, err := th.Decide(t.Context(), id, Approver{Name: "p"}, Decision{Decision: "deny", Reason: "no"}); err != nil {
		t.Fatal(err)
	}
	if out := a.wait(t); out.ApprovalID != id || out.Status != StatusDenied {
		t.Fatalf("outcome %+v", out)
	}
	if len(published) != 0 {
		t.Fatal("Published was called more than once")
	}
}
