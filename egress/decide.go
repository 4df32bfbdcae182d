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
	ruleSNIMismatch     = "egress.sni_mismatch"
	ruleHostMismatch    = "egress.host_mismatch"
	ruleTunnelCap       = "egress.tunnel_cap"
	ruleDial            = "egress.dial"
	ruleReload          = "egress.policy_reload"
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
	v := verdict{in: in, rule: d.Rule}
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
	key := approvalKey{session: h.b.SessionKey, target: t.String()}
	if h.s.sessionApproved(key) {
		v.allowed, v.human, v.rule = true, true, ruleSessionApproval
		return v
	}
	v.status = http.StatusForbidden
	if h.s.deps.Confirm == nil {
		v.rule, v.msg = "approval_unavailable", t.String()+" needs approval and no approval service is configured"
		return v
	}
	deadline := time.Now().Add(h.s.cfg.ApprovalTimeout)
	cctx, cancel := context.WithDeadline(ctx, deadline.Add(time.Second))
	defer cancel()
	reasons := make([]confirm.Reason, len(d.Reasons))
	for i, r := range d.Reasons {
		reasons[i] = confirm.Reason{Code: r.Code, Message: r.Message}
	}
	out, err := h.s.deps.Confirm.Confirm(cctx, confirm.Request{
		Kind: confirm.KindEgress, Target: t.String(), RequestID: h.b.RequestID, Tenant: h.b.Tenant,
		SessionID: h.b.SessionID, RiskLevel: h.b.Risk, Reasons: reasons, PolicyRevision: d.PolicyRevision,
		Principal: h.b.Principal, Deadline: deadline, Via: "egress proxy",
	})
	if err != nil {
		h.s.log.ErrorContext(ctx, "egress approval could not be asked", "session_id", h.b.SessionID, "target", t.String(), "err", err)
		v.rule, v.msg = "approval_unavailable", t.String()+" needs approval and the approval service failed"
		return v
	}
	rec.approval = &audit.Approval{ID: out.ApprovalID, Status: out.Status, DecidedBy: out.DecidedBy, Reason: out.Reason,
		TimeToDecideMS: out.TimeToDecide.Milliseconds()}
	h.s.deps.Metrics.approval(out.Status)
	if !out.Approved() {
		v.rule, v.msg = "approval_"+out.Status, t.String()+" was not approved ("+out.Status+")"
		return v
	}
	v.allowed, v.human, v.rule = true, true, ruleApproved
	if out.Scope == confirm.ScopeSession {
		h.s.approveSession(key)
		v.rule = ruleSessionApproval
	}
	return v
}

func reasonText(rs []policy.Reason) string {
	if len(rs) == 0 {
		return "no reason given"
	}
	return rs[0].Message
}
