package confirm

import (
	"context"

	"github.com/sandgate/sandgate/policy"
)

// EngineGrants is the policy engine's say on grants (GrantPolicy): it asks
// data.sandgate.exec.grant with the held request as the decision's input
// and the live grants as input.grants.
//
// The input is rebuilt from the Request, which keeps what binds and shows
// an approval: the request kind is run_code, the timeout 1 s and the
// executors none, none of which the shipped grant rule reads (it reads
// the mode, the tenant, the session, the language and the risk); an
// administrator's grant rule that needs more has to read data.
func EngineGrants(eng *policy.Engine, mode string) GrantPolicy {
	return engineGrants{eng: eng, mode: mode}
}

type engineGrants struct {
	eng  *policy.Engine
	mode string
}

func (e engineGrants) CoveringGrant(ctx context.Context, req Request, live []Grant) (string, error) {
	in, gs := e.input(req, live)
	return e.eng.CoveringGrant(ctx, in, gs)
}

func (e engineGrants) GrantMisses(ctx context.Context, req Request, live []Grant) (map[string][]string, error) {
	in, gs := e.input(req, live)
	return e.eng.GrantMisses(ctx, in, gs)
}

func (e engineGrants) input(req Request, live []Grant) (policy.Input, []policy.Grant) {
	in := policy.Input{
		Mode: e.mode,
		Request: policy.Request{Kind: "run_code", SessionID: req.SessionID, Language: req.Language, CodeSHA256: req.CodeSHA256,
			TimeoutS: 1, Stateful: req.Context["stateful"],
			Context: policy.Context{NeedsBrowser: req.Context["needs_browser"], NeedsPersistentFS: req.Context["needs_persistent_fs"]}},
		Risk:      policy.Risk{Level: req.RiskLevel},
		Principal: policy.Principal{Name: req.Principal, Tenant: req.Tenant},
	}
	for _, p := range req.Patterns {
		in.Risk.Patterns = append(in.Risk.Patterns, policy.RiskPattern{ID: p.ID, Line: p.Line})
	}
	gs := make([]policy.Grant, len(live))
	for i, g := range live {
		gs[i] = policy.Grant{ID: g.ID, Scope: g.Scope, Tenant: g.Tenant, SessionID: g.SessionID, Language: g.Language,
			Level: g.Level, Patterns: g.Patterns, ExpiresAt: g.ExpiresAt}
		if g.Scope == "tenant" {
			gs[i].SessionID = ""
		}
	}
	return in, gs
}
