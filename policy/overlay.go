package policy

import (
	"context"
	"errors"
	"fmt"

	"github.com/open-policy-agent/opa/v1/ast"
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
// appended to its egress rules (after its overlay); see EgressReplay. No
// other decision sees the candidate, and nothing is logged: a replay
// decides no connection.
func (e *Engine) ReplayEgress(ctx context.Context, extra []map[string]any, inputs []EgressInput) ([]EgressDecision, error) {
	r, err := e.NewEgressReplay(ctx, extra)
	if err != nil {
		return nil, err
	}
	return r.Candidate(ctx, inputs)
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
