package policy

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage"
)

// Egress replays: what the policy would decide on recorded connections
// with candidate rules added (a proposal's effect, package confirm),
// beside what it decides on them now. A replay decides no connection:
// nothing is logged or shadowed, and the candidate never reaches the
// store the live decisions read. The candidate's rules and compiled rules
// (egress_derive.go) are computed once per replay, in a transaction that
// is never committed, and handed to each evaluation with OPA's `with`, so
// the evaluations read the store like live decisions do and run on every
// core at once.

// egressReplayQuery is the egress decision with the candidate's rules and
// compiled rules in place of the store's, all given in the input.
const egressReplayQuery = "data.sandgate.egress.decision with input as input.input" +
	" with data.sandgate.config.egress.rules as input.rules with data.sandgate.derived.egress as input.derived"

// lazyQuery is a query prepared on its first use, once per revision.
type lazyQuery struct {
	once sync.Once
	pq   rego.PreparedEvalQuery
	err  error
}

func (l *lazyQuery) get(ctx context.Context, c *compiled, query string) (rego.PreparedEvalQuery, error) {
	// The first caller's cancellation must not be what every later
	// replay of the revision gets.
	l.once.Do(func() { l.pq, l.err = c.prepare(context.WithoutCancel(ctx), query) })
	return l.pq, l.err
}

// EgressReplay decides inputs against one candidate, on the revision in
// force when it was made.
type EgressReplay struct {
	e     *Engine
	c     *compiled
	extra []map[string]any
	// q, rules and derived are unset when the policy compiles no rules
	// for the candidate (a policy of its own, or an expansion that
	// fails): the candidate is then written into a transaction and the
	// inputs decided in it one by one (sequential).
	q              rego.PreparedEvalQuery
	rules, derived *ast.Term
}

// NewEgressReplay prepares a replay of the policy with extra appended to
// its egress rules (after its overlay).
func (e *Engine) NewEgressReplay(ctx context.Context, extra []map[string]any) (*EgressReplay, error) {
	c := e.cur.Load()
	if c == nil {
		return nil, errors.New("policy: no policy is loaded")
	}
	r := &EgressReplay{e: e, c: c, extra: extra}
	txn, err := c.store.NewTransaction(ctx, storage.WriteParams)
	if err != nil {
		return nil, err
	}
	defer c.store.Abort(ctx, txn)
	all, err := candidateRules(ctx, c, txn, extra)
	if err != nil {
		return nil, err
	}
	derived, err := c.store.Read(ctx, txn, derivedEgressPath)
	switch {
	case storage.IsNotFound(err):
		return r, nil
	case err != nil:
		return nil, err
	}
	dv, ok := derived.(ast.Value)
	if !ok {
		if dv, err = ast.InterfaceToValue(derived); err != nil {
			return nil, err
		}
	}
	rv, err := ast.InterfaceToValue(all)
	if err != nil {
		return nil, err
	}
	if r.q, err = c.replay.get(ctx, c, egressReplayQuery); err != nil {
		return nil, err
	}
	r.rules, r.derived = ast.NewTerm(rv), ast.NewTerm(dv)
	return r, nil
}

// candidateRules writes the store's egress rules followed by extra, and
// their compiled rules, into txn, and returns the rules.
func candidateRules(ctx context.Context, c *compiled, txn storage.Transaction, extra []map[string]any) ([]any, error) {
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
	all := append(rules, anyRules(extra)...)
	if err := writeRules(ctx, c, txn, all); err != nil {
		return nil, err
	}
	return all, nil
}

// Candidate decides each of inputs with the candidate. It fails only on
// ctx's end (or a store error of the sequential fallback); an evaluation
// that fails is a fail-closed deny, as live.
func (r *EgressReplay) Candidate(ctx context.Context, inputs []EgressInput) ([]EgressDecision, error) {
	if r.derived == nil {
		return r.e.replaySequential(ctx, r.c, r.extra, inputs)
	}
	out := make([]EgressDecision, len(inputs))
	err := eachParallel(ctx, len(inputs), func(i int) error {
		wrapped := ast.NewObject(
			[2]*ast.Term{ast.InternedTerm("input"), ast.NewTerm(inputs[i].value())},
			[2]*ast.Term{ast.InternedTerm("rules"), r.rules},
			[2]*ast.Term{ast.InternedTerm("derived"), r.derived})
		out[i] = r.e.egressDecision(ctx, r.c, r.q, rego.EvalParsedInput(wrapped))
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

// replaySequential decides inputs one by one in a transaction holding the
// candidate, never committed.
func (e *Engine) replaySequential(ctx context.Context, c *compiled, extra []map[string]any, inputs []EgressInput) ([]EgressDecision, error) {
	txn, err := c.store.NewTransaction(ctx, storage.WriteParams)
	if err != nil {
		return nil, err
	}
	defer c.store.Abort(ctx, txn)
	if _, err := candidateRules(ctx, c, txn, extra); err != nil {
		return nil, err
	}
	out := make([]EgressDecision, len(inputs))
	for i, in := range inputs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		in, txn := rego.EvalInput(in.Map()), rego.EvalTransaction(txn)
		out[i] = e.egressDecision(ctx, c, c.egress, func(ec *rego.EvalContext) { in(ec); txn(ec) })
	}
	return out, nil
}
