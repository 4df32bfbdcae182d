package policy

import (
	"context"
	"testing"
)

// networkRules scope network to a session, a tenant, a mode, and deny a
// session (a deny rule grants nothing).
var networkRules = []any{
	map[string]any{"name": "pypi-s1", "action": "allow", "presets": []any{"pypi"}, "sessions": []any{"team-a/s-1"}},
	map[string]any{"name": "team-b", "action": "require_approval", "hosts": []any{"api.example.org"}, "tenants": []any{"team-b"}},
	map[string]any{"name": "s-3-permissive", "action": "allow", "hosts": []any{"api.example.org"}, "sessions": []any{"team-a/s-3"},
		"modes": []any{"PERMISSIVE"}},
	map[string]any{"name": "no-s-4", "action": "deny", "hosts": []any{"*"}, "sessions": []any{"team-a/s-4"}},
}

// networkEngine is the shipped policy with networkRules as its egress
// rules and networkModes as config.egress.network_modes.
func networkEngine(t *testing.T, networkModes []any) *Engine {
	t.Helper()
	fsys := treeWithEgress(t, func(eg map[string]any) { eg["rules"], eg["network_modes"] = networkRules, networkModes })
	return newEngine(t, Options{FS: fsys})
}

// TestNetworkGrantFollowsTheData: a run's network obligation, decided by
// the gateway from data.sandgate.derived.network (which `opa test` never
// sees: exec_test.rego covers the policy's own computation), follows the
// egress rules' scopes and modes, config.egress.network_modes, and an
// egress overlay as it is set and removed.
func TestNetworkGrantFollowsTheData(t *testing.T) {
	ctx := context.Background()
	run := func(mode, tenant, session string) Input {
		in := baseInput(mode, "LOW", false)
		in.Principal.Tenant, in.Request.SessionID = tenant, session
		return in
	}
	cases := []struct {
		name    string
		modes   []any
		in      Input
		network bool
	}{
		{"the session a rule is scoped to", nil, run("STRICT", "team-a", "s-1"), true},
		{"another session of the tenant", nil, run("STRICT", "team-a", "s-2"), false},
		{"the same session name in another tenant", nil, run("STRICT", "team-c", "s-1"), false},
		{"a tenant a rule is scoped to", nil, run("STRICT", "team-b", "s-9"), true},
		{"a rule limited to another mode", nil, run("STRICT", "team-a", "s-3"), false},
		{"a rule limited to the run's mode", nil, run("PERMISSIVE", "team-a", "s-3"), true},
		{"a deny rule scoped to the session", nil, run("STRICT", "team-a", "s-4"), false},
		{"a mode in network_modes", []any{"PERMISSIVE"}, run("PERMISSIVE", "team-z", "s-9"), true},
		{"a mode not in network_modes", []any{"PERMISSIVE"}, run("STRICT", "team-z", "s-9"), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := networkEngine(t, tc.modes)
			d := e.Decide(ctx, tc.in)
			if d.Obligations.Network != tc.network {
				t.Fatalf("network %v, want %v (%s %+v)", d.Obligations.Network, tc.network, d.Action, d.Reasons)
			}
		})
	}
	t.Run("an overlay grants, and its removal takes back", func(t *testing.T) {
		e := networkEngine(t, nil)
		in := run("STRICT", "team-a", "s-7")
		rule := map[string]any{"name": "proposal:p1", "action": "allow", "hosts": []any{"pkg.example.org"}, "sessions": []any{"team-a/s-7"}}
		for _, step := range []struct {
			rules   []map[string]any
			network bool
		}{{nil, false}, {[]map[string]any{rule}, true}, {nil, false}} {
			if err := e.SetEgressOverlay(ctx, step.rules); err != nil {
				t.Fatal(err)
			}
			if d := e.Decide(ctx, in); d.Obligations.Network != step.network {
				t.Fatalf("overlay %v: network %v, want %v", step.rules, d.Obligations.Network, step.network)
			}
		}
	})
}
