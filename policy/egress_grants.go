package policy

import (
	"context"
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
	return grantID(v, err, "egress grant")
}

// evalEgressGrants evaluates query with in and input.grants; nil when
// undefined.
func (e *Engine) evalEgressGrants(ctx context.Context, query string, in EgressInput, grants []EgressGrant) (any, error) {
	return e.evalGrantQuery(ctx, query, func() (rego.EvalOption, error) {
		m := in.Map()
		gs := make([]any, len(grants))
		for i, g := range grants {
			gs[i] = map[string]any{"id": g.ID, "scope": g.Scope, "tenant": g.Tenant, "session_id": g.SessionID,
				"method": g.Method, "host": g.Host, "port": g.Port, "path_prefix": g.PathPrefix,
				"expires_ns": g.ExpiresAt.UnixNano()}
		}
		m["grants"] = gs
		return rego.EvalInput(m), nil
	})
}
