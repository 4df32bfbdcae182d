package policy

import (
	"context"
	"testing"
)

// modesTree is the default policy with enforcement modes in data: the
// CRITICAL denial is a dry run everywhere, and tenant "acme" is in warn
// mode.
func modesTree(t *testing.T) Options {
	return Options{FS: treeWith(t, map[string]string{
		"sandgate/config/enforcement/data.json": `{"rules": {"risk.critical": "dryrun"}, "tenants": {"acme": "warn"}}`,
	})}
}

func TestDryrunRuleAllowsAndRecordsWouldBe(t *testing.T) {
	e := newEngine(t, modesTree(t))
	d := e.Decide(context.Background(), baseInput("STRICT", "CRITICAL", false))
	if !d.Allowed() || d.WouldBe != ActionDeny {
		t.Fatalf("dryrun: %s (would be %q) %v, want allow that would be deny", d.Action, d.WouldBe, d.Reasons)
	}
	var relaxed []Reason
	for _, r := range d.Reasons {
		if !r.Enforced() {
			relaxed = append(relaxed, r)
		}
	}
	if len(relaxed) != 1 || relaxed[0].Code != "risk.critical" || relaxed[0].Enforcement != EnforcementDryrun {
		t.Fatalf("reasons %+v, want risk.critical alone in dryrun", d.Reasons)
	}
	if len(d.Warnings()) != 0 {
		t.Fatalf("a dry run told the agent: %v", d.Warnings())
	}
}

func TestWarnTenantAllowsAndTellsTheAgent(t *testing.T) {
	e := newEngine(t, modesTree(t))
	in := baseInput("STRICT", "HIGH", false)
	in.Principal.Tenant = "acme"
	d := e.Decide(context.Background(), in)
	if !d.Allowed() || d.WouldBe != ActionRequireApproval {
		t.Fatalf("warn: %s (would be %q) %v, want allow that would need approval", d.Action, d.WouldBe, d.Reasons)
	}
	if w := d.Warnings(); len(w) != 1 || w[0].Code != "risk.high" {
		t.Fatalf("warnings %+v, want risk.high", w)
	}
	// Another tenant is enforced as before.
	in.Principal.Tenant = "other"
	if d := e.Decide(context.Background(), in); d.Action != ActionRequireApproval || d.WouldBe != "" {
		t.Fatalf("enforced tenant: %s (would be %q)", d.Action, d.WouldBe)
	}
}

// TestUnknownEnforcementIsEnforced: a mode the policy does not know is
// the strict one.
func TestUnknownEnforcementIsEnforced(t *testing.T) {
	e := newEngine(t, Options{FS: treeWith(t, map[string]string{
		"sandgate/config/enforcement/data.json": `{"rules": {"risk.critical": "maybe"}}`,
	})})
	d := e.Decide(context.Background(), baseInput("STRICT", "CRITICAL", false))
	if d.Action != ActionDeny || d.WouldBe != "" {
		t.Fatalf("unknown mode: %s (would be %q) %v, want the enforced deny", d.Action, d.WouldBe, d.Reasons)
	}
}
