package sandgate.egress_test

import data.sandgate.egress

conn(mode, host, port, resolved) := {
	"mode": mode, "host": host, "port": port, "scheme": "https",
	"session_id": "s-1", "tenant": "team-a", "principal": "agent", "request_id": "r-1", "risk": "LOW",
	"resolved": resolved, "gateway_addresses": ["198.51.100.7"],
}

public := ["203.0.113.10"]

test_strict_denies_by_default if {
	d := egress.decision with input as conn("STRICT", "pypi.org", 443, public)
	d.action == "deny"
	d.rule == "default"
}

test_permissive_allows_presets_only if {
	d := egress.decision with input as conn("PERMISSIVE", "files.pythonhosted.org", 443, public)
	d.action == "allow"
	d.rule == "permissive-presets"
	other := egress.decision with input as conn("PERMISSIVE", "evil.example", 443, public)
	other.action == "deny"
}

test_session_rule_is_scoped if {
	rules := [{"name": "demo-pypi", "action": "allow", "presets": ["pypi"], "sessions": ["team-a/s-1"]}]
	d := egress.decision with input as conn("STRICT", "pypi.org", 443, public) with data.sandgate.config.egress.rules as rules
	d.action == "allow"
	d.rule == "demo-pypi"
	other := json.patch(conn("STRICT", "pypi.org", 443, public), [{"op": "replace", "path": "/session_id", "value": "s-2"}])
	o := egress.decision with input as other with data.sandgate.config.egress.rules as rules
	o.action == "deny"
}

test_deny_beats_allow_and_approval_is_last if {
	rules := [
		{"name": "ask", "action": "require_approval", "hosts": ["*"]},
		{"name": "gh", "action": "allow", "hosts": ["*.github.com"]},
		{"name": "no-gist", "action": "deny", "hosts": ["gist.github.com"]},
	]
	egress.decision.rule == "gh" with input as conn("STRICT", "api.github.com", 443, public) with data.sandgate.config.egress.rules as rules
	egress.decision.rule == "no-gist" with input as conn("STRICT", "gist.github.com", 443, public) with data.sandgate.config.egress.rules as rules
	d := egress.decision with input as conn("STRICT", "example.org", 443, public) with data.sandgate.config.egress.rules as rules
	d.action == "require_approval"
	d.rule == "ask"
}

test_blocked_addresses_need_an_explicit_rule if {
	glob_rule := [{"name": "all", "action": "allow", "hosts": ["*.test"], "cidrs": ["127.0.0.0/8"]}]
	d := egress.decision with input as conn("STRICT", "api.test", 443, ["127.0.0.1"]) with data.sandgate.config.egress.rules as glob_rule
	d.action == "deny"
	d.rule == "egress.blocked_address"
	named := [{"name": "api", "action": "allow", "hosts": ["api.test"], "cidrs": ["127.0.0.1/32"]}]
	ok := egress.decision with input as conn("STRICT", "api.test", 443, ["127.0.0.1"]) with data.sandgate.config.egress.rules as named
	ok.action == "allow"
	flip := egress.decision with input as conn("STRICT", "api.test", 443, ["10.1.2.3"]) with data.sandgate.config.egress.rules as named
	flip.action == "deny"
	own := egress.decision with input as conn("STRICT", "api.test", 443, ["198.51.100.7"]) with data.sandgate.config.egress.rules as named
	own.rule == "egress.blocked_address"
}

test_ports_outside_the_list_need_a_rule if {
	rules := [{"name": "gh", "action": "allow", "hosts": ["github.com"]}]
	d := egress.decision with input as conn("STRICT", "github.com", 22, public) with data.sandgate.config.egress.rules as rules
	d.action == "deny"
	ssh := [{"name": "gh-ssh", "action": "allow", "hosts": ["github.com"], "ports": [22]}]
	egress.decision.action == "allow" with input as conn("STRICT", "github.com", 22, public) with data.sandgate.config.egress.rules as ssh
}

test_unresolved_is_denied if {
	rules := [{"name": "all", "action": "allow", "hosts": ["*"]}]
	d := egress.decision with input as conn("STRICT", "nowhere.test", 443, []) with data.sandgate.config.egress.rules as rules
	d.rule == "egress.unresolved"
}

test_an_approval_rule_naming_the_host_exempts_its_range if {
	rules := [{"name": "ask", "action": "require_approval", "hosts": ["ask.test"], "cidrs": ["127.0.0.1/32"]}]
	d := egress.decision with input as conn("STRICT", "ask.test", 443, ["127.0.0.1"]) with data.sandgate.config.egress.rules as rules
	d.action == "require_approval"
	d.rule == "ask"
}
