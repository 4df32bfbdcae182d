package policy

import (
	"context"
	"errors"
	"fmt"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage"
)

// Overlays: policy data added at run time, by people, on top of the
// loaded policy's data. An accepted egress proposal (package confirm) is
// an egress rule appended to data.sandgate.config.egress.rules, so the
// unchanged egress policy decides with it, and so does the exec policy
// (a rule scoped to a session grants its runs network). The loaded data
// itself is never edited: the overlay is written into the store the
// prepared queries read, and written again after every reload (the
// owner calls SetEgressOverlay from OnReload).

var egressRulesPath = storage.MustParsePath("/sandgate/config/egress/rules")

// ErrNoEgressData is an overlay on a policy without
// data.sandgate.config.egress: there is nothing to add a rule to.
var ErrNoEgressData = errors.New("policy: the policy has no data.sandgate.config.egress")

// baseEgressRules are the loaded policy's own egress rules.
func baseEgressRules(c *compiled) ([]any, error) {
	sg, _ := c.data["sandgate"].(map[string]any)
	cfg, _ := sg["config"].(map[string]any)
	eg, ok := cfg["egress"].(map[string]any)
	if !ok {
		return nil, ErrNoEgressData
	}
	rules, _ := eg["rules"].([]any)
	return rules, nil
}

// SetEgressOverlay makes rules the overlay of the current revision: the
// policy's egress rules followed by rules. An empty rules removes it.
func (e *Engine) SetEgressOverlay(ctx context.Context, rules []map[string]any) error {
	c := e.cur.Load()
	if c == nil {
		return nil
	}
	base, err := baseEgressRules(c)
	if err != nil {
		return err
	}
	all := append(append([]any{}, base...), anyRules(rules)...)
	return storage.Txn(ctx, c.store, storage.WriteParams, func(txn storage.Transaction) error {
		return writeRules(ctx, c, txn, all)
	})
}

// writeRules replaces the egress rules in txn, and the derived rules
// computed from them (egress_derive.go).
func writeRules(ctx context.Context, c *compiled, txn storage.Transaction, rules []any) error {
	v, err := ast.InterfaceToValue(rules)
	if err != nil {
		return err
	}
	var op storage.PatchOp = storage.ReplaceOp
	if _, err := c.store.Read(ctx, txn, egressRulesPath); storage.IsNotFound(err) {
		op = storage.AddOp
	}
	if err := c.store.Write(ctx, txn, op, egressRulesPath, v); err != nil {
		return err
	}
	return deriveEgress(ctx, c, txn)
}

func anyRules(rules []map[string]any) []any {
	out := make([]any, len(rules))
	for i, r := range rules {
		out[i] = r
	}
	return out
}

// ReplayEgress decides each of inputs as the policy would with extra
// appended to its egress rules (after its overlay). The candidate is
// written in a transaction that is never committed, so no other decision
// sees it. Nothing is logged: a replay decides no connection.
func (e *Engine) ReplayEgress(ctx context.Context, extra []map[string]any, inputs []EgressInput) ([]EgressDecision, error) {
	c := e.cur.Load()
	if c == nil {
		return nil, errors.New("policy: no policy is loaded")
	}
	txn, err := c.store.NewTransaction(ctx, storage.WriteParams)
	if err != nil {
		return nil, err
	}
	defer c.store.Abort(ctx, txn)
	cur, err := c.store.Read(ctx, txn, egressRulesPath)
	var rules []any
	switch {
	case storage.IsNotFound(err):
	case err != nil:
		return nil, err
	default:
		if err := readInto(cur, &rules); err != nil {
			return nil, err
		}
	}
	if err := writeRules(ctx, c, txn, append(rules, anyRules(extra)...)); err != nil {
		return nil, err
	}
	out := make([]EgressDecision, len(inputs))
	for i, in := range inputs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		out[i] = e.replayOne(ctx, c, txn, in.Map())
	}
	return out, nil
}

// DecideEgressQuietly is DecideEgress without the decision log or the
// shadow policy: a replay's "as now", which decides no connection.
func (e *Engine) DecideEgressQuietly(ctx context.Context, in EgressInput) EgressDecision {
	return e.decideEgress(ctx, e.cur.Load(), in.Map())
}

// readInto converts a value read from the store (an ast.Value, the store
// returns AST values) into rules.
func readInto(v any, rules *[]any) error {
	if av, ok := v.(ast.Value); ok {
		j, err := ast.JSON(av)
		if err != nil {
			return err
		}
		v = j
	}
	arr, ok := v.([]any)
	if !ok {
		return fmt.Errorf("policy: data.sandgate.config.egress.rules is %T, not an array", v)
	}
	*rules = arr
	return nil
}

func (e *Engine) replayOne(ctx context.Context, c *compiled, txn storage.Transaction, input map[string]any) EgressDecision {
	rs, err := c.egress.Eval(ctx, rego.EvalInput(input), rego.EvalTransaction(txn), rego.EvalMetrics(noMetrics))
	if err != nil || len(rs) == 0 || len(rs[0].Expressions) == 0 {
		return EgressDecision{Action: ActionDeny, Rule: ReasonEvalError, PolicyRevision: c.revision}
	}
	d, err := parseEgressDecision(rs[0].Expressions[0].Value)
	if err != nil {
		return EgressDecision{Action: ActionDeny, Rule: ReasonInvalidDecision, PolicyRevision: c.revision}
	}
	d.PolicyRevision = c.revision
	return d
}
