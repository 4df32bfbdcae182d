package mcp

import (
	"strings"
	"testing"

	"github.com/sandgate/sandgate/confirm"
)

// TestDenialLeadsToProposal: a policy denial reaching an MCP client names
// the rule, tells the model how to ask, and gives the proposal endpoint of
// the session the call worked in, in _meta and in the text.
func TestDenialLeadsToProposal(t *testing.T) {
	e := newEnv(t, envOpts{})
	cs := e.connect(agentTok, nil)
	res := callTool(t, cs, "execute", map[string]any{"command": criticalBash, "session_id": "work"})
	body := errorOf(t, res)
	if body.Rule != "risk.critical" || body.Proposal == nil || body.Proposal.Endpoint != "/v1/sessions/work/proposals" ||
		!strings.Contains(body.AgentGuidance, "justification") {
		t.Fatalf("denial body %+v", body)
	}
	if !strings.Contains(text(res), "to ask for a narrow exception to risk.critical: POST a proposal") {
		t.Errorf("text %q", text(res))
	}
	own := errorOf(t, callTool(t, cs, "execute", map[string]any{"command": criticalBash}))
	if own.Proposal == nil || !strings.HasPrefix(own.Proposal.Endpoint, "/v1/sessions/") {
		t.Errorf("the MCP session's own: %+v", own.Proposal)
	}
	if inv := errorOf(t, callTool(t, cs, "run_code", map[string]any{})); inv.Proposal != nil {
		t.Errorf("a validation error carries a proposal: %+v", inv)
	}
}

// TestReasonReachesTheApprover: an execute call's reason and a run_code
// call's context.intent are shown to the approver of the held request.
func TestReasonReachesTheApprover(t *testing.T) {
	e := newEnv(t, envOpts{})
	cs := e.connect(agentTok, nil)
	for _, tc := range []struct {
		tool string
		args map[string]any
	}{
		{"run_code", map[string]any{"code": highRisk, "context": map[string]any{"intent": "list the build's tools", "needs_browser": false, "needs_persistent_fs": false}}},
		{"execute", map[string]any{"command": "eval \"$STEP\"", "reason": "list the build's tools"}},
	} {
		ch := callAsync(t, cs, tc.tool, tc.args)
		p := e.waitPending()
		t.Logf("%s held: %s", tc.tool, p.ID)
		if p.Intent != "list the build's tools" {
			t.Errorf("%s: the approver sees intent %q", tc.tool, p.Intent)
		}
		if _, err := e.hub.Decide(t.Context(), p.ID, confirm.Approver{Name: "alice", Role: "approver"},
			confirm.Decision{Decision: "deny", Digest: p.Digest}); err != nil {
			t.Fatal(err)
		}
		await(t, ch)
	}
}
