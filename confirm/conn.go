package confirm

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/gorilla/websocket"

	"github.com/sandgate/sandgate/errcode"
)

// Subprotocol is the approval socket's WebSocket subprotocol; the server
// always selects it.
const Subprotocol = "sandgate.v1"

// BearerProtocolPrefix carries the bearer token in the WebSocket handshake.
//
// Socket authentication. A browser cannot set an Authorization header on a
// WebSocket, so the page offers two subprotocols, Subprotocol and
// BearerProtocolPrefix + base64url(token), and the server answers with
// Subprotocol only (the token is never echoed). The choice, against the
// alternatives:
//
//   - A query-string token (?token=) lands in access logs, proxy logs and
//     browser history; refused outright.
//   - A first "auth" message would upgrade unauthenticated connections and
//     hold goroutines and buffers for them until a timeout, and refusals
//     would be close codes instead of the API's 401/403 error bodies.
//   - The subprotocol header travels with the handshake, so the socket is
//     authenticated and authorised exactly like every other endpoint,
//     before the upgrade: a bad token gets 401, an agent token 403, and no
//     connection is ever upgraded for them. Request headers are not logged
//     by the gateway. base64url keeps any configured token within the
//     header's token characters, which browsers enforce.
//
// Non-browser clients may send "Authorization: Bearer <token>" instead.
const BearerProtocolPrefix = "sandgate.bearer."

// TokenFromSubprotocol returns the bearer token a client offered in
// Sec-WebSocket-Protocol, if any.
func TokenFromSubprotocol(r *http.Request) (string, bool) {
	for _, p := range websocket.Subprotocols(r) {
		if enc, ok := strings.CutPrefix(p, BearerProtocolPrefix); ok {
			b, err := base64.RawURLEncoding.DecodeString(enc)
			if err != nil || len(b) == 0 {
				return "", false
			}
			return string(b), true
		}
	}
	return "", false
}

// CheckOrigin is the defence against cross-site WebSocket hijacking. A
// browser always sends Origin on a WebSocket handshake; it must be the
// gateway's own origin (the scheme the request arrived on and its Host) or
// one of HubOptions.AllowedOrigins. "null" (sandboxed frames, file: pages)
// and anything malformed are refused.
//
// A handshake without Origin is accepted: only non-browser clients omit it,
// and the attack this check stops needs a victim's browser. Those clients
// could send any Origin they like anyway, so demanding one would add no
// protection, only break CLI tools. (The socket also carries no ambient
// credential — the token is presented explicitly — which is the second
// reason a hostile page cannot ride on an approver's session.)
//
// Behind a TLS-terminating proxy the browser's origin is https while the
// gateway sees plain http: list the public origin in AllowedOrigins.
// X-Forwarded-Proto is deliberately not trusted, since any client can set it.
func (h *Hub) CheckOrigin(r *http.Request) bool {
	vals := r.Header.Values("Origin")
	if len(vals) == 0 {
		return true
	}
	if len(vals) != 1 {
		return false
	}
	origin, ok := normalizeOrigin(vals[0])
	if !ok {
		return false
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if self, ok := normalizeOrigin(scheme + "://" + r.Host); ok && self == origin {
		return true
	}
	for _, a := range h.opts.AllowedOrigins {
		if n, ok := normalizeOrigin(a); ok && n == origin {
			return true
		}
	}
	return false
}

// normalizeOrigin lowercases scheme and host and drops the default port.
func normalizeOrigin(s string) (string, bool) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return "", false
	}
	host, port := strings.ToLower(u.Hostname()), u.Port()
	if (u.Scheme == "http" && port == "80") || (u.Scheme == "https" && port == "443") {
		port = ""
	}
	if port != "" {
		return u.Scheme + "://" + net.JoinHostPort(host, port), true
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return u.Scheme + "://" + host, true
}

// Socket limits.
const (
	maxClientMessage = 16 << 10
	maxRefLen        = 64
	// closeGrace is how long the writer waits for the client's answer to
	// its close frame before the connection is torn down.
	closeGrace = time.Second
)

// conn is one approver's socket.
type conn struct {
	hub *Hub
	ws  *websocket.Conn
	who Approver
	// send is the bounded queue the writer drains. Only the hub closes it,
	// under Hub.mu, when it detaches the connection.
	send       chan *websocket.PreparedMessage
	pongs      chan string // pongs the writer owes the client's pings
	writerDone chan struct{}
	// closeCode and closeText are the close frame the writer sends once
	// send is closed; set under Hub.mu before the close.
	closeCode int
	closeText string
	// forced is set when the hub dropped the connection (too slow): no
	// close frame, the socket is already closed.
	forced bool
}

