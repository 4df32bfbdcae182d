package egress

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/sandgate/sandgate/policy"
)

// relayBufferBytes sizes the buffers an intercepted response passes
// through: several TLS records (16 KiB each).
const relayBufferBytes = 64 << 10

// relayRequests forwards the client's requests one at a time over the
// intercepted connection. On an inspected connection each request is
// decided on its own before anything of it reaches the server, the
// second of two pipelined requests as much as the first: a request is
// read only once the previous one's response is written. Each request
// gets the credential that matches it, replacing any value the sandbox
// sent in that header, and its own audit record.
func (h *Handle) relayRequests(ctx context.Context, client, server net.Conn, t target, v verdict, rec *connRecord) {
	cr, sr := bufio.NewReader(client), bufio.NewReaderSize(server, relayBufferBytes)
	for {
		req, err := http.ReadRequest(cr)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && ctx.Err() == nil && !timedOut(err) {
				writeRefusal(client, http.StatusBadRequest, ruleBadRequest, "malformed request on the connection to "+t.String())
			}
			return
		}
		if !h.relayOne(ctx, client, cr, server, sr, req, t, v, rec) {
			return
		}
	}
}

// relayOne decides, forwards and records one request; false ends the
// connection. An allowed upgrade that the server switches ends it too,
// after the upgraded connection (upgrade.go).
func (h *Handle) relayOne(ctx context.Context, client net.Conn, cr *bufio.Reader, server net.Conn, sr *bufio.Reader, req *http.Request,
	t target, v verdict, rec *connRecord) bool {
	rr := rec.request(req, t)
	defer h.finishRequest(rr)
	if hdr, err := parseAuthority(req.Host, t.port); err != nil || hdr.host != t.host || hdr.port != t.port {
		msg := "the Host header " + req.Host + " is not the CONNECT host " + t.String()
		rec.refused(ruleHostMismatch, msg)
		rr.refused(ruleHostMismatch, policy.ActionDeny, msg, http.StatusMisdirectedRequest)
		refusal{status: http.StatusMisdirectedRequest, rule: ruleHostMismatch, msg: "the Host header is not the CONNECT host"}.write(client, req.UserAgent())
		return false
	}
	if ok := h.admit(ctx, client, req, t, v, rr); !ok {
		return rr.keepAlive
	}
	upgrade := upgradeOf(req.Header)
	stripHopByHop(req.Header)
	keepUpgrade(req.Header, upgrade)
	if cred, ok := h.s.credentialFor(t.host, req.Method, normalPath(req)); ok {
		req.Header.Set(cred.Header, cred.Value)
		rr.credential = cred.Header
	}
	if req.Body != nil {
		req.Body = countingBody{ReadCloser: req.Body, n: &rr.up}
	}
	if err := req.Write(server); err != nil {
		rr.failed(http.StatusBadGateway)
		return false
	}
	cw := countingWriter{w: client, n: &rr.down}
	resp, err := readFinalResponse(sr, req, cw)
	if err != nil {
		rr.failed(http.StatusBadGateway)
		writeRefusal(client, http.StatusBadGateway, ruleDial, "the server at "+t.String()+" did not answer")
		return false
	}
	rr.status = resp.StatusCode
	addWarnings(resp.Header, rr.warnings)
	if resp.StatusCode == http.StatusSwitchingProtocols {
		h.switchProtocols(countingWriterConn{Conn: client, w: cw}, cr, server, sr, resp, upgrade, rr, t)
		return false
	}
	// A large buffer, so that the body goes out in full TLS records
	// (resp.Write would wrap the connection in a 4 KiB one).
	if resp.ContentLength < 0 || resp.ContentLength > prefetchAbove {
		resp.Body = newPrefetchReader(resp.Body)
	}
	bw := bufio.NewWriterSize(cw, relayBufferBytes)
	werr := resp.Write(bw)
	if werr == nil {
		werr = bw.Flush()
	}
	resp.Body.Close()
	if werr != nil {
		rr.failed(resp.StatusCode)
	}
	return werr == nil && !resp.Close && !req.Close
}

