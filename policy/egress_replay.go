package policy

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
)

// Egress replays: what the policy would decide on recorded connections
// with candidate rules added (a proposal's effect, package confirm),
// beside what it decides on them now. A replay decides no connection:
// nothing is logged or shadowed, and the candidate never reaches the
// store the live decisions read. The candidate's rules and derived
// documents (egress_derive.go) are computed once per replay, in a
// transaction of the live store that is never committed; the data as
// they leave it becomes a store of the replay's own, on which the egress
// decision is prepared, so each evaluation reads it as live decisions
// read theirs (OPA's `with` on the data, which a replay used before,
// made each of them half again as costly), and they run on every core
// at once.

// EgressReplay decides inputs against one candidate, on the revision in
// force when it was made.
type EgressReplay struct {
	e *Engine
	c *compiled
	q rego.PreparedEvalQuery // the egress decision over the candidate's store
}

// NewEgressReplay prepares a replay of the policy with extra appended to
// its egress rules (after its overlay).
func (e *Engine) NewEgressReplay(ctx context.Context, extra []map[string]any) (*EgressReplay, error) {
	c := e.cur.Load()
	if c == nil {
		return nil, errors.New("policy: no policy is loaded")
	}
	st, err := candidateStore(ctx, c, extra)
	if err != nil {
		return nil, err
	}
	q, err := c.prepareOn(ctx, st, EgressQuery)
	if err != nil {
		return nil, err
	}
	return &EgressReplay{e: e, c: c, q: q}, nil
}

// candidateStore is a store holding c's data as it would be with extra
// appended to the egress rules: written, with the derived documents, into
// a transaction of c's store that is aborted, and copied out of it.
func candidateStore(ctx context.Context, c *compiled, extra []map[string]any) (storage.Store, error) {
	txn, err := c.store.NewTransaction(ctx, storage.WriteParams)
	if err != nil {
		return nil, err
	}
	defer c.store.Abort(ctx, txn)
	if err := candidateRules(ctx, c, txn, extra); err != nil {
		return nil, err
	}
	root, err := c.store.Read(ctx, txn, storage.RootPath)
	if err != nil {
		return nil, err
	}
	if v, ok := root.(ast.Value); ok {
		if root, err = ast.JSON(v); err != nil {
			return nil, err
		}
	}
	data, ok := root.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("policy: the data is a %T, not an object", root)
	}
	return inmem.NewFromObjectWithOpts(data, inmem.OptReturnASTValuesOnRead(true)), nil
}

// candidateRules writes the store's egress rules followed by extra, and
// the documents derived from them, into txn.
func candidateRules(ctx context.Context, c *compiled, txn storage.Transaction, extra []map[string]any) error {
	cur, err := c.store.Read(ctx, txn, egressRulesPath)
	var rules []any
	switch {
	case storage.IsNotFound(err):
	case err != nil:
		return err
	default:
		if err := readInto(cur, &rules); err != nil {
			return err
		}
	}
	return writeRules(ctx, c, txn, append(rules, anyRules(extra)...))
}

// Candidate decides each of inputs with the candidate. It fails only on
// ctx's end; an evaluation that fails is a fail-closed deny, as live.
func (r *EgressReplay) Candidate(ctx context.Context, inputs []EgressInput) ([]EgressDecision, error) {
	out := make([]EgressDecision, len(inputs))
	err := eachParallel(ctx, len(inputs), func(i int) error {
		out[i] = r.e.egressDecision(ctx, r.c, r.q, rego.EvalParsedInput(inputs[i].value()))
		return nil
	})
	return out, err
}

// Now decides each of inputs as the policy does now, on the replay's
// revision: the other side of the comparison.
func (r *EgressReplay) Now(ctx context.Context, inputs []EgressInput) ([]EgressDecision, error) {
	out := make([]EgressDecision, len(inputs))
	err := eachParallel(ctx, len(inputs), func(i int) error {
		out[i] = r.e.egressDecision(ctx, r.c, r.c.egress, rego.EvalParsedInput(inputs[i].value()))
		return nil
	})
	return out, err
}

// eachParallel runs fn for 0..n-1 on as many goroutines as Go runs at
// once (GOMAXPROCS), and stops at the first error or at ctx's end.
func eachParallel(ctx context.Context, n int, fn func(i int) error) error {
	workers := min(runtime.GOMAXPROCS(0), n)
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				err := ctx.Err()
				if err == nil {
					err = fn(i)
				}
				if err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					next.Store(int64(n)) // the others stop at their next input
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}
