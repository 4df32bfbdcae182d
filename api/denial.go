package api

import (
	"net/http"
	"strings"

	"github.com/sandgate/sandgate/confirm"
	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/policy"
)

// A denial tells the agent how to ask for a narrow exception instead of
// retrying around it (issue 31): the rule that denied, agent_guidance in
// words, and the proposal endpoint with the kinds it takes. Only denials
// of a session's request carry it: the endpoint is the session's.

// proposalHint is error.proposal of a denial.
type proposalHint struct {
	Endpoint string   `json:"endpoint"`
	Method   string   `json:"method"`
	Kinds    []string `json:"kinds"`
	// Body is the shape to send; value depends on the kind.
	Body map[string]string `json:"body"`
}

const agentGuidance = "This request was denied by the policy rule named in `rule`; retrying it in another form " +
	"will be denied too, and is recorded. If the task needs it, propose a narrow exception for this session: " +
	"POST the body below to `proposal.endpoint` (kind egress_host with value host or host:port for a network " +
	"destination; kind pattern with value a risk pattern id for code; kind executor with value an executor name when " +
	"the executor the run was routed to is the obstacle), with a justification a person can judge. " +
	"A person decides; GET the endpoint + \"/\" + the proposal's id for the answer and, when rejected, the reason."

// withGuidance adds the rule, the guidance and the proposal endpoint to a
// denial's body.
func withGuidance(r *http.Request, d *errorDetail) {
	if d.Code != errcode.PolicyDenied && d.Code != errcode.ApprovalDenied {
		return
	}
	session := r.PathValue("id")
	if session == "" || len(r.URL.Path) < len("/v1/sessions/") || r.URL.Path[:len("/v1/sessions/")] != "/v1/sessions/" {
		return
	}
	d.Rule = firstEnforced(d.Reasons)
	d.AgentGuidance = agentGuidance
	d.Proposal = &proposalHint{Endpoint: confirm.ProposalEndpoint(session), Method: "POST",
		Kinds: []string{"egress_host", "pattern", "executor"},
		Body: map[string]string{"kind": "egress_host | pattern | executor", "value": "host[:port] | pattern id | executor name",
			"justification": "why the task needs it"}}
}

// firstEnforced is the rule to name: the first enforced reason, one about
// the request before one about the executors (which an exception for
// the session cannot change).
func firstEnforced(rs []policy.Reason) string {
	for _, pass := range []bool{false, true} {
		for _, r := range rs {
			if r.Enforcement == "" && (pass || !strings.HasPrefix(r.Code, "executor")) {
				return r.Code
			}
		}
	}
	if len(rs) > 0 {
		return rs[0].Code
	}
	return ""
}