// ServeWS upgrades r to the approval socket for who, who must already be
// authenticated as an approver (or admin). It serves the connection until
// it ends and returns nil; an error is returned only before the upgrade
// (ErrOrigin, ErrNoIdentity, ErrClosed), when nothing has been written, so
// the caller can answer with its own error body. A failed upgrade has been
// answered by the upgrader.
//
// On connect the approver gets a snapshot (every pending approval with its
// code, and recent decisions), then live events.
func (h *Hub) ServeWS(w http.ResponseWriter, r *http.Request, who Approver) error {
	if !h.CheckOrigin(r) {
		return ErrOrigin
	}
	if who.Name == "" {
		return ErrNoIdentity
	}
	if h.isClosed() {
		return ErrClosed
	}
	ws, err := h.upgrader.Upgrade(w, r, nil)
	if err != nil {
		h.log.DebugContext(r.Context(), "websocket upgrade failed", "err", err)
		return nil
	}
	c := &conn{hub: h, ws: ws, who: who, send: make(chan *websocket.PreparedMessage, h.opts.SendBuffer),
		pongs: make(chan string, 1), writerDone: make(chan struct{})}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseGoingAway, "the gateway is shutting down"),
			time.Now().Add(h.opts.WriteTimeout))
		_ = ws.Close()
		return nil
	}
	h.wg.Add(1)
	defer h.wg.Done()
	h.subs[c], h.live[c] = struct{}{}, struct{}{}
	c.enqueueLocked(h.snapshotLocked(who)) // first in the queue: no event can precede it
	h.mu.Unlock()
	h.log.InfoContext(r.Context(), "approver connected", "approver", who.Name, "role", who.Role, "tenants", who.Tenants)

	go c.writeLoop()
	c.readLoop()

	h.mu.Lock()
	h.detachLocked(c, websocket.CloseNormalClosure, "")
	h.mu.Unlock()
	<-c.writerDone
	_ = ws.Close()
	h.mu.Lock()
	delete(h.live, c)
	h.mu.Unlock()
	h.log.Info("approver disconnected", "approver", who.Name)
	return nil
}

// snapshotEvent is the first message on every connection. Pending and
// History are always arrays.
type snapshotEvent struct {
	Type       string            `json:"type"`
	ServerTime time.Time         `json:"server_time"`
	Approver   Approver          `json:"approver"`
	TimeoutS   int               `json:"timeout_s"`
	Pending    []json.RawMessage `json:"pending"`
	History    []View            `json:"history"`
}

func (h *Hub) snapshotLocked(who Approver) *websocket.PreparedMessage {
	ps := make([]*pending, 0, len(h.pending))
	for _, p := range h.pending {
		if who.Sees(p.view.Tenant) {
			ps = append(ps, p)
		}
	}
	ms := make([]*mirror, 0, len(ps))
	for _, p := range ps {
		ms = append(ms, &mirror{view: p.view, raw: p.raw})
	}
	ms = append(ms, h.remoteViewsLocked(who)...)
	slices.SortFunc(ms, func(a, b *mirror) int { return a.view.RequestedAt.Compare(b.view.RequestedAt) })
	raws := make([]json.RawMessage, len(ms))
	for i, m := range ms {
		raws[i] = m.raw
	}
	hist := []View{}
	for _, v := range slices.Backward(h.history) { // newest first
		if who.Sees(v.Tenant) {
			hist = append(hist, v)
		}
	}
	return prepare(mustJSON(snapshotEvent{Type: EventSnapshot, ServerTime: time.Now(), Approver: who,
		TimeoutS: int(h.opts.Timeout / time.Second), Pending: raws, History: hist}))
}

func prepare(b []byte) *websocket.PreparedMessage {
	pm, err := websocket.NewPreparedMessage(websocket.TextMessage, b)
	if err != nil {
		panic("confirm: prepare message: " + err.Error()) // only fails for invalid message types
	}
	return pm
}

// broadcastLocked queues msg, an event about an approval of tenant, on
// every subscribed connection whose approver sees that tenant, without
// blocking: a connection whose queue is full is dropped. The message is
// framed once for all of them.
func (h *Hub) broadcastLocked(tenant string, msg []byte) {
	if len(h.subs) == 0 {
		return
	}
	pm := prepare(msg)
	for c := range h.subs {
		if c.who.Sees(tenant) {
			c.enqueueLocked(pm)
		}
	}
}

// enqueueLocked queues pm for c, or drops c when its queue is full.
func (c *conn) enqueueLocked(pm *websocket.PreparedMessage) {
	if _, ok := c.hub.subs[c]; !ok {
		return
	}
	select {
	case c.send <- pm:
	default:
		c.hub.log.Warn("dropping a slow approver connection", "approver", c.who.Name, "queued", len(c.send))
		c.forced = true
		c.hub.detachLocked(c, websocket.CloseTryAgainLater, "too slow")
		_ = c.ws.Close() // unblocks a writer stuck on the socket
	}
}

// detachLocked stops events to c and tells its writer to finish: send the
// queued messages, then a close frame with code and text.
func (h *Hub) detachLocked(c *conn, code int, text string) {
	if _, ok := h.subs[c]; !ok {
		return
	}
	delete(h.subs, c)
	c.closeCode, c.closeText = code, text
	close(c.send)
}

