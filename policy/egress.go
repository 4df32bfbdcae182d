package policy

import (
	"context"
	"fmt"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
)

// EgressQuery is the rule asked once per connection a run opens through
// the egress proxy (DESIGN.md §9).
const EgressQuery = "data.sandgate.egress.decision"

// EgressInput is one connection a run granted network is about to open.
type EgressInput struct {
	Mode string
	Host string
	Port int
	// Scheme is "https" for a CONNECT tunnel, "http" for a plain request.
	Scheme    string
	SessionID string
	Tenant    string
	Principal string
	RequestID string
	// Risk is the run's risk level.
	Risk string
	// Resolved are the addresses the gateway resolved for Host and will
	// dial (IPv4-mapped IPv6 given as IPv4): the policy checks these, not
	// the name, which keeps DNS rebinding out.
	Resolved []string
	// GatewayAddresses are the gateway host's own addresses, refused
	// like loopback unless a rule names them.
	GatewayAddresses []string
	// HTTP is one request on a connection the policy marked for
	// inspection (EgressDecision.Inspect); nil when the connection itself
	// is decided. It never holds header values or a body.
	HTTP *EgressHTTP
}

// EgressHTTP is one HTTP request an inspected connection carries.
type EgressHTTP struct {
	Method string
	Scheme string
	Host   string
	Port   int
	// Path is the request's path as sent (escaped); Query the raw query
	// string without '?'.
	Path  string
	Query string
	// HeaderNames are the request's header names, canonical and sorted;
	// the values stay out of the policy (they carry credentials).
	HeaderNames []string
	// Upgrade are the protocols the request asks to switch to (its Upgrade
	// header when Connection names it, h2c left out), lower-case as sent
	// ("websocket", "tls/1.2"); empty for none. The proxy passes only
	// protocols on its list (egress.Config.UpgradeProtocols); within it, a
	// rule decides on this, not on the header's name alone.
	Upgrade []string
}

// EgressDecision is the answer for one connection.
type EgressDecision struct {
	Action string `json:"action"`
	// Rule names the rule that decided (a rule's name, "default", or the
	// reason code of a built-in refusal such as egress.blocked_address).
	Rule           string   `json:"rule"`
	Reasons        []Reason `json:"reasons"`
	PolicyRevision string   `json:"policy_revision"`
	// DecisionID is as in Decision.
	DecisionID string `json:"decision_id,omitempty"`
	// Inspect, on a connection decision, asks the proxy to terminate TLS
	// and decide each HTTP request on the connection (a rule with
	// methods, paths or query matchers applies to the host).
	Inspect bool `json:"inspect,omitempty"`
	// WouldBe and WouldBeRule are the action and rule the decision would
	// have had with its dryrun and warn reasons enforced (enforcement
	// modes, the end of egress.rego); empty when that is Action. The audit record and
	// the decision log show them.
	WouldBe     string `json:"would_be,omitempty"`
	WouldBeRule string `json:"would_be_rule,omitempty"`
}

// Warnings are the reasons in warn mode: what the agent is told about
// rules that would have refused it (the egress proxy's Sandgate-Warning
// header).
func (d EgressDecision) Warnings() []Reason {
	var out []Reason
	for _, r := range d.Reasons {
		if r.Enforcement == EnforcementWarn {
			out = append(out, r)
		}
	}
	return out
}

// Allowed reports whether the connection may proceed without approval.
func (d EgressDecision) Allowed() bool { return d.Action == ActionAllow }

// Map builds the OPA input.
func (in EgressInput) Map() map[string]any {
	m := map[string]any{
		"mode": in.Mode, "host": in.Host, "port": in.Port, "scheme": in.Scheme,
		"session_id": in.SessionID, "tenant": in.Tenant, "principal": in.Principal,
		"request_id": in.RequestID, "risk": in.Risk,
		"resolved": strings2any(in.Resolved), "gateway_addresses": strings2any(in.GatewayAddresses),
	}
	if in.HTTP != nil {
		m["http"] = map[string]any{
			"method": in.HTTP.Method, "scheme": in.HTTP.Scheme, "host": in.HTTP.Host, "port": in.HTTP.Port,
			"path": in.HTTP.Path, "query": in.HTTP.Query, "header_names": strings2any(in.HTTP.HeaderNames),
			"upgrade": strings2any(in.HTTP.Upgrade),
		}
	}
	return m
}

