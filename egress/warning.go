package egress

import (
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/policy"
)

// WarningHeader tells an agent that the egress policy let something
// through only because a rule that would have refused or held it is in
// warn mode (issue 32, enforcement modes): the proxy adds one per warning
// to the response of an HTTP request it forwards (a plain request, or one
// on an inspected or intercepted connection) and to the 200 that opens a
// CONNECT tunnel. Its value is the reason's code and its quoted message,
// never anything of the request beyond what the message names:
//
//	Sandgate-Warning: egress.denied; "gist.github.com:443 is denied by rule \"no-gist\""
//
// A dryrun reason is not told; both are in the audit record (its reasons
// with their enforcement, and would_be) and the decision log.
const WarningHeader = "Sandgate-Warning"

// warningValue is one warning as WarningHeader carries it.
func warningValue(r policy.Reason) string {
	return headerSafe(r.Code) + "; " + strconv.Quote(r.Message)
}

// addWarnings adds ws to a response's header.
func addWarnings(h http.Header, ws []policy.Reason) {
	for _, r := range ws {
		h.Add(WarningHeader, warningValue(r))
	}
}

// writeConnectEstablished answers a CONNECT that is let through, with the
// warnings of its decision.
func writeConnectEstablished(w io.Writer, ws []policy.Reason) error {
	var b strings.Builder
	b.WriteString("HTTP/1.1 200 Connection established\r\n")
	for _, r := range ws {
		b.WriteString(WarningHeader + ": " + warningValue(r) + "\r\n")
	}
	b.WriteString("\r\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// auditReasons are a decision's reasons as the audit record keeps them,
// with the mode of those that did not decide.
func auditReasons(rs []policy.Reason) []audit.Reason {
	out := make([]audit.Reason, 0, len(rs))
	for _, x := range rs {
		out = append(out, audit.Reason{Code: x.Code, Message: x.Message, Enforcement: x.Enforcement})
	}
	return out
}

// recordWouldBe puts a decision's would-be action and rule on its record.
func recordWouldBe(rec *audit.Record, d policy.EgressDecision) {
	if d.WouldBe == "" {
		return
	}
	rec.WouldBe = d.WouldBe
	rec.Detail["would_be_rule"] = d.WouldBeRule
}
