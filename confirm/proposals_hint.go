package confirm

import (
	"net/url"
	"strconv"
)

// ProposalHint is what a denial tells an agent about asking for a narrow
// exception: the endpoint, and the body that would ask for exactly what
// was denied. The API's error body carries one (error.proposal); a front
// end with its own error shape (the egress proxy's refusal, MCP, E2B) can
// carry the same.
type ProposalHint struct {
	Endpoint string `json:"endpoint"`
	Method   string `json:"method"`
	Kind     string `json:"kind"`
	Value    string `json:"value"`
	// Guidance says in words what to do with it.
	Guidance string `json:"agent_guidance"`
}

// ProposalGuidance is the words of every hint.
const ProposalGuidance = "Retrying around this denial is denied too, and recorded. If the task needs it, POST " +
	`{"kind", "value", "justification"} to the endpoint (the kind and value given ask for exactly what was denied, ` +
	"for this session only) with a justification a person can judge; GET the endpoint + \"/\" + the proposal's id " +
	"for the answer and, when rejected, the reason."

// ProposalEndpoint is the session's proposal endpoint.
func ProposalEndpoint(sessionID string) string {
	return "/v1/sessions/" + url.PathEscape(sessionID) + "/proposals"
}

// EgressProposalHint is the hint of an egress denial of host:port.
func EgressProposalHint(sessionID, host string, port int) ProposalHint {
	return ProposalHint{Endpoint: ProposalEndpoint(sessionID), Method: "POST", Kind: ProposalEgressHost,
		Value: host + ":" + strconv.Itoa(port), Guidance: ProposalGuidance}
}
