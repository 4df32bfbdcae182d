package policy

import (
	"context"
	"testing"
)

// TestEgressFailsClosed: a tree without sandgate.egress, a decision that
// is not an egress decision, or an evaluation error all deny the
// connection, naming why in the rule.
func TestEgressFailsClosed(t *testing.T) {
	in := EgressInput{Mode: "PERMISSIVE", Host: "pypi.org", Port: 443, Scheme: "https", SessionID: "s", Tenant: "t",
		Resolved: []string{"203.0.113.10"}}
	const header = "# METADATA\n# scope: package\n# schemas:\n#   - input: schema.egress_input\npackage sandgate.egress\n\n"
	cases := []struct {
		name, src, wantRule string
	}{
		{"the shipped policy allows the preset", "", "permissive-presets"},
		{"no egress package", "-", ReasonUndefined},
		{"an unknown action", `decision := {"action": "maybe", "rule": "x", "reasons": []}`, ReasonInvalidDecision},
		{"an extra field", `decision := {"action": "allow", "rule": "x", "reasons": [], "why": 1}`, ReasonInvalidDecision},
		{"an evaluation error", `decision := {"action": "allow", "rule": sprintf("%d", [1 / 0]), "reasons": []}`, ReasonEvalError},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			extra := map[string]string{}
			switch tc.src {
			case "":
			case "-":
				extra["sandgate/egress/egress.rego"] = ""
			default:
				extra["sandgate/egress/egress.rego"] = header + tc.src
			}
			e := newEngine(t, Options{FS: treeWith(t, extra)})
			d := e.DecideEgress(context.Background(), in)
			if d.Rule != tc.wantRule || (tc.src != "" && d.Action != ActionDeny) || d.PolicyRevision != e.Revision() {
				t.Fatalf("decision %+v, want rule %s", d, tc.wantRule)
			}
		})
	}
}
