package egress

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/policy"
)

// KindEgress is the audit record kind of one connection.
const KindEgress = "egress"

// auditWriteTimeout bounds one record write, detached from the run.
const auditWriteTimeout = 5 * time.Second

// connRecord accumulates what the audit record of one connection says.
type connRecord struct {
	id       string // links the connection's request records to it
	start    time.Time
	t        target
	pol      policy.EgressDecision
	approval *audit.Approval
	up, down atomic.Int64

	mu       sync.Mutex
	action   string // final: allow or deny
	rule     string
	outcome  string
	reasons  []audit.Reason
	addr     string
	closedBy string
	requests int // requests read on an intercepted connection
}

func newConnRecord() *connRecord { return &connRecord{id: newConnID(), start: time.Now()} }

func (r *connRecord) decision(d policy.EgressDecision) {
	r.pol = d
	r.reasons = append(r.reasons, auditReasons(d.Reasons)...)
}

// refused marks the connection denied by rule.
func (r *connRecord) refused(rule, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.action, r.rule, r.outcome = policy.ActionDeny, rule, audit.OutcomeDenied
	if msg != "" && (len(r.reasons) == 0 || r.pol.Action != policy.ActionDeny) {
		r.reasons = append(r.reasons, audit.Reason{Code: rule, Message: msg})
	}
}

// failed marks an allowed connection that could not be made.
func (r *connRecord) failed(rule, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.action, r.rule, r.outcome = policy.ActionAllow, rule, audit.OutcomeError
	r.reasons = append(r.reasons, audit.Reason{Code: rule, Message: msg})
}

func (r *connRecord) allowed(rule, addr string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.action, r.rule, r.outcome, r.addr = policy.ActionAllow, rule, audit.OutcomeOK, addr
}

// closed notes that something other than the peers ended the tunnel.
func (r *connRecord) closed(by string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closedBy = by
}

// finish writes the record. It is called once, before the client's
// connection is closed, so a client that saw its connection end can find
// the record.
func (h *Handle) finish(r *connRecord) {
	r.mu.Lock()
	rec := &audit.Record{
		RequestID: h.b.RequestID, Kind: KindEgress, Tenant: h.b.Tenant, SessionID: h.b.SessionID,
		Principal: h.b.Principal, RiskLevel: h.b.Risk, Action: r.action, Reasons: r.reasons,
		PolicyRevision: r.pol.PolicyRevision, DecisionID: r.pol.DecisionID, Approval: r.approval, Outcome: r.outcome,
		DurationMS: time.Since(r.start).Milliseconds(), Bytes: r.up.Load() + r.down.Load(),
		Detail: map[string]string{
			"host": r.t.host, "port": strconv.Itoa(r.t.port), "scheme": r.t.scheme, "rule": r.rule,
			"bytes_up": strconv.FormatInt(r.up.Load(), 10), "bytes_down": strconv.FormatInt(r.down.Load(), 10),
			"connection_id": r.id,
		},
	}
	if r.requests > 0 {
		rec.Detail["requests"] = strconv.Itoa(r.requests)
	}
	recordWouldBe(rec, r.pol)
	if r.addr != "" {
		rec.Detail["address"] = r.addr
	}
	if r.closedBy != "" {
		rec.Detail["closed_by"] = r.closedBy
	}
	if rec.Outcome == "" {
		rec.Outcome = audit.OutcomeError
	}
	r.mu.Unlock()
	h.s.deps.Metrics.connection(rec.Action, rec.Outcome, r.up.Load(), r.down.Load())
	if h.s.deps.Audit == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), auditWriteTimeout)
	defer cancel()
	if err := h.s.deps.Audit.Append(ctx, rec); err != nil {
		h.s.log.Error("egress audit record not written", "request_id", h.b.RequestID, "host", r.t.host, "err", err)
	}
}
