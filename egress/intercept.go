package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"time"
)

// intercept serves a CONNECT to a host the policy inspects or that has a
// bound credential: TLS from the sandbox ends here (with a certificate
// from the gateway CA for the CONNECT host, so the server name is checked
// by the handshake itself), each request is decided (inspect) and given
// the credential that matches it, and goes on over a new TLS connection
// to the checked address, verified against the upstream roots. The
// secret exists only in the gateway's memory and on the wire to the
// server.
//
// HTTP/2 is refused by ALPN: only http/1.1 is offered, to the sandbox and
// to the server, so every request is one the proxy reads and decides.
func (h *Handle) intercept(ctx context.Context, conn net.Conn, br *bufio.Reader, up net.Conn, t target, v verdict, rec *connRecord) {
	client := tls.Server(bufferedConn{Conn: conn, r: br}, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if !sniMatches(hello.ServerName, t.host) {
				return nil, errSNIMismatch
			}
			return h.s.ca.leaf(t.host)
		},
	})
	hctx, cancel := context.WithTimeout(ctx, h.s.cfg.HandshakeTimeout)
	defer cancel()
	if err := client.HandshakeContext(hctx); err != nil {
		if errors.Is(err, errSNIMismatch) {
			rec.refused(ruleSNIMismatch, "the TLS server name is not the CONNECT host "+t.host)
		}
		return
	}
	server := tls.Client(up, &tls.Config{ServerName: t.host, RootCAs: h.s.cfg.UpstreamRoots,
		MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}})
	if err := server.HandshakeContext(hctx); err != nil {
		h.s.log.WarnContext(ctx, "egress upstream TLS failed", "host", t.host, "err", err)
		rec.failed(ruleDial, "TLS to "+t.String()+" failed")
		return
	}
	_ = conn.SetDeadline(time.Time{})
	h.relayRequests(ctx, client, server, t, v, rec)
}

var errSNIMismatch = errors.New("egress: TLS server name does not match the CONNECT host")

// readFinalResponse passes interim responses (100 Continue, 103 Early
// Hints) on to the client and returns the final one.
func readFinalResponse(sr *bufio.Reader, req *http.Request, client io.Writer) (*http.Response, error) {
	for {
		resp, err := http.ReadResponse(sr, req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode < 100 || resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			return resp, nil
		}
		if err := resp.Write(client); err != nil {
			return nil, err
		}
	}
}

// bufferedConn reads through the bufio.Reader that already holds the
// client's first bytes.
type bufferedConn struct {
	net.Conn
	r io.Reader
}

func (c bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
