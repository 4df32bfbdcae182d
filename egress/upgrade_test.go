package egress

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// wsUpstream is a WebSocket echo server (gorilla/websocket): it greets
// first (so bytes arrive right after its 101), then echoes every message.
// It logs each request it saw: method, path and Upgrade header.
type wsUpstream struct {
	mu  sync.Mutex
	log []string
}

func (s *wsUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.log = append(s.log, fmt.Sprintf("%s %s upgrade=%s", r.Method, r.URL.Path, r.Header.Get("Upgrade")))
	s.mu.Unlock()
	if !websocket.IsWebSocketUpgrade(r) {
		fmt.Fprintf(w, "plain %s", r.URL.Path)
		return
	}
	c, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer c.Close()
	if err := c.WriteMessage(websocket.TextMessage, []byte("hello")); err != nil {
		return
	}
	for {
		typ, msg, err := c.ReadMessage()
		if err != nil {
			return
		}
		if err := c.WriteMessage(typ, msg); err != nil {
			return
		}
	}
}

func (s *wsUpstream) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.log)
}

// wsSetup: api.test (TLS) and plain.test (plain HTTP) serve wsUpstream;
// on both, GET /ws is allowed (the handshake) and nothing else.
func wsSetup(t *testing.T) (*harness, *upstreams, *wsUpstream) {
	t.Helper()
	h, u := setup(t, func(u *upstreams) []rule {
		tlsWS := loopbackRule("ws", "allow", []int{u.tPort}, "api.test")
		tlsWS["methods"], tlsWS["paths"] = []string{"GET"}, []string{"/ws"}
		plainWS := loopbackRule("ws-plain", "allow", []int{u.plainPort}, "plain.test")
		plainWS["methods"], plainWS["paths"] = []string{"GET"}, []string{"/ws", "/plain"}
		// keep.test: a plain host allowed by its connection alone (no
		// request is decided on it).
		return []rule{tlsWS, plainWS, loopbackRule("keep", "allow", []int{u.plainPort}, "keep.test")}
	})
	ws := &wsUpstream{}
	u.tls.Config.Handler, u.plain.Config.Handler = ws, ws
	return h, u, ws
}

// TestWebSocketThroughInspectedHost: a wss:// handshake to an inspected
// host is decided like any request; allowed, the upgraded connection is
// spliced: the server's greeting, text and a 1 MiB binary message both
// ways; its record is the GET with status 101 and the bytes of the
// connection. A handshake on a path no rule allows gets the structured
// 403 and never reaches the server.
func TestWebSocketThroughInspectedHost(t *testing.T) {
	t.Parallel()
	h, u, ws := wsSetup(t)
	proxy := h.listen(binding("team-a", "ws"))
	roots := h.pki.pool.Clone()
	roots.AppendCertsFromPEM(h.svc.CACertPEM())
	d := &websocket.Dialer{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: proxy}),
		TLSClientConfig: &tls.Config{RootCAs: roots}, HandshakeTimeout: 10 * time.Second}
	c, resp, err := d.Dial(fmt.Sprintf("wss://api.test:%d/ws", u.tPort), nil)
	if err != nil {
		t.Fatalf("handshake: %v (%v)", err, resp)
	}
	big := make([]byte, 1<<20)
	_, _ = rand.Read(big)
	wsWant(t, c, websocket.TextMessage, []byte("hello"))
	for _, m := range []struct {
		typ  int
		data []byte
	}{{websocket.TextMessage, []byte("one")}, {websocket.BinaryMessage, big}, {websocket.TextMessage, []byte("two")}} {
		if err := c.WriteMessage(m.typ, m.data); err != nil {
			t.Fatal(err)
		}
		wsWant(t, c, m.typ, m.data)
	}
	_ = c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
	c.Close()

	_, resp, err = d.Dial(fmt.Sprintf("wss://api.test:%d/admin-ws", u.tPort), nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a handshake no rule allows: %v %v", err, resp)
	}
	if got := resp.Header.Get(HeaderDenied); got != `decision=deny; rule="ws"` {
		t.Errorf("%s: %q", HeaderDenied, got)
	}
	if got := ws.seen(); !slices.Equal(got, []string{"GET /ws upgrade=websocket"}) {
		t.Errorf("the server saw %q", got)
	}
	recs := h.requestRecords("ws", 2)
	var ok bool
	for _, r := range recs {
		if r.Detail["path"] == "/ws" {
			ok = r.HTTPStatus == http.StatusSwitchingProtocols && r.Action == "allow" && r.Detail["inspected"] == "true" &&
				r.Bytes > 2<<20
			if !ok {
				t.Errorf("the handshake's record: %+v", r)
			}
		}
	}
	if !ok {
		t.Errorf("no record of the handshake: %+v", recs)
	}
}

