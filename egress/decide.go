package egress

import (
	"context"
	"net/http"
	"net/netip"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/confirm"
	"github.com/sandgate/sandgate/policy"
)

// Rules the proxy itself reports (the policy's rules have their own names).
const (
	ruleBadRequest      = "egress.bad_request"
	ruleUnresolved      = "egress.unresolved"
	ruleSessionApproval = "approval.session"
	ruleApproved        = "approval.once"
	ruleGrant           = "approval.grant"
	ruleSNIMismatch     = "egress.sni_mismatch"
	ruleHostMismatch    = "egress.host_mismatch"
	ruleTunnelCap       = "egress.tunnel_cap"
	ruleDial            = "egress.dial"
	ruleReload          = "egress.policy_reload"
	ruleNoCA            = "egress.no_ca"
	ruleBadPath         = "egress.bad_path"
)

// verdict is the outcome of deciding one connection.
type verdict struct {
	allowed bool
	status  int    // the refusal's HTTP status
	rule    string // what decided, policy or proxy
	msg     string
	addr    netip.Addr // the checked address to dial
	in      policy.EgressInput
	human   bool // a person approved it (kept open through reloads that still require approval)
	// inspect: each HTTP request on the connection is decided.
	inspect bool
	// decision is the refusal's decision: deny, or approval_<status>
	// when a person did not allow it.
	decision string
	// grant is the id of the grant that answered for a person.
	grant string
	// warnings are the decision's reasons in warn mode, told the agent
	// (WarningHeader) when it is let through.
	warnings []policy.Reason
}

// refusal is v's answer to the client, for what was asked of t.
func (v verdict) refusal(t target, method, path string) refusal {
	return refusal{status: v.status, rule: v.rule, decision: v.decision, msg: v.msg, method: method, host: t.host, port: t.port, path: path}
}

// decide resolves t, asks the policy and, when it says so, a person.
func (h *Handle) decide(ctx context.Context, t target, rec *connRecord) verdict {
	rctx, cancel := context.WithTimeout(ctx, h.s.cfg.HandshakeTimeout)
	addrs, err := h.s.resolve(rctx, t.host)
	cancel()
	if err != nil {
		// The policy still decides (an unresolved host is its deny), so
		// the rule and reason come from one place.
		addrs = nil
	}
	in := h.policyInput(t, addrs)
	d := h.s.deps.Policy.DecideEgress(ctx, in)
	rec.decision(d)
	v := verdict{in: in, rule: d.Rule, inspect: d.Inspect, warnings: d.Warnings()}
	if d.Inspect && h.s.ca == nil && d.Action != policy.ActionDeny {
		v.status, v.rule, v.msg = http.StatusForbidden, ruleNoCA, t.String()+" is to be inspected and the gateway has no CA to do it"
		return v
	}
	switch d.Action {
	case policy.ActionAllow:
	case policy.ActionRequireApproval:
		v = h.approve(ctx, t, d, v, rec)
		if !v.allowed {
			return v
		}
	default:
		v.status, v.msg = http.StatusForbidden, t.String()+" is denied: "+reasonText(d.Reasons)
		return v
	}
	if len(addrs) == 0 {
		// A policy that allows a host that did not resolve has nothing to
		// dial.
		v.status, v.rule, v.msg = http.StatusBadGateway, ruleUnresolved, "host "+t.host+" did not resolve"
		return v
	}
	v.allowed, v.addr = true, addrs[0]
	return v
}

// approve asks a person about t, unless this session already has an
// answer for it. The wait is bounded by the approval timeout (a deny) and
// by the run's context.
func (h *Handle) approve(ctx context.Context, t target, d policy.EgressDecision, v verdict, rec *connRecord) verdict {
	v, approval := h.ask(ctx, t.String(), d, v, nil)
	if approval != nil {
		rec.approval = approval
	}
	return v
}

// ask asks a person about target (host:port, or a request's method,
// host:port and path), unless this session already has an answer for it,
// and returns the verdict and the approval's record, if one was asked.
// in is a held request's decision input: the approval service puts it to
// the egress grant policy first, and a grant that covers it answers
// instead of a person (its id is the approval's).
func (h *Handle) ask(ctx context.Context, target string, d policy.EgressDecision, v verdict, in *policy.EgressInput) (verdict, *audit.Approval) {
	key := approvalKey{session: h.b.SessionKey, target: target}
	if h.s.sessionApproved(key) {
		v.allowed, v.human, v.rule = true, true, ruleSessionApproval
		return v, nil
	}
	v.status = http.StatusForbidden
	if h.s.deps.Confirm == nil {
		v.rule, v.msg = "approval_unavailable", target+" needs approval and no approval service is configured"
		v.decision = v.rule
		return v, nil
	}
	deadline := time.Now().Add(h.s.cfg.ApprovalTimeout)
	cctx, cancel := context.WithDeadline(ctx, deadline.Add(time.Second))
	defer cancel()
	reasons := make([]confirm.Reason, len(d.Reasons))
	for i, r := range d.Reasons {
		reasons[i] = confirm.Reason{Code: r.Code, Message: r.Message}
	}
	out, err := h.s.deps.Confirm.Confirm(cctx, confirm.Request{
		Kind: confirm.KindEgress, Target: target, RequestID: h.b.RequestID, Tenant: h.b.Tenant,
		SessionID: h.b.SessionID, RiskLevel: h.b.Risk, Reasons: reasons, PolicyRevision: d.PolicyRevision,
		Principal: h.b.Principal, Deadline: deadline, Via: "egress proxy", Egress: in,
	})
	if err != nil {
		h.s.log.ErrorContext(ctx, "egress approval could not be asked", "session_id", h.b.SessionID, "target", target, "err", err)
		v.rule, v.msg = "approval_unavailable", target+" needs approval and the approval service failed"
		v.decision = v.rule
		return v, nil
	}
	approval := &audit.Approval{ID: out.ApprovalID, Status: out.Status, DecidedBy: out.DecidedBy, Reason: out.Reason,
		TimeToDecideMS: out.TimeToDecide.Milliseconds()}
	h.s.deps.Metrics.approval(out.Status)
	if !out.Approved() {
		v.rule, v.msg = "approval_"+out.Status, target+" was not approved ("+out.Status+")"
		v.decision = v.rule
		return v, approval
	}
	v.allowed, v.human, v.rule = true, true, ruleApproved
	switch out.Scope {
	case confirm.ScopeGrant:
		v.rule, v.grant = ruleGrant, out.ApprovalID
	case confirm.ScopeSession:
		h.s.approveSession(key)
		v.rule = ruleSessionApproval
	}
	return v, approval
}

func reasonText(rs []policy.Reason) string {
	if len(rs) == 0 {
		return "no reason given"
	}
	return rs[0].Message
}
