package egress

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
)

// Upgrades (issue 33): a request that asks to switch protocols (an
// Upgrade header that Connection names, a WebSocket handshake among
// them) is decided like any other request on an inspected host: the
// policy sees its method, host, path and header names (Upgrade and
// Connection among them, so a rule can tell a handshake from a plain
// GET), and a refused one gets the usual 403. When it is allowed, the
// request goes to the server with its Upgrade header, and a 101 Switching
// Protocols answer to a protocol it asked for is passed back; from then on
// the proxy splices the two connections, both ways, until either side
// closes or the run ends. What flows after the 101 is not inspected, per
// message or otherwise: WebSocket frames are not HTTP requests, and the
// policy's say was the handshake's. The request's record has status 101,
// the bytes of the whole upgraded connection and its lifetime as its
// duration; the connection carries no further HTTP request.
//
// h2c is never upgraded: HTTP/2 in clear text would carry requests the
// proxy could not decide one by one. It is removed from the Upgrade
// header, as an Upgrade header that Connection does not name is, so the
// server answers in HTTP/1.1. A 101 to a protocol the request did not ask
// for is a 502, the connection closed.

// Only the protocols on Config.UpgradeProtocols (websocket by default)
// pass: a request that asks for any other ("Upgrade: tcp", "TLS/1.2") is
// refused with the structured 403 (rule egress.upgrade_protocol) before
// the policy is asked, on any host, decided by its connection or per
// request; a rule that allows a WebSocket handshake cannot let a raw TCP
// tunnel through. The policy sees the protocols asked as
// input.http.upgrade, lower-case, to decide among those.

// ruleUpgrade reports an upgrade to a protocol not on the list.
const ruleUpgrade = "egress.upgrade_protocol"

// upgradeTokens are the protocols a request asks to switch to, lower-case
// (input.http.upgrade); empty, not nil, for none.
func upgradeTokens(h http.Header) []string {
	out := []string{}
	if up := upgradeOf(h); up != "" {
		for _, p := range strings.Split(up, ",") {
			out = append(out, strings.ToLower(strings.TrimSpace(p)))
		}
	}
	return out
}

// refusedUpgrade is the first of asked (lower-case) that allowed does not
// name, by itself or by its name without a version; "" when all pass.
func refusedUpgrade(asked, allowed []string) string {
	for _, p := range asked {
		if !slices.Contains(allowed, p) && !slices.Contains(allowed, protocolName(p)) {
			return p
		}
	}
	return ""
}

// upgradeOf is the protocol list a request asks to switch to (its Upgrade
// header when Connection names "upgrade", h2c left out); "" for none.
func upgradeOf(h http.Header) string {
	if !hasToken(h.Values("Connection"), "upgrade") {
		return ""
	}
	var protos []string
	for _, v := range h.Values("Upgrade") {
		for _, p := range strings.Split(v, ",") {
			p = strings.TrimSpace(p)
			if p != "" && !strings.EqualFold(protocolName(p), "h2c") {
				protos = append(protos, p)
			}
		}
	}
	return strings.Join(protos, ", ")
}

// keepUpgrade puts the upgrade back on a request whose hop-by-hop headers
// were removed; no upgrade leaves it as it is.
func keepUpgrade(h http.Header, upgrade string) {
	if upgrade != "" {
		h.Set("Connection", "Upgrade")
		h.Set("Upgrade", upgrade)
	}
}

// switchedTo reports whether a 101 answer switches to a protocol the
// request asked for.
func switchedTo(resp *http.Response, asked string) bool {
	if asked == "" || !hasToken(resp.Header.Values("Connection"), "upgrade") {
		return false
	}
	got := protocolName(strings.TrimSpace(resp.Header.Get("Upgrade")))
	for _, p := range strings.Split(asked, ",") {
		if got != "" && strings.EqualFold(protocolName(strings.TrimSpace(p)), got) {
			return true
		}
	}
	return false
}

// protocolName is a protocol's name without its version ("TLS/1.2").
func protocolName(p string) string {
	name, _, _ := strings.Cut(p, "/")
	return name
}

func hasToken(values []string, token string) bool {
	for _, v := range values {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// writeSwitch writes the server's 101 answer to the client: its status
// line and headers (Connection and Upgrade kept: they are the switch).
func writeSwitch(w io.Writer, resp *http.Response) error {
	if _, err := fmt.Fprintf(w, "HTTP/1.1 101 %s\r\n", http.StatusText(http.StatusSwitchingProtocols)); err != nil {
		return err
	}
	if err := resp.Header.Write(w); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\r\n")
	return err
}

// switchProtocols passes a 101 answer to an allowed upgrade on and splices
// the connections; a 101 the request did not ask for is a 502.
func (h *Handle) switchProtocols(client net.Conn, cr *bufio.Reader, server net.Conn, sr *bufio.Reader, resp *http.Response,
	upgrade string, rr *reqRecord, t target) {
	if !switchedTo(resp, upgrade) {
		rr.failed(http.StatusBadGateway)
		rr.status = http.StatusBadGateway
		writeRefusal(client, http.StatusBadGateway, ruleDial, "the server at "+t.String()+" switched to a protocol the request did not ask for")
		return
	}
	if err := writeSwitch(client, resp); err != nil {
		rr.failed(resp.StatusCode)
		return
	}
	spliceUpgraded(client, cr, server, sr, &rr.up)
}

// spliceUpgraded carries an upgraded connection both ways until either
// side is done: what the client sent after its handshake (held in cr) and
// what the server sent after its 101 (in sr) go first. up counts the
// bytes sent to the server; the client's side counts what it is written
// itself.
func spliceUpgraded(client net.Conn, cr *bufio.Reader, server net.Conn, sr *bufio.Reader, up *atomic.Int64) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		n, _ := io.Copy(server, bufferedConn{Conn: client, r: cr})
		up.Add(n)
		closeWrite(server)
	}()
	_, _ = io.Copy(client, bufferedConn{Conn: server, r: sr})
	_ = server.Close()
	_ = client.SetReadDeadline(aLongTimeAgo)
	<-done
}

// allowedUpgrades names the list for a refusal's message.
func allowedUpgrades(list []string) string {
	if len(list) == 0 {
		return "no protocol"
	}
	return strings.Join(list, ", ")
}

// refuseUpgrade answers a request asking to switch to a protocol not on
// the list with the structured 403 and returns why; "" lets it on.
func (h *Handle) refuseUpgrade(client net.Conn, req *http.Request, asked []string, t target, path string) string {
	p := refusedUpgrade(asked, h.s.cfg.UpgradeProtocols)
	if p == "" {
		return ""
	}
	msg := "an upgrade to " + headerSafe(truncate(p, 64)) + " is refused: the proxy passes upgrades to " +
		allowedUpgrades(h.s.cfg.UpgradeProtocols) + " only"
	refusal{status: http.StatusForbidden, rule: ruleUpgrade, msg: msg, method: req.Method, host: t.host, port: t.port,
		path: path}.write(client, req.UserAgent())
	return msg
}
