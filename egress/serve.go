package egress

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// ServeConn serves one connection a run opened to the proxy port
// (executors.Egress): one proxy request, decided, audited and, when
// allowed, carried through. It always closes conn.
func (h *Handle) ServeConn(ctx context.Context, conn net.Conn) {
	defer conn.Close()
	rec := newConnRecord()
	_ = conn.SetDeadline(time.Now().Add(h.s.cfg.HandshakeTimeout))
	br := bufio.NewReaderSize(conn, maxHeadBytes)
	req, t, err := readProxyRequest(br)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return // opened and closed without a request: nothing to decide
		}
		msg := "malformed proxy request"
		var bad *badRequest
		if errors.As(err, &bad) {
			msg = bad.msg
		}
		rec.t = t
		rec.refused(ruleBadRequest, msg)
		writeRefusal(conn, http.StatusBadRequest, ruleBadRequest, msg)
		h.finish(rec)
		return
	}
	rec.t = t
	// The session's slot is taken before the decision, so the cap also
	// bounds the connections waiting for a person (each one an approval
	// on the page).
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	tun := &tunnel{session: h.b.SessionKey, rec: rec, cancel: cancel}
	if !h.s.open(tun) {
		msg := "the session has too many open connections"
		rec.refused(ruleTunnelCap, msg)
		writeRefusal(conn, http.StatusTooManyRequests, ruleTunnelCap, msg)
		h.finish(rec)
		return
	}
	defer h.s.release(tun)
	_ = conn.SetDeadline(time.Time{}) // the approval wait has its own bound
	v := h.decide(ctx, t, rec)
	if !v.allowed {
		rec.refused(v.rule, v.msg)
		method := req.Method
		if method == http.MethodConnect {
			method = "" // the refusal names what was asked: host:port
		}
		h.withProposal(v.refusal(t, method, "")).write(conn, req.UserAgent())
		h.finish(rec)
		return
	}
	h.s.decided(tun, v)
	// The run's end or a reload that forbids the tunnel closes both sides.
	var up atomic.Pointer[net.Conn]
	stop := context.AfterFunc(tctx, func() {
		_ = conn.SetDeadline(aLongTimeAgo)
		if c := up.Load(); c != nil {
			_ = (*c).Close()
		}
	})
	defer stop()
	_ = conn.SetDeadline(time.Now().Add(h.s.cfg.HandshakeTimeout))
	upConn, err := h.s.dialChecked(tctx, v.addr, t.port)
	if err != nil {
		h.s.log.WarnContext(ctx, "egress dial failed", "host", t.host, "address", v.addr, "err", err)
		rec.failed(ruleDial, "could not connect to "+t.String())
		writeRefusal(conn, http.StatusBadGateway, ruleDial, "could not connect to "+t.String())
		h.finish(rec)
		return
	}
	// countingConn counts what the handshake and request paths move;
	// pipe counts the tunnel's bytes itself.
	counted := countingConn{Conn: upConn, read: &rec.down, written: &rec.up}
	var asConn net.Conn = counted
	up.Store(&asConn)
	if tctx.Err() != nil {
		_ = upConn.Close()
	}
	rec.allowed(v.rule, netip.AddrPortFrom(v.addr, uint16(t.port)).String())
	if t.scheme == schemeHTTPS {
		h.serveConnect(tctx, conn, br, counted, upConn, t, v, rec)
	} else {
		h.servePlain(tctx, conn, br, req, counted, t, v, rec)
	}
	_ = upConn.Close()
	h.finish(rec)
}