// logged is the input as the decision log gets it: the request's query
// left out, where signed URLs and tokens travel (as for the browser's
// URL). The policy decided on the whole request.
func (in EgressInput) logged() EgressInput {
	if in.HTTP != nil && in.HTTP.Query != "" {
		h := *in.HTTP
		h.Query = ""
		in.HTTP = &h
	}
	return in
}

// DecideEgress evaluates data.sandgate.egress.decision. Like Decide it
// never errors: every failure, and a tree without the egress package, is a
// deny. It is logged like Decide.
func (e *Engine) DecideEgress(ctx context.Context, in EgressInput) EgressDecision {
	c := e.cur.Load()
	input := in.Map()
	d := e.decideEgress(ctx, c, input)
	d.DecisionID = newDecisionID()
	e.shadowEgress(ctx, input, d)
	e.logDecision(logEvent{id: d.DecisionID, path: egressLogPath, input: in.logged().Map(), result: d, c: c})
	return d
}

func (e *Engine) decideEgress(ctx context.Context, c *compiled, input map[string]any) EgressDecision {
	if c == nil {
		return EgressDecision{Action: ActionDeny, Rule: ReasonNotLoaded, Reasons: []Reason{{Code: ReasonNotLoaded, Message: "no policy is loaded"}}}
	}
	return e.egressDecision(ctx, c, c.egress, rego.EvalInput(input))
}

// egressDecision evaluates an egress decision query of c (the decision,
// or a replay's) with input, failing closed.
func (e *Engine) egressDecision(ctx context.Context, c *compiled, pq rego.PreparedEvalQuery, input rego.EvalOption) EgressDecision {
	v, failed := e.eval(ctx, c, pq, input)
	if failed != nil {
		return EgressDecision{Action: ActionDeny, Rule: failed.Reasons[0].Code, Reasons: failed.Reasons, PolicyRevision: c.revision}
	}
	d, err := parseEgressDecision(v)
	if err != nil {
		e.log.Error("egress decision rejected", "revision", c.revision, "err", err)
		return EgressDecision{Action: ActionDeny, Rule: ReasonInvalidDecision, PolicyRevision: c.revision,
			Reasons: []Reason{{Code: ReasonInvalidDecision, Message: "the policy produced an invalid decision"}}}
	}
	d.PolicyRevision = c.revision
	return d
}

func parseEgressDecision(v any) (EgressDecision, error) {
	obj, ok := v.(map[string]any)
	if !ok {
		return EgressDecision{}, fmt.Errorf("%w: not an object", errBadDecision)
	}
	for k := range obj {
		if !egressDecisionFields[k] {
			return EgressDecision{}, fmt.Errorf("%w: unexpected field %q", errBadDecision, k)
		}
	}
	action, err := str(obj, "action")
	if err != nil {
		return EgressDecision{}, err
	}
	switch action {
	case ActionAllow, ActionDeny, ActionRequireApproval:
	default:
		return EgressDecision{}, fmt.Errorf("%w: unknown action %q", errBadDecision, action)
	}
	rule, err := str(obj, "rule")
	if err != nil {
		return EgressDecision{}, err
	}
	rs, err := reasons(obj["reasons"])
	if err != nil {
		return EgressDecision{}, err
	}
	inspect, ok := obj["inspect"].(bool)
	if _, present := obj["inspect"]; present && !ok {
		return EgressDecision{}, fmt.Errorf("%w: inspect is not a boolean", errBadDecision)
	}
	d := EgressDecision{Action: action, Rule: rule, Reasons: rs, Inspect: inspect}
	if d.WouldBe, d.WouldBeRule, err = wouldBe(obj, action); err != nil {
		return EgressDecision{}, err
	}
	return d, nil
}

