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

// networkScopesQuery is whom the data grants network, per mode, as the
// exec policy defines it (exec.rego); its result goes to
// data.sandgate.derived.network, derived like the egress rules and for
// the same reason: walking the egress rules was a good part of every exec
// decision.
const networkScopesQuery = "data.sandgate.exec.network_scopes"

var (
	derivedEgressPath  = storage.MustParsePath("/sandgate/derived/egress")
	derivedNetworkPath = storage.MustParsePath("/sandgate/derived/network")
)

// deriveEgress writes c's compiled egress rules, and whom they grant
// network, as the data in txn makes them, under /sandgate/derived. When
// the policy defines no such document, or it fails on this data, the
// derived one is removed instead: the policy then computes it per
// decision, and an error fails each decision closed, exactly as without
// derived documents.
func deriveEgress(ctx context.Context, c *compiled, txn storage.Transaction) error {
	if err := derive(ctx, c, txn, c.egressExpand, derivedEgressPath); err != nil {
		return err
	}
	return derive(ctx, c, txn, c.networkScopes, derivedNetworkPath)
}

// derive writes pq's answer at path, or removes path when pq has none.
func derive(ctx context.Context, c *compiled, txn storage.Transaction, pq rego.PreparedEvalQuery, path storage.Path) error {
	rs, err := pq.Eval(ctx, rego.EvalTransaction(txn), rego.EvalMetrics(noMetrics))
	if err != nil || len(rs) == 0 || len(rs[0].Expressions) == 0 {
		return removeDerived(ctx, c.store, txn, path)
	}
	v, err := ast.InterfaceToValue(rs[0].Expressions[0].Value)
	if err != nil {
		return err
	}
	if err := storage.MakeDir(ctx, c.store, txn, path[:len(path)-1]); err != nil {
		return err
	}
	var op storage.PatchOp = storage.ReplaceOp
	if _, err := c.store.Read(ctx, txn, path); storage.IsNotFound(err) {
		op = storage.AddOp
	}
	return c.store.Write(ctx, txn, op, path, v)
}

func removeDerived(ctx context.Context, st storage.Store, txn storage.Transaction, path storage.Path) error {
	if _, err := st.Read(ctx, txn, path); storage.IsNotFound(err) {
		return nil
	}
	return st.Write(ctx, txn, storage.RemoveOp, path, nil)
}
