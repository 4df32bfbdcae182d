package policy

import (
	"context"
	"fmt"
	"time"

	"github.com/open-policy-agent/opa/v1/rego"
)

// EgressGrantQuery names the grant that covers an HTTP request the egress
// decision holds for approval (rego/sandgate/egress/grants.rego). Like
// GrantQuery it is asked only by the approval service, and only when the
// session has live egress grants: the decision never reads input.grants.
const EgressGrantQuery = "data.sandgate.egress.grant"

// EgressGrant is one standing approval of egress requests as the policy
// sees it (input.grants): the requests of one session with Method to
// Host:Port under PathPrefix, until ExpiresAt.
type EgressGrant struct {
	ID         string
	Scope      string
	Tenant     string
	SessionID  string
	Method     string
	Host       string
	Port       int
	PathPrefix string
	ExpiresAt  time.Time
}

// CoveringEgressGrant asks the policy which of grants, if any, covers the
// held request in (in.HTTP set). "" means none: a person is asked. A
// policy without the grant rule covers nothing.
func (e *Engine) CoveringEgressGrant(ctx context.Context, in EgressInput, grants []EgressGrant) (string, error) {
	if len(grants) == 0 || in.HTTP == nil {
		return "", nil
	}
	v, err := e.evalEgressGrants(ctx, EgressGrantQuery, in, grants)
	if err != nil || v == nil {
		return "", err
	}
	id, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%w: egress grant is not a string", ErrGrantEval)
	}
	return id, nil
}

// evalEgressGrants evaluates query with in and input.grants; nil when
// undefined.
func (e *Engine) evalEgressGrants(ctx context.Context, query string, in EgressInput, grants []EgressGrant) (any, error) {
	c := e.cur.Load()
	if c == nil {
		return nil, nil
	}
	pq, err := e.grantQ.get(ctx, c, query)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrGrantEval, err)
	}
	m := in.Map()
	gs := make([]any, len(grants))
	for i, g := range grants {
		gs[i] = map[string]any{"id": g.ID, "scope": g.Scope, "tenant": g.Tenant, "session_id": g.SessionID,
			"method": g.Method, "host": g.Host, "port": g.Port, "path_prefix": g.PathPrefix,
			"expires_ns": g.ExpiresAt.UnixNano()}
	}
	m["grants"] = gs
	ectx, cancel := context.WithTimeout(ctx, e.evalTimeout)
	defer cancel()
	rs, err := pq.Eval(ectx, rego.EvalInput(m))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrGrantEval, err)
	}
	if len(rs) == 0 || len(rs[0].Expressions) == 0 {
		return nil, nil
	}
	return rs[0].Expressions[0].Value, nil
}
