package sandgate.egress_test

import data.sandgate.egress

# Enforcement modes (the last section of egress.rego).

mode_rules := [
	{"name": "gh", "action": "allow", "hosts": ["*.github.com"]},
	{"name": "no-gist", "action": "deny", "hosts": ["gist.github.com"], "enforcement": "dryrun"},
	{"name": "ask", "action": "require_approval", "hosts": ["*.example.org"], "enforcement": "warn"},
	{"name": "ro", "action": "allow", "hosts": ["api.example"], "request_preset": "http-readonly", "enforcement": "dryrun"},
]

decide_with(i, rules, enforcement) := d if {
	d := egress.decision with input as i
		with data.sandgate.config.egress.rules as rules
		with data.sandgate.config.enforcement as enforcement
}

test_a_dryrun_deny_rule_lets_an_allowed_host_through if {
	d := decide_with(conn("STRICT", "gist.github.com", 443, public), mode_rules, {})
	d.action == "allow"
	d.rule == "gh"
	d.would_be == "deny"
	d.would_be_rule == "no-gist"
	d.reasons == [{"code": "egress.denied", "message": "gist.github.com:443 is denied by rule \"no-gist\"", "enforcement": "dryrun"}]
}

test_a_dryrun_deny_rule_opens_nothing_the_default_denies if {
	rules := [{"name": "no-all", "action": "deny", "hosts": ["*"], "enforcement": "dryrun"}]
	d := decide_with(conn("STRICT", "evil.test", 443, public), rules, {})
	d.action == "deny"
	d.rule == "default"
	not d.would_be
	{r.code: object.get(r, "enforcement", "enforce") | some r in d.reasons} == {"egress.not_allowed": "enforce", "egress.denied": "dryrun"}
}

test_a_warn_approval_rule_lets_through_and_tells if {
	d := decide_with(conn("STRICT", "www.example.org", 443, public), mode_rules, {})
	d.action == "allow"
	d.rule == "ask"
	d.would_be == "require_approval"
	d.would_be_rule == "ask"
	d.reasons == [{"code": "egress.approval", "message": "www.example.org:443 is not on an allow-list", "enforcement": "warn"}]

	# An enforced approval rule after it holds.
	rules := array.concat(mode_rules, [{"name": "ask-all", "action": "require_approval", "hosts": ["*"]}])
	h := decide_with(conn("STRICT", "www.example.org", 443, public), rules, {})
	h.action == "require_approval"
	h.rule == "ask-all"
	not h.would_be
}

test_a_dryrun_tenant_is_let_through_and_recorded if {
	d := decide_with(conn("STRICT", "evil.test", 443, public), [], {"tenants": {"team-a": "dryrun"}})
	d.action == "allow"
	d.rule == "default"
	d.would_be == "deny"
	d.reasons[0].code == "egress.not_allowed"
	d.reasons[0].enforcement == "dryrun"
	other := json.patch(conn("STRICT", "evil.test", 443, public), [{"op": "replace", "path": "/tenant", "value": "team-b"}])
	o := decide_with(other, [], {"tenants": {"team-a": "dryrun"}})
	o.action == "deny"
	not o.would_be
}

test_the_stricter_mode_wins_and_unknown_is_enforce if {
	rules := [{"name": "no", "action": "deny", "hosts": ["bad.test"], "enforcement": "dryrun"}, {"name": "all", "action": "allow", "hosts": ["*"]}]
	w := decide_with(conn("STRICT", "bad.test", 443, public), rules, {"rules": {"egress.denied": "warn"}})
	w.action == "allow"
	w.reasons[0].enforcement == "warn"
	e := decide_with(conn("STRICT", "bad.test", 443, public), rules, {"tenants": {"team-a": "enforce"}})
	e.action == "deny"
	u := decide_with(conn("STRICT", "bad.test", 443, public), rules, {"rules": {"egress.denied": "maybe"}})
	u.action == "deny"
	not u.would_be
}

test_address_checks_are_always_enforced if {
	rules := [{"name": "all", "action": "allow", "hosts": ["*"]}]
	d := decide_with(conn("STRICT", "meta.test", 443, ["169.254.169.254"]), rules, {"tenants": {"team-a": "dryrun"}, "rules": {"egress.blocked_address": "dryrun"}})
	d.action == "deny"
	d.rule == "egress.blocked_address"
	not d.would_be
	u := decide_with(conn("STRICT", "none.test", 443, []), rules, {"tenants": {"team-a": "dryrun"}})
	u.rule == "egress.unresolved"
}

test_a_dryrun_request_rule_lets_the_request_through if {
	d := decide_with(req("api.example", "DELETE", "/v1/items/1", ""), mode_rules, {})
	d.action == "allow"
	d.rule == "ro"
	d.would_be == "deny"
	d.reasons[0].code == "egress.request_not_allowed"
	d.reasons[0].enforcement == "dryrun"
	ok := decide_with(req("api.example", "GET", "/v1/items/1", ""), mode_rules, {})
	ok.action == "allow"
	ok.rule == "ro/read"
	not ok.would_be
}

test_without_modes_decisions_are_the_enforced_ones if {
	every i in [
		conn("STRICT", "gist.github.com", 443, public),
		conn("STRICT", "www.example.org", 443, public),
		req("api.example", "DELETE", "/v1/items/1", ""),
		conn("PERMISSIVE", "pypi.org", 443, public),
	] {
		d := egress.decision with input as i with data.sandgate.config.egress.rules as [{"name": "x", "action": "deny", "hosts": ["gist.github.com"]}]
		e := egress.enforced_decision with input as i with data.sandgate.config.egress.rules as [{"name": "x", "action": "deny", "hosts": ["gist.github.com"]}]
		d == e
	}
}
