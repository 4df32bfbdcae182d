package egress

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/policy"
)

// KindEgressRequest is the audit record kind of one HTTP request on an
// intercepted connection. Its detail's connection_id is the connection
// record's, and seq its place on the connection, so the records of one
// connection are found together.
const KindEgressRequest = "egress_request"

// reqRecord accumulates what the audit record of one request says. It is
// used by the connection's one goroutine only.
type reqRecord struct {
	conn     *connRecord
	seq      int
	start    time.Time
	t        target
	method   string
	path     string // never the query: signed URLs and tokens travel there
	pol      policy.EgressDecision
	decided  bool
	approval *audit.Approval
	up, down atomic.Int64

	action, rule, outcome string
	reasons               []audit.Reason
	status                int
	credential            string          // the name of the header attached, never its value
	grant                 string          // the id of the grant that let it through
	warnings              []policy.Reason // told the agent on the response (WarningHeader)
	keepAlive             bool            // a refused request left the connection usable
}

// newConnID names a connection in its records.
func newConnID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// request starts the record of the next request on the connection.
func (r *connRecord) request(req *http.Request, t target) *reqRecord {
	r.mu.Lock()
	r.requests++
	seq := r.requests
	r.mu.Unlock()
	return &reqRecord{conn: r, seq: seq, start: time.Now(), t: t, method: req.Method, path: normalPath(req)}
}

func (r *reqRecord) decision(d policy.EgressDecision) {
	r.pol, r.decided = d, true
	r.reasons = append(r.reasons, auditReasons(d.Reasons)...)
}

func (r *reqRecord) allowed(rule string) {
	r.action, r.rule, r.outcome = policy.ActionAllow, rule, audit.OutcomeOK
}

// refused marks the request refused by rule with the proxy's status.
// decision is deny or approval_<status>.
func (r *reqRecord) refused(rule, decision, msg string, status int) {
	r.action, r.rule, r.outcome, r.status = policy.ActionDeny, rule, audit.OutcomeDenied, status
	if decision != "" && decision != policy.ActionDeny {
		r.reasons = append(r.reasons, audit.Reason{Code: decision, Message: msg})
	} else if len(r.reasons) == 0 && msg != "" {
		r.reasons = append(r.reasons, audit.Reason{Code: rule, Message: msg})
	}
}

// failed marks an allowed request the server did not answer in full.
func (r *reqRecord) failed(status int) {
	r.outcome = audit.OutcomeError
	if r.status == 0 {
		r.status = status
	}
}

// finishRequest writes the request's record and counts it.
func (h *Handle) finishRequest(r *reqRecord) {
	if r.action == "" {
		r.action, r.outcome = policy.ActionDeny, audit.OutcomeError
	}
	dur := time.Since(r.start)
	h.s.deps.Metrics.request(r.action, r.outcome, dur)
	rec := &audit.Record{
		RequestID: h.b.RequestID, Kind: KindEgressRequest, Tenant: h.b.Tenant, SessionID: h.b.SessionID,
		Principal: h.b.Principal, RiskLevel: h.b.Risk, Action: r.action, Reasons: r.reasons,
		PolicyRevision: r.pol.PolicyRevision, DecisionID: r.pol.DecisionID, Approval: r.approval, Outcome: r.outcome,
		DurationMS: dur.Milliseconds(), HTTPStatus: r.status, Bytes: r.up.Load() + r.down.Load(),
		Detail: map[string]string{
			"connection_id": r.conn.id, "seq": strconv.Itoa(r.seq), "method": r.method, "host": r.t.host,
			"port": strconv.Itoa(r.t.port), "scheme": r.t.scheme, "path": r.path, "rule": r.rule,
			"bytes_up": strconv.FormatInt(r.up.Load(), 10), "bytes_down": strconv.FormatInt(r.down.Load(), 10),
			"inspected": strconv.FormatBool(r.decided),
		},
	}
	if r.credential != "" {
		rec.Detail["credential_header"] = r.credential
	}
	if r.grant != "" {
		rec.Detail["grant_id"] = r.grant
	}
	recordWouldBe(rec, r.pol)
	if h.s.deps.Audit == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), auditWriteTimeout)
	defer cancel()
	if err := h.s.deps.Audit.Append(ctx, rec); err != nil {
		h.s.log.Error("egress request audit record not written", "request_id", h.b.RequestID, "host", r.t.host, "err", err)
	}
}