// serveConnect answers 200 and carries the tunnel. On a TLS port (443) the ClientHello
// is read first and its server name must be the CONNECT host; a host with
// a bound credential is intercepted instead.
func (h *Handle) serveConnect(ctx context.Context, conn net.Conn, br *bufio.Reader, up, bareUp net.Conn, t target, v verdict, rec *connRecord) {
	if err := writeConnectEstablished(conn, v.warnings); err != nil {
		return
	}
	if v.inspect || h.s.hasCredential(t.host) {
		h.intercept(ctx, conn, br, up, t, v, rec)
		return
	}
	if slices.Contains(h.s.cfg.TLSPorts, t.port) {
		sni, hello, err := peekClientHello(br)
		if err != nil || !sniMatches(sni, t.host) {
			msg := "the TLS server name " + quoteOrNone(sni) + " is not the CONNECT host " + t.host
			if err != nil && sni == "" {
				msg = "no TLS ClientHello on a CONNECT to port 443"
			}
			rec.refused(ruleSNIMismatch, msg)
			return
		}
		if _, err := up.Write(hello); err != nil {
			return
		}
	}
	_ = conn.SetDeadline(time.Time{})
	pipe(conn, br, bareUp, rec)
}

// servePlain forwards one absolute-form request in origin form and its
// response, then ends the connection (Connection: close): the client's
// next request is a new connection, decided on its own. On an inspected
// host the request is decided first, as on an intercepted tunnel. An
// allowed upgrade (ws://) that the server switches is spliced
// (upgrade.go); br holds what the client sent after its request.
func (h *Handle) servePlain(ctx context.Context, conn net.Conn, br *bufio.Reader, req *http.Request, up net.Conn, t target, v verdict, rec *connRecord) {
	_ = conn.SetDeadline(time.Time{})
	if !v.inspect {
		// A connection decision: no request record (the connection's
		// counts the bytes).
		if msg := h.refuseUpgrade(conn, req, upgradeTokens(req.Header), t, normalPath(req)); msg != "" {
			rec.refused(ruleUpgrade, msg)
			return
		}
		h.forwardPlain(conn, br, req, up, t, &reqRecord{warnings: v.warnings})
		return
	}
	if req.URL.Path == "" {
		req.URL.Path = "/"
	}
	rr := rec.request(req, t)
	defer h.finishRequest(rr)
	if !h.admit(ctx, conn, req, t, v, rr) {
		return
	}
	h.forwardPlain(countingWriterConn{Conn: conn, w: countingWriter{w: conn, n: &rr.down}}, br, req, up, t, rr)
}

// forwardPlain sends req to up and its response to conn, and sets rr's
// status (0 when there was none).
func (h *Handle) forwardPlain(conn net.Conn, br *bufio.Reader, req *http.Request, up net.Conn, t target, rr *reqRecord) {
	upgrade := upgradeOf(req.Header)
	stripHopByHop(req.Header)
	keepUpgrade(req.Header, upgrade)
	req.Close = upgrade == ""
	req.RequestURI = ""
	if err := req.Write(up); err != nil {
		return
	}
	sr := bufio.NewReader(up)
	resp, err := readFinalResponse(sr, req, conn)
	if err != nil {
		writeRefusal(conn, http.StatusBadGateway, ruleDial, "the server at "+t.String()+" did not answer")
		return
	}
	defer resp.Body.Close()
	rr.status = resp.StatusCode
	if resp.StatusCode == http.StatusSwitchingProtocols {
		h.switchProtocols(conn, br, up, sr, resp, upgrade, rr, t)
		return
	}
	stripHopByHop(resp.Header)
	addWarnings(resp.Header, rr.warnings)
	resp.Close = true
	_ = resp.Write(conn)
}

// countingWriterConn is a connection whose writes are counted.
type countingWriterConn struct {
	net.Conn
	w countingWriter
}

func (c countingWriterConn) Write(p []byte) (int, error) { return c.w.Write(p) }

// stripHopByHop removes the headers that belong to one hop (RFC 9110
// 7.6.1), and the proxy's own.
func stripHopByHop(hd http.Header) {
	for _, f := range hd.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			hd.Del(strings.TrimSpace(name))
		}
	}
	for _, name := range []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authorization",
		"Proxy-Authenticate", "Te", "Trailer", "Upgrade"} {
		hd.Del(name)
	}
}

// sniMatches reports whether a ClientHello's server name is host. An IP
// literal host has no server name (clients send none).
func sniMatches(sni, host string) bool {
	sni = strings.TrimSuffix(strings.ToLower(sni), ".")
	if sni == "" {
		_, err := netip.ParseAddr(host)
		return err == nil
	}
	return sni == host
}

func quoteOrNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return `"` + s + `"`
}
