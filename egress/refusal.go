package egress

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/policy"
)

// HeaderDenied names the rule and the decision of every refusal the proxy
// writes, so a tool tells the proxy's 403 from a server's without parsing
// the body.
const HeaderDenied = "X-Sandgate-Denied"

// howToAsk is what a refusal tells an agent to do instead of retrying
// another way: every way out of the sandbox is this proxy (agents that
// took a 403 for a network fault retried with --no-proxy or another tool,
// sandbox-runtime #273).
const howToAsk = "This refusal is the sandgate egress policy's, not a network fault: retrying through another tool, " +
	"without the proxy or under another host name ends the same way. Ask the person running the gateway for an exception: " +
	"an egress rule in data.sandgate.config.egress.rules that allows it, or one with action require_approval, " +
	"which holds such requests until a person approves them (GET /v1/approvals)."

// refusal is one answer the proxy gives instead of the server's.
type refusal struct {
	status int
	rule   string
	// decision is deny, or approval_denied, approval_timeout... for a
	// request a person did not allow.
	decision string
	msg      string
	// The request, when one was read (never its query).
	method, host, path string
	port               int
	// proposal is the session's proposal endpoint, when the gateway has one.
	proposal string
	// keepAlive leaves the connection open after the answer (a request
	// without a body, whose refusal leaves the stream in step).
	keepAlive bool
}

// refusalBody is the JSON an agent reads.
type refusalBody struct {
	Error    refusalError `json:"error"`
	Decision string       `json:"decision"`
	Rule     string       `json:"rule"`
	Method   string       `json:"method,omitempty"`
	Host     string       `json:"host,omitempty"`
	Port     int          `json:"port,omitempty"`
	Path     string       `json:"path,omitempty"`
	HowToAsk string       `json:"how_to_ask"`
	Proposal *proposal    `json:"proposal,omitempty"`
}

// proposal is how to ask for an exception through the gateway's API.
type proposal struct {
	Endpoint string            `json:"endpoint"`
	Method   string            `json:"method"`
	Body     map[string]string `json:"body"`
}

type refusalError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// code is the stable error code of a refusal.
func (r refusal) code() errcode.Code {
	switch {
	case r.decision == "approval_timeout":
		return errcode.ApprovalTimeout
	case r.decision == "approval_unavailable":
		return errcode.ApprovalUnavailable
	case strings.HasPrefix(r.decision, "approval_"):
		return errcode.ApprovalDenied
	case r.status == http.StatusTooManyRequests:
		return errcode.QuotaExceeded
	case r.status == http.StatusBadRequest || r.status == http.StatusMisdirectedRequest:
		return errcode.InvalidRequest
	case r.status >= 500:
		return errcode.ExecutorUnavailable
	}
	return errcode.PolicyDenied
}

// write answers with r. The body is JSON; a client that shows a server's
// message only when it is text/plain (git prints such a body after
// "remote:") gets the message on a line of its own and the same JSON
// after it, as text/plain.
func (r refusal) write(w io.Writer, userAgent string) {
	if r.decision == "" {
		r.decision = policy.ActionDeny
	}
	msg := "sandgate egress: " + r.msg
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	body := refusalBody{Error: refusalError{Code: string(r.code()), Message: msg}, Decision: r.decision,
		Rule: r.rule, Method: r.method, Host: r.host, Port: r.port, Path: r.path, HowToAsk: howToAsk}
	if r.proposal != "" {
		body.Proposal = &proposal{Endpoint: r.proposal, Method: http.MethodPost, Body: map[string]string{
			"kind": "egress_host", "value": net.JoinHostPort(r.host, strconv.Itoa(r.port)), "justification": "why the task needs it"}}
	}
	_ = enc.Encode(body)
	ctype := "application/json"
	if textOnlyClient(userAgent) {
		ctype = "text/plain; charset=utf-8"
		buf = *bytes.NewBuffer(append([]byte(msg+"\n"+howToAsk+"\n"), buf.Bytes()...))
	}
	conn := "close"
	if r.keepAlive {
		conn = "keep-alive"
	}
	fmt.Fprintf(w, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n%s: decision=%s; rule=%s\r\nX-Sandgate-Rule: %s\r\nConnection: %s\r\nContent-Length: %d\r\n\r\n",
		r.status, http.StatusText(r.status), ctype, HeaderDenied, headerSafe(r.decision), strconv.Quote(headerSafe(r.rule)),
		headerSafe(r.rule), conn, buf.Len())
	_, _ = w.Write(buf.Bytes())
}

// textOnlyClient is a client known to show only a text/plain error body.
func textOnlyClient(userAgent string) bool {
	return strings.HasPrefix(strings.ToLower(userAgent), "git/")
}

// withProposal names the session's proposal endpoint in a policy
// refusal of a connection, when the gateway has one. A refused request on
// an inspected host gets none: an egress_host proposal opens connections
// only, so it would not let that request through.
func (h *Handle) withProposal(r refusal) refusal {
	if h.s.cfg.ProposalEndpoint != "" && r.status == http.StatusForbidden && r.host != "" && r.path == "" {
		r.proposal = strings.ReplaceAll(h.s.cfg.ProposalEndpoint, "{session}", url.PathEscape(h.b.SessionID))
	}
	return r
}

// writeRefusal answers a proxy request (a CONNECT or a plain request) the
// proxy will not serve.
func writeRefusal(w io.Writer, status int, rule, msg string) {
	refusal{status: status, rule: rule, msg: msg}.write(w, "")
}
