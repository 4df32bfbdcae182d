package policy

import (
	"context"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage"
)

// Derived egress rules. The egress policy matches every connection and
// request against its rules with request presets and host presets
// expanded; expanding them is most of a decision's work (0.3 to 0.5 ms),
// and its result changes only when the policy, its data or an overlay
// does. So the gateway evaluates data.sandgate.egress.compiled_egress once
// per change, with the policy's own Rego, and writes the result to
// data.sandgate.derived.egress, which the policy reads instead of
// expanding (and expands itself when the document is absent, as under
// `opa test`). The path is reserved: data of that name in a policy
// tree is replaced.

// egressExpandQuery is the compiled rules, as the policy defines them.
const egressExpandQuery = "data.sandgate.egress.compiled_egress"

var derivedEgressPath = storage.MustParsePath("/sandgate/derived/egress")

// deriveEgress writes c's compiled egress rules, as the data in txn makes
// them, to derivedEgressPath. When the policy defines no expansion, or it
// fails on this data, the derived rules are removed instead: the policy
// then expands per decision, and an expansion error fails each decision
// closed, exactly as without derived rules.
func deriveEgress(ctx context.Context, c *compiled, txn storage.Transaction) error {
	rs, err := c.egressExpand.Eval(ctx, rego.EvalTransaction(txn), rego.EvalMetrics(noMetrics))
	if err != nil || len(rs) == 0 || len(rs[0].Expressions) == 0 {
		return removeDerived(ctx, c.store, txn)
	}
	v, err := ast.InterfaceToValue(rs[0].Expressions[0].Value)
	if err != nil {
		return err
	}
	if err := storage.MakeDir(ctx, c.store, txn, derivedEgressPath[:len(derivedEgressPath)-1]); err != nil {
		return err
	}
	var op storage.PatchOp = storage.ReplaceOp
	if _, err := c.store.Read(ctx, txn, derivedEgressPath); storage.IsNotFound(err) {
		op = storage.AddOp
	}
	return c.store.Write(ctx, txn, op, derivedEgressPath, v)
}

func removeDerived(ctx context.Context, st storage.Store, txn storage.Transaction) error {
	if _, err := st.Read(ctx, txn, derivedEgressPath); storage.IsNotFound(err) {
		return nil
	}
	return st.Write(ctx, txn, storage.RemoveOp, derivedEgressPath, nil)
}
