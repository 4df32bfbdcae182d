package policy

import (
	"context"
	"testing"
	"testing/fstest"
)

// modesEgressEngine is the shipped policy with egress rules and an
// enforcement table.
func modesEgressEngine(t *testing.T, rules []any, enforcement string) *Engine {
	t.Helper()
	fsys := treeWithEgress(t, func(eg map[string]any) { eg["rules"] = rules })
	if enforcement != "" {
		fsys["sandgate/config/enforcement/data.json"] = &fstest.MapFile{Data: []byte(enforcement)}
	}
	return newEngine(t, Options{FS: fsys})
}

// TestEgressEnforcementModes: a dryrun deny rule lets an allowed
// connection through with the would-be denial; a warn hold lets it
// through and is a warning; a tenant in warn mode is let through past the
// default; the shipped policy decides as before.
func TestEgressEnforcementModes(t *testing.T) {
	ctx := context.Background()
	rules := []any{
		map[string]any{"name": "all", "action": "allow", "hosts": []any{"*.example.org"}},
		map[string]any{"name": "no-bad", "action": "deny", "hosts": []any{"bad.example.org"}, "enforcement": "dryrun"},
		map[string]any{"name": "ask", "action": "require_approval", "hosts": []any{"ask.example.net"}, "enforcement": "warn"},
	}
	e := modesEgressEngine(t, rules, `{"tenants": {"acme": "warn"}}`)
	conn := func(host, tenant string) EgressInput {
		return EgressInput{Mode: "STRICT", Host: host, Port: 443, Scheme: "https", SessionID: "s", Tenant: tenant,
			Resolved: []string{"203.0.113.10"}}
	}
	for _, tc := range []struct {
		host, tenant                    string
		action, rule, wouldBe, wouldBeR string
		warnings                        int
	}{
		{"bad.example.org", "t", ActionAllow, "all", ActionDeny, "no-bad", 0},
		{"ask.example.net", "t", ActionAllow, "ask", ActionRequireApproval, "ask", 1},
		{"elsewhere.test", "t", ActionDeny, "default", "", "", 0},
		{"elsewhere.test", "acme", ActionAllow, "default", ActionDeny, "default", 1},
		{"www.example.org", "t", ActionAllow, "all", "", "", 0},
	} {
		d := e.DecideEgress(ctx, conn(tc.host, tc.tenant))
		if d.Action != tc.action || d.Rule != tc.rule || d.WouldBe != tc.wouldBe || d.WouldBeRule != tc.wouldBeR ||
			len(d.Warnings()) != tc.warnings {
			t.Errorf("%s (%s): %+v, want %s by %s, would be %q by %q, %d warnings", tc.host, tc.tenant, d, tc.action, tc.rule,
				tc.wouldBe, tc.wouldBeR, tc.warnings)
		}
	}
	// The decision log's result carries the would-be decision.
	res, err := resultValue(e.DecideEgress(ctx, conn("bad.example.org", "t")))
	if m, _ := res.(map[string]any); err != nil || m["would_be"] != ActionDeny || m["would_be_rule"] != "no-bad" {
		t.Errorf("decision log result %v %v", res, err)
	}
	shipped := newEngine(t, Options{})
	if d := shipped.DecideEgress(ctx, conn("elsewhere.test", "acme")); d.Action != ActionDeny || d.WouldBe != "" {
		t.Errorf("the shipped policy: %+v", d)
	}
}

// TestEgressWouldBeIsChecked: a would-be action must be a stricter one,
// given with its rule.
func TestEgressWouldBeIsChecked(t *testing.T) {
	base := func(extra map[string]any) map[string]any {
		m := map[string]any{"action": "allow", "rule": "r", "reasons": []any{}}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	for _, tc := range []struct {
		v  map[string]any
		ok bool
	}{
		{base(map[string]any{"would_be": "deny", "would_be_rule": "x"}), true},
		{base(map[string]any{"would_be": "require_approval", "would_be_rule": "x"}), true},
		{base(map[string]any{"would_be": "deny"}), false},
		{base(map[string]any{"would_be": "allow", "would_be_rule": "x"}), false},
		{base(map[string]any{"would_be": "maybe", "would_be_rule": "x"}), false},
		{map[string]any{"action": "deny", "rule": "r", "reasons": []any{}, "would_be": "require_approval", "would_be_rule": "x"}, false},
	} {
		if _, err := parseEgressDecision(tc.v); (err == nil) != tc.ok {
			t.Errorf("%v: %v", tc.v, err)
		}
	}
}