// admit decides req when the connection is inspected (and checks its
// path, which the policy and the credentials match on). A refused request
// is answered here; rr says whether the connection stays usable.
func (h *Handle) admit(ctx context.Context, client net.Conn, req *http.Request, t target, v verdict, rr *reqRecord) bool {
	path := normalPath(req)
	noBody := req.ContentLength == 0 && len(req.TransferEncoding) == 0
	if msg := checkPath(req); msg != "" {
		rr.refused(ruleBadPath, policy.ActionDeny, msg, http.StatusBadRequest)
		refusal{status: http.StatusBadRequest, rule: ruleBadPath, msg: msg, method: req.Method, host: t.host, port: t.port,
			path: path}.write(client, req.UserAgent())
		return false
	}
	upgrade := upgradeTokens(req.Header)
	if msg := h.refuseUpgrade(client, req, upgrade, t, path); msg != "" {
		rr.refused(ruleUpgrade, policy.ActionDeny, msg, http.StatusForbidden)
		return false
	}
	if !v.inspect {
		rr.allowed(v.rule)
		rr.warnings = v.warnings // the connection's decision is the request's
		return true
	}
	in := v.in
	in.HTTP = &policy.EgressHTTP{Method: req.Method, Scheme: t.scheme, Host: t.host, Port: t.port, Path: path,
		Query: req.URL.RawQuery, HeaderNames: headerNames(req.Header), Upgrade: upgrade}
	d := h.s.deps.Policy.DecideEgress(ctx, in)
	rr.decision(d)
	rv := verdict{rule: d.Rule, status: http.StatusForbidden}
	switch d.Action {
	case policy.ActionAllow:
		rv.allowed = true
	case policy.ActionRequireApproval:
		rv, rr.approval = h.ask(ctx, req.Method+" "+t.String()+path, d, rv, &in)
		rr.grant = rv.grant
	default:
		rv.msg = reasonText(d.Reasons) // the policy's reasons name the request
	}
	if rv.allowed {
		rr.allowed(rv.rule)
		rr.warnings = d.Warnings()
		return true
	}
	rr.keepAlive = noBody
	rr.refused(rv.rule, rv.decision, rv.msg, rv.status)
	ref := h.withProposal(rv.refusal(t, req.Method, path))
	ref.keepAlive = noBody
	ref.write(client, req.UserAgent())
	return false
}

// checkPath refuses a request whose path the policy could misread: not
// without an absolute path, or with a dot segment, plain, percent-encoded
// or behind an encoded slash or backslash ("/v1/%2e%2e/admin",
// "/v1/..%2fadmin"): a server that decodes before it resolves would reach
// a path no rule was asked about. An encoded slash alone stays allowed
// (GitLab's API names a project "group%2Fproject").
//
// A segment with path parameters counts by its text before the first ";":
// Tomcat and Spring drop ";..." from each segment before they resolve, so
// "/v1/items/..;/admin" reaches "/v1/admin" there while a rule, or a grant
// for "/v1/items", reads it as beneath "/v1/items". And "%25" before an
// encoded ".", "/" or "\" ("%252e%252e") is refused: a server that decodes
// twice reads a dot segment or a separator no rule saw.
func checkPath(req *http.Request) string {
	raw := req.URL.EscapedPath()
	if req.URL.Opaque != "" || !strings.HasPrefix(raw, "/") {
		return "the request target " + headerSafe(truncate(req.RequestURI, 200)) + " has no absolute path"
	}
	if doubleEncoded(raw) {
		return "a double-encoded dot or slash in the path is refused"
	}
	for _, seg := range strings.Split(raw, "/") {
		dec, err := url.PathUnescape(seg)
		if err != nil {
			return "the path is not valid percent-encoding"
		}
		for _, part := range strings.FieldsFunc(dec, func(r rune) bool { return r == '/' || r == '\\' }) {
			if name, _, _ := strings.Cut(part, ";"); name == "." || name == ".." {
				return "a dot segment in the path is refused"
			}
		}
	}
	return ""
}

// doubleEncoded reports whether raw, decoded once, still holds the
// encoding of ".", "/" or "\" (any case): "%252e", "%252F", "%255c", and
// "%25%32e" as much, since a literal "%" in the decoded text can only come
// from an encoded one.
func doubleEncoded(raw string) bool {
	dec, err := url.PathUnescape(raw)
	if err != nil {
		return false // checkPath refuses it segment by segment
	}
	dec = strings.ToLower(dec)
	for _, enc := range []string{"%2e", "%2f", "%5c"} {
		if strings.Contains(dec, enc) {
			return true
		}
	}
	return false
}

// normalPath is the request's path as rules and credentials match it: in
// RFC 3986's normal form (§6.2.2), percent-encoded unreserved characters
// decoded and the remaining escapes in upper case, so "/%61dmin" meets the
// rules about "/admin" and cannot slip past a deny written for it.
func normalPath(req *http.Request) string {
	raw := req.URL.EscapedPath()
	if !strings.Contains(raw, "%") {
		return raw
	}
	var b strings.Builder
	for i := 0; i < len(raw); i++ {
		if raw[i] == '%' && i+2 < len(raw) && ishex(raw[i+1]) && ishex(raw[i+2]) {
			c := unhex(raw[i+1])<<4 | unhex(raw[i+2])
			if unreserved(c) {
				b.WriteByte(c)
			} else {
				b.WriteString(strings.ToUpper(raw[i : i+3]))
			}
			i += 2
			continue
		}
		b.WriteByte(raw[i])
	}
	return b.String()
}

func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

func ishex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// headerNames are the request's header names, sorted, Host included;
// never their values.
func headerNames(h http.Header) []string {
	out := make([]string, 0, len(h)+1)
	out = append(out, "Host")
	for k := range h {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func timedOut(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// countingWriter counts the bytes written to the client.
type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// countingBody counts a request body as the server is sent it.
type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}
