package policy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
)

// GrantQuery names the grant that covers a request held for approval
// (rego/sandgate/exec/grants.rego). It is asked only by the approval
// service, and only when the tenant has live grants: the decision itself
// never reads input.grants, so a grant can spare a prompt but never turn
// a deny into anything else.
const GrantQuery = "data.sandgate.exec.grant"

// Grant is one standing approval as the policy sees it (input.grants).
type Grant struct {
	ID string
	// Scope is "session" (SessionID of Tenant) or "tenant".
	Scope     string
	Tenant    string
	SessionID string
	Language  string
	// Level is the risk level approved; Patterns the risk pattern ids.
	Level     string
	Patterns  []string
	ExpiresAt time.Time
}

// ErrGrantEval is a grant question the policy could not answer; the
// approval service then asks a person, as without grants.
var ErrGrantEval = errors.New("policy: grant evaluation failed")

// GrantMissQuery names why each grant does not cover a request.
const GrantMissQuery = "data.sandgate.exec.grant_miss"

// grantQuery holds the grant rules prepared for one compiled revision.
type grantQuery struct {
	mu sync.Mutex
	c  *compiled
	pq map[string]rego.PreparedEvalQuery
}

func (q *grantQuery) get(ctx context.Context, c *compiled, query string) (rego.PreparedEvalQuery, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.c != c {
		q.c, q.pq = c, map[string]rego.PreparedEvalQuery{}
	}
	if pq, ok := q.pq[query]; ok {
		return pq, nil
	}
	schemas, err := loadSchemas()
	if err != nil {
		return rego.PreparedEvalQuery{}, err
	}
	opts := []func(*rego.Rego){rego.Query(query), rego.Store(c.store), rego.Strict(true),
		rego.StrictBuiltinErrors(true), rego.Schemas(schemas), rego.UnsafeBuiltins(unsafeBuiltins)}
	for _, m := range c.modules {
		opts = append(opts, rego.ParsedModule(m))
	}
	pq, err := rego.New(opts...).PrepareForEval(ctx)
	if err != nil {
		return pq, err
	}
	q.pq[query] = pq
	return pq, nil
}

// CoveringGrant asks the policy which of grants, if any, covers the
// request in (held for approval). "" means none: a person is asked. A
// policy without the grant rule covers nothing.
func (e *Engine) CoveringGrant(ctx context.Context, in Input, grants []Grant) (string, error) {
	if len(grants) == 0 {
		return "", nil
	}
	v, err := e.evalGrants(ctx, GrantQuery, in, grants)
	return grantID(v, err, "grant")
}

// grantID reads the answer of a grant query (exec or egress) as the
// covering grant's id; what names the rule in the error when the policy
// answers something other than a string. Shared so both kinds of grant
// fail the same way: an odd answer is an error, never a grant.
func grantID(v any, err error, what string) (string, error) {
	if err != nil || v == nil {
		return "", err
	}
	id, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%w: %s is not a string", ErrGrantEval, what)
	}
	return id, nil
}

func grantsValue(grants []Grant) *ast.Array {
	terms := make([]*ast.Term, len(grants))
	for i, g := range grants {
		pats := make([]*ast.Term, len(g.Patterns))
		for j, p := range g.Patterns {
			pats[j] = ast.StringTerm(p)
		}
		terms[i] = ast.ObjectTerm(
			ast.Item(ast.StringTerm("id"), ast.StringTerm(g.ID)),
			ast.Item(ast.StringTerm("scope"), ast.StringTerm(g.Scope)),
			ast.Item(ast.StringTerm("tenant"), ast.StringTerm(g.Tenant)),
			ast.Item(ast.StringTerm("session_id"), ast.StringTerm(g.SessionID)),
			ast.Item(ast.StringTerm("language"), ast.StringTerm(g.Language)),
			ast.Item(ast.StringTerm("level"), ast.StringTerm(g.Level)),
			ast.Item(ast.StringTerm("patterns"), ast.ArrayTerm(pats...)),
			ast.Item(ast.StringTerm("expires_ns"), ast.IntNumberTerm(int(g.ExpiresAt.UnixNano()))),
		)
	}
	return ast.NewArray(terms...)
}

// evalGrants evaluates query with in and input.grants; nil when undefined.
func (e *Engine) evalGrants(ctx context.Context, query string, in Input, grants []Grant) (any, error) {
	return e.evalGrantQuery(ctx, query, func() (rego.EvalOption, error) {
		v, err := in.value(&e.executors)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrGrantEval, err)
		}
		obj, ok := v.(ast.Object)
		if !ok {
			return nil, ErrGrantEval
		}
		obj.Insert(ast.StringTerm("grants"), ast.NewTerm(grantsValue(grants)))
		return rego.EvalParsedInput(obj), nil
	})
}

// evalGrantQuery evaluates the grant rule query of the loaded revision
// with the input that input builds (after the query is prepared, so a
// query that does not compile is reported first); nil when no policy is
// loaded or the rule is undefined. One place for the exec and egress
// grant questions, so both share the prepared queries, the evaluation
// timeout and the ErrGrantEval wrapping. input's error is returned as is.
func (e *Engine) evalGrantQuery(ctx context.Context, query string, input func() (rego.EvalOption, error)) (any, error) {
	c := e.cur.Load()
	if c == nil {
		return nil, nil
	}
	pq, err := e.grantQ.get(ctx, c, query)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrGrantEval, err)
	}
	opt, err := input()
	if err != nil {
		return nil, err
	}
	ectx, cancel := context.WithTimeout(ctx, e.evalTimeout)
	defer cancel()
	rs, err := pq.Eval(ectx, opt)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrGrantEval, err)
	}
	if len(rs) == 0 || len(rs[0].Expressions) == 0 {
		return nil, nil
	}
	return rs[0].Expressions[0].Value, nil
}

// GrantMisses asks the policy why each of grants does not cover the
// request in: grant id to reasons (a covering grant has none). The
// approval page shows them as the grants that almost matched.
func (e *Engine) GrantMisses(ctx context.Context, in Input, grants []Grant) (map[string][]string, error) {
	out := map[string][]string{}
	if len(grants) == 0 {
		return out, nil
	}
	v, err := e.evalGrants(ctx, GrantMissQuery, in, grants)
	if err != nil || v == nil {
		return out, err
	}
	pairs, ok := v.([]any)
	if !ok {
		return out, fmt.Errorf("%w: grant_miss is not a set", ErrGrantEval)
	}
	for _, p := range pairs {
		pair, ok := p.([]any)
		if !ok || len(pair) != 2 {
			continue
		}
		id, _ := pair[0].(string)
		why, _ := pair[1].(string)
		out[id] = append(out[id], why)
	}
	return out, nil
}
