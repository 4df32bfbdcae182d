package api

import (
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/policy"
)

var errNoShadow = errcode.New(errcode.NotFound, "no shadow policy is configured (policy.shadow_dir or policy.shadow_opa_config)")

// getShadow is GET /v1/policy/shadow: the candidate policy evaluated
// beside the active one, its evaluations and disagreements by path, and
// the latest disagreements with their decision_id (GET
// /v1/audit?decision_id= finds the record) and the input's digest.
func (s *Server) getShadow(w http.ResponseWriter, _ *http.Request) error {
	st, ok := s.deps.Policy.ShadowStatus()
	if !ok {
		return errNoShadow
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

// readyPolicy is the policy in /readyz: the revision in force ("" while
// none is: not ready), that a newer one was refused, and each bundle's
// active revision and status code and message. /readyz is
// unauthenticated, so the Rego compile text (Status.LastError of a
// folder, a bundle's errors) is left to GET /v1/policy: LastError here is
// the bundles' messages, or a pointer there.
type readyPolicy struct {
	Revision    string                 `json:"revision"`
	Source      string                 `json:"source"`
	LastError   string                 `json:"last_error,omitempty"`
	LastErrorAt time.Time              `json:"last_error_at,omitzero"`
	Bundles     map[string]readyBundle `json:"bundles,omitempty"`
}

// readyBundle is one OPA bundle in /readyz.
type readyBundle struct {
	ActiveRevision string `json:"active_revision"`
	Code           string `json:"code,omitempty"`
	Message        string `json:"message,omitempty"`
}

func readyPolicyOf(st policy.Status) readyPolicy {
	p := readyPolicy{Revision: st.Revision, Source: st.Source}
	var refused []string
	if len(st.Bundles) > 0 {
		p.Bundles = make(map[string]readyBundle, len(st.Bundles))
		for name, b := range st.Bundles {
			// Code only: OPA's message can name the bundle service's host
			// and paths, and /readyz is unauthenticated (GET /v1/policy,
			// an admin's, has it).
			p.Bundles[name] = readyBundle{ActiveRevision: b.ActiveRevision, Code: b.Code}
			if b.Code != "" {
				refused = append(refused, "bundle "+name+": "+b.Code+" (GET /v1/policy shows why)")
			}
		}
	}
	if st.LastError != "" {
		p.LastErrorAt = st.LastErrorAt
		p.LastError = "the last reload was refused and the last good revision stays in force; GET /v1/policy shows why"
		if len(refused) > 0 {
			slices.Sort(refused)
			p.LastError = strings.Join(refused, "; ")
		}
	}
	return p
}
