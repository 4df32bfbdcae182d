package mcp

import (
	"encoding/json"

	"github.com/sandgate/sandgate/confirm"
	"github.com/sandgate/sandgate/errcode"
)

// A denial reaching an MCP client carries what the API's does (issue
// 31): the rule that denied, agent_guidance and the session's proposal
// endpoint, in the error body under _meta and as a line of the text.

// proposalHint is error.proposal of a denial.
type proposalHint struct {
	Endpoint string   `json:"endpoint"`
	Method   string   `json:"method"`
	Kinds    []string `json:"kinds"`
}

// withGuidance fills a denial's rule, guidance and proposal endpoint for
// the session the call worked in (its session_id argument, else its MCP
// session's own).
func withGuidance(c *call, b *errorBody) {
	if b.Code != errcode.PolicyDenied && b.Code != errcode.ApprovalDenied {
		return
	}
	session := argSession(c)
	if session == "" && (c.fwd != nil || c.req != nil && c.req.Session != nil) {
		session = c.ownSession()
	}
	if session == "" {
		return
	}
	for _, r := range b.Reasons {
		if r.Enforcement == "" {
			b.Rule = r.Code
			break
		}
	}
	b.AgentGuidance = confirm.ProposalGuidance
	b.Proposal = &proposalHint{Endpoint: confirm.ProposalEndpoint(session), Method: "POST", Kinds: []string{confirm.ProposalEgressHost, confirm.ProposalPattern}}
}

// argSession is the call's session_id argument, if it has one.
func argSession(c *call) string {
	if c.req == nil || c.req.Params == nil || len(c.req.Params.Arguments) == 0 {
		return ""
	}
	var args struct {
		SessionID string `json:"session_id"`
	}
	_ = json.Unmarshal(c.req.Params.Arguments, &args)
	return args.SessionID
}
