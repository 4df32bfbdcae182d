package policy

import (
	"context"
	"errors"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage"
)

// The executor overlay: data.sandgate.overlay.executors maps a session
// ("tenant/session") to the executor its runs may use in place of the
// mode table's (an accepted executor proposal, package confirm). The exec
// policy reads it (exec/overlay.rego) below the AIO sandbox, a kernel's
// executor and the isolation upgrade, so an overlay never moves a stateful
// cell or takes a run out of the upgrade's sandbox. Like the egress
// overlay it is written into the store the prepared queries read, never
// into the loaded data, and again after every reload by its owner.

var (
	overlayPath          = storage.MustParsePath("/sandgate/overlay")
	executorOverlayPath  = storage.MustParsePath("/sandgate/overlay/executors")
	errNoPolicyForReplay = errors.New("policy: no policy is loaded")
)

// SetExecutorOverlay makes sessions (tenant/session -> executor) the
// executor overlay of the current revision; empty removes it.
func (e *Engine) SetExecutorOverlay(ctx context.Context, sessions map[string]string) error {
	c := e.cur.Load()
	if c == nil {
		return nil
	}
	return storage.Txn(ctx, c.store, storage.WriteParams, func(txn storage.Transaction) error {
		if len(sessions) == 0 {
			// Nothing to add: the policy's data stays untouched (a bundle's
			// store is written only when a proposal is in force).
			if _, err := c.store.Read(ctx, txn, overlayPath); storage.IsNotFound(err) {
				return nil
			}
		}
		return writeExecutorOverlay(ctx, c, txn, sessions)
	})
}

func writeExecutorOverlay(ctx context.Context, c *compiled, txn storage.Transaction, sessions map[string]string) error {
	m := make(map[string]any, len(sessions))
	for k, v := range sessions {
		m[k] = v
	}
	val, err := ast.InterfaceToValue(map[string]any{"executors": m})
	if err != nil {
		return err
	}
	var op storage.PatchOp = storage.ReplaceOp
	if _, err := c.store.Read(ctx, txn, overlayPath); storage.IsNotFound(err) {
		op = storage.AddOp
	}
	return c.store.Write(ctx, txn, op, overlayPath, val)
}

// executorOverlay is the executor overlay in force in txn.
func executorOverlay(ctx context.Context, c *compiled, txn storage.Transaction) (map[string]string, error) {
	out := map[string]string{}
	v, err := c.store.Read(ctx, txn, executorOverlayPath)
	if storage.IsNotFound(err) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	if av, ok := v.(ast.Value); ok {
		j, err := ast.JSON(av)
		if err != nil {
			return nil, err
		}
		v = j
	}
	m, _ := v.(map[string]any)
	for k, x := range m {
		if s, ok := x.(string); ok {
			out[k] = s
		}
	}
	return out, nil
}

// ReplayExec decides each of inputs as the exec policy would with extra
// (tenant/session -> executor) added to the executor overlay. The
// candidate is written in a transaction that is never committed, so no
// other decision sees it; nothing is logged (a replay runs nothing).
func (e *Engine) ReplayExec(ctx context.Context, extra map[string]string, inputs []Input) ([]Decision, error) {
	c := e.cur.Load()
	if c == nil {
		return nil, errNoPolicyForReplay
	}
	txn, err := c.store.NewTransaction(ctx, storage.WriteParams)
	if err != nil {
		return nil, err
	}
	defer c.store.Abort(ctx, txn)
	cur, err := executorOverlay(ctx, c, txn)
	if err != nil {
		return nil, err
	}
	for k, v := range extra {
		cur[k] = v
	}
	if err := writeExecutorOverlay(ctx, c, txn, cur); err != nil {
		return nil, err
	}
	out := make([]Decision, len(inputs))
	for i, in := range inputs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		out[i] = e.replayExecOne(ctx, c, txn, in)
	}
	return out, nil
}

// DecideQuietly is Decide without the decision log or the shadow policy:
// a replay's "as now", which decides no run.
func (e *Engine) DecideQuietly(ctx context.Context, in Input) Decision {
	_, d := e.decide(ctx, e.cur.Load(), in)
	return d
}

func (e *Engine) replayExecOne(ctx context.Context, c *compiled, txn storage.Transaction, in Input) Decision {
	input, err := in.value(&e.executors)
	if err != nil {
		return deny(c.revision, ReasonEvalError, "policy evaluation failed")
	}
	rs, err := c.exec.Eval(ctx, rego.EvalParsedInput(input), rego.EvalTransaction(txn), rego.EvalMetrics(noMetrics))
	if err != nil || len(rs) == 0 || len(rs[0].Expressions) == 0 {
		return deny(c.revision, ReasonEvalError, "policy evaluation failed")
	}
	d, err := parseDecision(rs[0].Expressions[0].Value)
	if err != nil {
		return deny(c.revision, ReasonInvalidDecision, "the policy produced an invalid decision")
	}
	d.PolicyRevision = c.revision
	return d
}
