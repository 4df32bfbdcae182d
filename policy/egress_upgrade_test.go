package policy

import (
	"context"
	"testing"
)

// TestEgressUpgradeInput: a rule decides on the protocols a request asks
// to switch to (input.http.upgrade, typed by the input schema), not only
// on the Upgrade header's name: a WebSocket handshake is allowed, a
// request for "tcp" on the same path is not.
func TestEgressUpgradeInput(t *testing.T) {
	const src = "# METADATA\n# scope: package\n# schemas:\n#   - input: schema.egress_input\npackage sandgate.egress\n\n" +
		`default decision := {"action": "deny", "rule": "no-upgrade", "reasons": []}
decision := {"action": "allow", "rule": "ws", "reasons": []} if input.http.upgrade == ["websocket"]
`
	e := newEngine(t, Options{FS: treeWith(t, map[string]string{"sandgate/egress/egress.rego": src})})
	for _, c := range []struct {
		upgrade  []string
		wantRule string
	}{
		{[]string{"websocket"}, "ws"},
		{[]string{"tcp"}, "no-upgrade"},
		{[]string{"websocket", "tcp"}, "no-upgrade"},
		{nil, "no-upgrade"},
	} {
		in := EgressInput{Mode: "STRICT", Host: "api.example", Port: 443, Scheme: "https", SessionID: "s", Tenant: "t",
			Resolved: []string{"203.0.113.10"}, HTTP: &EgressHTTP{Method: "GET", Scheme: "https", Host: "api.example", Port: 443,
				Path: "/ws", HeaderNames: []string{"Connection", "Upgrade"}, Upgrade: c.upgrade}}
		if d := e.DecideEgress(context.Background(), in); d.Rule != c.wantRule {
			t.Errorf("upgrade %q: decision %+v, want rule %s", c.upgrade, d, c.wantRule)
		}
	}
}
