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

// grantQuery is the grant rule prepared for one compiled revision.
type grantQuery struct {
	mu sync.Mutex
	c  *compiled
	pq rego.PreparedEvalQuery
}

func (q *grantQuery) get(ctx context.Context, c *compiled) (rego.PreparedEvalQuery, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.c == c {
		return q.pq, nil
	}
	schemas, err := loadSchemas()
	if err != nil {
		return rego.PreparedEvalQuery{}, err
	}
	opts := []func(*rego.Rego){rego.Query(GrantQuery), rego.Store(c.store), rego.Strict(true),
		rego.StrictBuiltinErrors(true), rego.Schemas(schemas), rego.UnsafeBuiltins(unsafeBuiltins)}
	for _, m := range c.modules {
		opts = append(opts, rego.ParsedModule(m))
	}
	pq, err := rego.New(opts...).PrepareForEval(ctx)
	if err != nil {
		return pq, err
	}
	q.c, q.pq = c, pq
	return pq, nil
}

// CoveringGrant asks the policy which of grants, if any, covers the
// request in (held for approval). "" means none: a person is asked. A
// policy without the grant rule covers nothing.
func (e *Engine) CoveringGrant(ctx context.Context, in Input, grants []Grant) (string, error) {
	c := e.cur.Load()
	if c == nil || len(grants) == 0 {
		return "", nil
	}
	pq, err := e.grantQ.get(ctx, c)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrGrantEval, err)
	}
	v, err := in.value(&e.executors)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrGrantEval, err)
	}
	obj, ok := v.(ast.Object)
	if !ok {
		return "", ErrGrantEval
	}
	obj.Insert(ast.StringTerm("grants"), ast.NewTerm(grantsValue(grants)))
	ectx, cancel := context.WithTimeout(ctx, e.evalTimeout)
	defer cancel()
	rs, err := pq.Eval(ectx, rego.EvalParsedInput(obj))
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrGrantEval, err)
	}
	if len(rs) == 0 || len(rs[0].Expressions) == 0 {
		return "", nil
	}
	id, ok := rs[0].Expressions[0].Value.(string)
	if !ok {
		return "", fmt.Errorf("%w: grant is not a string", ErrGrantEval)
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
