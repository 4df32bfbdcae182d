package mcp

import (
	"strings"
	"testing"

	"github.com/sandgate/sandgate/policy"
)

// TestWarningsToldInTheText: a decision with reasons in warn mode shows
// them in the structured decision and in the text an agent reads; a dry
// run's would-be action is in the structured decision only.
func TestWarningsToldInTheText(t *testing.T) {
	d := policy.Decision{Action: policy.ActionAllow, Executor: "docker", WouldBe: policy.ActionRequireApproval, DecisionID: "d-1",
		Reasons: []policy.Reason{{Code: "risk.high", Message: "subprocess spawns processes", Enforcement: policy.EnforcementWarn}}}
	v := viewDecision(d)
	if v.WouldBe != policy.ActionRequireApproval || v.DecisionID != "d-1" || len(v.Warnings) != 1 {
		t.Fatalf("decision view: %+v", v)
	}
	text := renderRun(runOutput{Decision: v, SandboxType: "docker"})
	if !strings.Contains(text, "policy warning risk.high: subprocess spawns processes (would be require_approval)") {
		t.Fatalf("text: %q", text)
	}
	d.Reasons[0].Enforcement = policy.EnforcementDryrun
	v = viewDecision(d)
	if len(v.Warnings) != 0 || strings.Contains(renderRun(runOutput{Decision: v}), "warning") || v.WouldBe == "" {
		t.Fatalf("dryrun: %+v", v)
	}
}