// TestWebSocketPlainAndNoH2C: a ws:// handshake sent to the proxy as an
// absolute-form request is decided and spliced the same way (frames
// written by hand: the client speaks to the proxy, not through CONNECT),
// and spliced too on a plain host its connection rule allows;
// an h2c upgrade is never passed on, so the server answers in HTTP/1.1.
func TestWebSocketPlainAndNoH2C(t *testing.T) {
	t.Parallel()
	h, u, ws := wsSetup(t)
	proxy := h.listen(binding("team-a", "wsp"))
	target := hostPort("plain.test", u.plainPort)
	// Inspected (plain.test) and decided by its connection (keep.test).
	for _, host := range []string{target, hostPort("keep.test", u.plainPort)} {
		plainWebSocket(t, proxy, host)
	}

	// h2c, over the intercepted TLS host and as a plain request: the
	// server sees no Upgrade and answers 200.
	status, body := h2cAttempt(t, h, proxy, fmt.Sprintf("https://api.test:%d/ws", u.tPort))
	if status != 200 || body != "plain /ws" {
		t.Errorf("h2c over TLS: %d %q", status, body)
	}
	status, body = h2cAttempt(t, h, proxy, fmt.Sprintf("http://%s/plain", target))
	if status != 200 || body != "plain /plain" {
		t.Errorf("h2c plain: %d %q", status, body)
	}
	want := []string{"GET /ws upgrade=websocket", "GET /ws upgrade=websocket", "GET /ws upgrade=", "GET /plain upgrade="}
	if got := ws.seen(); !slices.Equal(got, want) {
		t.Errorf("the server saw %q, want %q", got, want)
	}
}

// plainWebSocket does a ws:// handshake to host through proxy as an
// absolute-form request and exchanges a message.
func plainWebSocket(t *testing.T, proxy, host string) {
	t.Helper()
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "GET http://%[1]s/ws HTTP/1.1\r\nHost: %[1]s\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n"+
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", host)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Sec-WebSocket-Accept") != "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" {
		t.Fatalf("%s: handshake: %v %+v", host, err, resp)
	}
	if got := readFrame(t, br); got != "hello" {
		t.Fatalf("%s: greeting %q", host, got)
	}
	writeMaskedText(t, c, "ping")
	if got := readFrame(t, br); got != "ping" {
		t.Fatalf("%s: echo %q", host, got)
	}
}

