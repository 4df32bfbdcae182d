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

// intercept serves a CONNECT to a host with a bound credential: TLS from
// the sandbox ends here (with a certificate from the gateway CA for the
// CONNECT host, so the server name is checked by the handshake itself),
// each request gets the credential's header, and goes on over a new TLS
// connection to the checked address, verified against the upstream
// roots. The secret exists only in the gateway's memory and on the wire
// to the server.
func (h *Handle) intercept(ctx context.Context, conn net.Conn, br *bufio.Reader, up net.Conn, t target, cred Credential, rec *connRecord) {
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
	h.relayRequests(client, server, t, cred, rec)
}

var errSNIMismatch = errors.New("egress: TLS server name does not match the CONNECT host")

// relayRequests forwards the client's requests one at a time, adding the
// credential header (replacing any value the sandbox sent).
func (h *Handle) relayRequests(client, server net.Conn, t target, cred Credential, rec *connRecord) {
	cr, sr := bufio.NewReader(client), bufio.NewReader(server)
	for {
		req, err := http.ReadRequest(cr)
		if err != nil {
			return
		}
		hdr, herr := parseAuthority(req.Host, 443)
		if herr != nil || hdr.host != t.host || hdr.port != t.port {
			rec.refused(ruleHostMismatch, "the Host header "+req.Host+" is not the CONNECT host "+t.String())
			writeRefusal(client, http.StatusMisdirectedRequest, ruleHostMismatch, "the Host header is not the CONNECT host")
			return
		}
		stripHopByHop(req.Header)
		req.Header.Set(cred.Header, cred.Value)
		if err := req.Write(server); err != nil {
			return
		}
		resp, err := readFinalResponse(sr, req, client)
		if err != nil {
			return
		}
		werr := resp.Write(client)
		resp.Body.Close()
		if werr != nil || resp.Close || req.Close {
			return
		}
	}
}

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