// writeLoop is the connection's only writer: data frames, pings, pongs and
// the close frame.
func (c *conn) writeLoop() {
	defer close(c.writerDone)
	h := c.hub
	ping := time.NewTicker(h.opts.PingInterval)
	defer ping.Stop()
	for {
		select {
		case pm, ok := <-c.send:
			if !ok {
				c.closeFrame()
				return
			}
			_ = c.ws.SetWriteDeadline(time.Now().Add(h.opts.WriteTimeout))
			if err := c.ws.WritePreparedMessage(pm); err != nil {
				_ = c.ws.Close() // ends the reader, which detaches us
				return
			}
		case data := <-c.pongs:
			_ = c.ws.SetWriteDeadline(time.Now().Add(h.opts.WriteTimeout))
			if err := c.ws.WriteMessage(websocket.PongMessage, []byte(data)); err != nil {
				_ = c.ws.Close()
				return
			}
		case <-ping.C:
			_ = c.ws.SetWriteDeadline(time.Now().Add(h.opts.WriteTimeout))
			if err := c.ws.WriteMessage(websocket.PingMessage, nil); err != nil {
				_ = c.ws.Close()
				return
			}
		}
	}
}

// closeFrame sends the close frame the hub chose and gives the client a
// moment to answer before the reader gives up.
func (c *conn) closeFrame() {
	c.hub.mu.Lock()
	forced, code, text := c.forced, c.closeCode, c.closeText
	c.hub.mu.Unlock()
	if forced {
		return
	}
	_ = c.ws.SetWriteDeadline(time.Now().Add(c.hub.opts.WriteTimeout))
	_ = c.ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(code, text))
	_ = c.ws.SetReadDeadline(time.Now().Add(closeGrace))
}

// readLoop runs on the handler's goroutine until the connection ends.
// Any message, or a pong, proves the client alive.
//
// gorilla's default ping and close handlers answer from the reading
// goroutine; these hand the answer to the writer instead, so the writer
// stays the connection's only writer: a pong is queued for it (one at a
// time; a client that pings faster gets fewer pongs), and a close frame
// from the client ends the read loop, after which the writer sends the
// closing handshake's reply.
func (c *conn) readLoop() {
	wait := 2 * c.hub.opts.PingInterval
	c.ws.SetReadLimit(maxClientMessage)
	_ = c.ws.SetReadDeadline(time.Now().Add(wait))
	c.ws.SetPongHandler(func(string) error { return c.ws.SetReadDeadline(time.Now().Add(wait)) })
	c.ws.SetPingHandler(func(data string) error {
		select {
		case c.pongs <- data:
		default:
		}
		return c.ws.SetReadDeadline(time.Now().Add(wait))
	})
	c.ws.SetCloseHandler(func(int, string) error { return nil })
	for {
		_, data, err := c.ws.ReadMessage()
		if err != nil {
			return
		}
		_ = c.ws.SetReadDeadline(time.Now().Add(wait))
		c.handle(data)
	}
}

func (c *conn) handle(data []byte) {
	var m clientMessage
	if err := json.Unmarshal(data, &m); err != nil {
		c.reply(event{Type: EventError, ServerTime: time.Now(),
			Error: &eventErr{Code: errcode.InvalidRequest, Message: "the message is not valid JSON"}})
		return
	}
	if len(m.Ref) > maxRefLen {
		m.Ref = m.Ref[:maxRefLen]
	}
	switch m.Type {
	case "decide":
		v, err := c.hub.Decide(c.hub.base, m.ID, c.who, m.Decision)
		c.reply(resultEvent(m.Ref, v, err, c.hub))
	default:
		c.reply(event{Type: EventError, ServerTime: time.Now(), Ref: m.Ref,
			Error: &eventErr{Code: errcode.InvalidRequest, Message: "unknown message type"}})
	}
}

// resultEvent answers a socket decision like the REST endpoint would: ok
// with the resolved approval, or the error's code and message, with the
// approval's final state on a conflict.
func resultEvent(ref string, v View, err error, h *Hub) event {
	ok := err == nil
	ev := event{Type: EventResult, ServerTime: time.Now(), Ref: ref, OK: &ok}
	if ok {
		ev.Approval = mustJSON(v)
		return ev
	}
	code, status, msg := errcode.Of(err)
	if status >= 500 {
		h.log.Error("socket decision failed", "err", err)
	}
	ev.Error = &eventErr{Code: code, Message: msg}
	var ce *ConflictError
	if errors.As(err, &ce) {
		ev.Approval = mustJSON(ce.Approval)
	}
	return ev
}

func (c *conn) reply(ev event) {
	pm := prepare(mustJSON(ev))
	c.hub.mu.Lock()
	c.enqueueLocked(pm)
	c.hub.mu.Unlock()
}