// h2cAttempt sends a GET asking to upgrade to h2c through proxy.
func h2cAttempt(t *testing.T, h *harness, proxy, u string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	req.Header.Set("Connection", "Upgrade, HTTP2-Settings")
	req.Header.Set("Upgrade", "h2c")
	req.Header.Set("HTTP2-Settings", "AAMAAABkAARAAAAAAAIAAAAA")
	resp, err := h.client(proxy).Do(req)
	if err != nil {
		t.Fatalf("h2c %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func wsWant(t *testing.T, c *websocket.Conn, typ int, data []byte) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	gt, got, err := c.ReadMessage()
	if err != nil || gt != typ || !bytes.Equal(got, data) {
		t.Fatalf("read: type %d, %d bytes, %v; want type %d, %d bytes", gt, len(got), err, typ, len(data))
	}
}

// readFrame reads one unmasked, unfragmented text frame shorter than 126
// bytes (what the echo server sends here).
func readFrame(t *testing.T, br *bufio.Reader) string {
	t.Helper()
	var hdr [2]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		t.Fatal(err)
	}
	if hdr[0] != 0x81 || hdr[1]&0x80 != 0 || hdr[1] >= 126 {
		t.Fatalf("frame header % x", hdr)
	}
	p := make([]byte, hdr[1])
	if _, err := io.ReadFull(br, p); err != nil {
		t.Fatal(err)
	}
	return string(p)
}

// writeMaskedText writes s as one masked text frame (RFC 6455 5.2).
func writeMaskedText(t *testing.T, w io.Writer, s string) {
	t.Helper()
	var mask [4]byte
	binary.BigEndian.PutUint32(mask[:], 0x37fa213d)
	f := []byte{0x81, 0x80 | byte(len(s))}
	f = append(f, mask[:]...)
	for i := range len(s) {
		f = append(f, s[i]^mask[i%4])
	}
	if _, err := w.Write(f); err != nil {
		t.Fatal(err)
	}
}

// TestUpgradeOnlyListedProtocols: an upgrade to a protocol not on the
// list (websocket by default) gets the structured 403 and never reaches
// the server, on an inspected TLS host, an inspected plain host and a
// plain host decided by its connection alone, though a rule allows the
// handshake's GET there; a WebSocket handshake still goes through.
func TestUpgradeOnlyListedProtocols(t *testing.T) {
	t.Parallel()
	h, u, ws := wsSetup(t)
	proxy := h.listen(binding("team-a", "wsu"))
	urls := []string{fmt.Sprintf("https://api.test:%d/ws", u.tPort), fmt.Sprintf("http://%s/ws", hostPort("plain.test", u.plainPort)),
		fmt.Sprintf("http://%s/ws", hostPort("keep.test", u.plainPort))}
	for _, target := range urls {
		for _, proto := range []string{"tcp", "TLS/1.2", "websocket, tcp", "WebSocket, h2c, IRC/6.9"} {
			req, _ := http.NewRequest("GET", target, nil)
			req.Header.Set("Connection", "Upgrade")
			req.Header.Set("Upgrade", proto)
			resp, err := h.client(proxy).Do(req)
			if err != nil {
				t.Fatalf("%s upgrade %s: %v", target, proto, err)
			}
			if d := readDenied(t, resp); d.Rule != ruleUpgrade || d.Decision != "deny" || d.Error.Code != "policy_denied" ||
				!strings.Contains(d.Error.Message, "websocket") {
				t.Errorf("%s upgrade %s: %+v", target, proto, d)
			}
		}
	}
	if got := ws.seen(); len(got) != 0 {
		t.Errorf("the server saw %q", got)
	}
	plainWebSocket(t, proxy, hostPort("plain.test", u.plainPort))
	plainWebSocket(t, proxy, hostPort("keep.test", u.plainPort))
}

// TestRefusedUpgrade: the list names protocols by name, any version.
func TestRefusedUpgrade(t *testing.T) {
	allowed := Config{}.withDefaults().UpgradeProtocols
	cases := []struct {
		header string
		refuse string
	}{
		{"", ""},
		{"websocket", ""},
		{"WebSocket", ""},
		{"websocket/13", ""},
		{"h2c", ""}, // never passed on: removed, not refused
		{"tcp", "tcp"},
		{"TLS/1.2", "tls/1.2"},
		{"websocket, tcp", "tcp"},
	}
	for _, c := range cases {
		hd := http.Header{"Connection": {"Upgrade"}}
		if c.header != "" {
			hd.Set("Upgrade", c.header)
		}
		if got := refusedUpgrade(upgradeTokens(hd), allowed); got != c.refuse {
			t.Errorf("Upgrade %q: refused %q, want %q", c.header, got, c.refuse)
		}
	}
	if got := refusedUpgrade([]string{"websocket"}, Config{UpgradeProtocols: []string{}}.withDefaults().UpgradeProtocols); got != "websocket" {
		t.Errorf("an empty list passed %q", got)
	}
	if got := refusedUpgrade([]string{"irc/6.9"}, Config{UpgradeProtocols: []string{" IRC "}}.withDefaults().UpgradeProtocols); got != "" {
		t.Errorf("a configured protocol refused: %q", got)
	}
}