var egressDecisionFields = map[string]bool{"action": true, "reasons": true, "rule": true, "inspect": true, "would_be": true, "would_be_rule": true}

// wouldBe reads would_be and would_be_rule: together or not at all, and
// the would-be action a stricter one than action (a relaxed reason only
// lets through what it would have refused).
func wouldBe(obj map[string]any, action string) (string, string, error) {
	_, has := obj["would_be"]
	_, hasRule := obj["would_be_rule"]
	if !has && !hasRule {
		return "", "", nil
	}
	w, err := str(obj, "would_be")
	if err != nil {
		return "", "", err
	}
	rule, err := str(obj, "would_be_rule")
	if err != nil {
		return "", "", err
	}
	strict := map[string]int{ActionAllow: 0, ActionRequireApproval: 1, ActionDeny: 2}
	if ws, ok := strict[w]; !ok || ws <= strict[action] {
		return "", "", fmt.Errorf("%w: would_be %q on %s", errBadDecision, w, action)
	}
	return w, rule, nil
}

// value is Map as OPA's value, built directly: a replay decides
// thousands of inputs, and the generic conversion of a map is a good part
// of a small decision's cost.
func (in EgressInput) value() ast.Value {
	obj := ast.NewObject(
		[2]*ast.Term{ast.InternedTerm("mode"), ast.StringTerm(in.Mode)},
		[2]*ast.Term{ast.InternedTerm("host"), ast.StringTerm(in.Host)},
		[2]*ast.Term{ast.InternedTerm("port"), ast.IntNumberTerm(in.Port)},
		[2]*ast.Term{ast.InternedTerm("scheme"), ast.StringTerm(in.Scheme)},
		[2]*ast.Term{ast.InternedTerm("session_id"), ast.StringTerm(in.SessionID)},
		[2]*ast.Term{ast.InternedTerm("tenant"), ast.StringTerm(in.Tenant)},
		[2]*ast.Term{ast.InternedTerm("principal"), ast.StringTerm(in.Principal)},
		[2]*ast.Term{ast.InternedTerm("request_id"), ast.StringTerm(in.RequestID)},
		[2]*ast.Term{ast.InternedTerm("risk"), ast.StringTerm(in.Risk)},
		[2]*ast.Term{ast.InternedTerm("resolved"), stringsTerm(in.Resolved)},
		[2]*ast.Term{ast.InternedTerm("gateway_addresses"), stringsTerm(in.GatewayAddresses)},
	)
	if h := in.HTTP; h != nil {
		obj.Insert(ast.InternedTerm("http"), ast.ObjectTerm(
			[2]*ast.Term{ast.InternedTerm("method"), ast.StringTerm(h.Method)},
			[2]*ast.Term{ast.InternedTerm("scheme"), ast.StringTerm(h.Scheme)},
			[2]*ast.Term{ast.InternedTerm("host"), ast.StringTerm(h.Host)},
			[2]*ast.Term{ast.InternedTerm("port"), ast.IntNumberTerm(h.Port)},
			[2]*ast.Term{ast.InternedTerm("path"), ast.StringTerm(h.Path)},
			[2]*ast.Term{ast.InternedTerm("query"), ast.StringTerm(h.Query)},
			[2]*ast.Term{ast.InternedTerm("header_names"), stringsTerm(h.HeaderNames)},
			[2]*ast.Term{ast.InternedTerm("upgrade"), stringsTerm(h.Upgrade)},
		))
	}
	return obj
}

func stringsTerm(ss []string) *ast.Term {
	ts := make([]*ast.Term, len(ss))
	for i, s := range ss {
		ts[i] = ast.StringTerm(s)
	}
	return ast.ArrayTerm(ts...)
}
