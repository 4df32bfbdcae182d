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

# Requests (issue 33).

req(host, method, path, query) := object.union(conn("STRICT", host, 443, public), {"http": {
	"method": method, "scheme": "https", "host": host, "port": 443,
	"path": path, "query": query, "header_names": ["Accept", "User-Agent"],
}})

api_rules := [
	{"name": "api-ask", "action": "require_approval", "hosts": ["api.example"]},
	{"name": "api-get", "action": "allow", "hosts": ["api.example"], "methods": ["GET", "HEAD"], "path_prefixes": ["/v1/"]},
	{"name": "api-no-admin", "action": "deny", "hosts": ["api.example"], "paths": ["/v1/admin/**"]},
]

test_http_rules_mark_the_connection_for_inspection if {
	d := egress.decision with input as conn("STRICT", "api.example", 443, public) with data.sandgate.config.egress.rules as api_rules
	d.action == "allow"
	d.rule == "api-get"
	d.inspect == true
	plain := [{"name": "gh", "action": "allow", "hosts": ["github.com"]}]
	p := egress.decision with input as conn("STRICT", "github.com", 443, public) with data.sandgate.config.egress.rules as plain
	p.inspect == false
}

test_each_request_is_decided if {
	get := egress.decision with input as req("api.example", "GET", "/v1/items", "page=2") with data.sandgate.config.egress.rules as api_rules
	get.action == "allow"
	get.rule == "api-get"
	post := egress.decision with input as req("api.example", "POST", "/v1/items", "") with data.sandgate.config.egress.rules as api_rules
	post.action == "require_approval"
	post.rule == "api-ask"
	contains(post.reasons[0].message, "POST api.example:443/v1/items")
	admin := egress.decision with input as req("api.example", "GET", "/v1/admin/users", "") with data.sandgate.config.egress.rules as api_rules
	admin.action == "deny"
	admin.rule == "api-no-admin"
	outside := egress.decision with input as req("api.example", "GET", "/v2/items", "") with data.sandgate.config.egress.rules as api_rules
	outside.action == "require_approval"
}

test_an_unmatched_request_on_a_governed_host_is_denied_by_its_rule if {
	rules := [{"name": "ro", "action": "allow", "hosts": ["api.example"], "request_preset": "http-readonly"}]
	d := egress.decision with input as req("api.example", "DELETE", "/v1/items/1", "") with data.sandgate.config.egress.rules as rules
	d.action == "deny"
	d.rule == "ro"
	d.reasons[0].code == "egress.request_not_allowed"
	ok := egress.decision with input as req("api.example", "HEAD", "/", "") with data.sandgate.config.egress.rules as rules
	ok.action == "allow"
	ok.rule == "ro/read"
}

test_github_readonly if {
	rules := [{"name": "gh", "action": "allow", "request_preset": "github-readonly"}]
	c := egress.decision with input as conn("STRICT", "github.com", 443, public) with data.sandgate.config.egress.rules as rules
	c.action == "allow"
	c.inspect == true
	clone := egress.decision with input as req("github.com", "GET", "/o/r.git/info/refs", "service=git-upload-pack") with data.sandgate.config.egress.rules as rules
	clone.action == "allow"
	pack := egress.decision with input as req("github.com", "POST", "/o/r.git/git-upload-pack", "") with data.sandgate.config.egress.rules as rules
	pack.rule == "gh/git-fetch"
	push := egress.decision with input as req("github.com", "GET", "/o/r.git/info/refs", "service=git-receive-pack") with data.sandgate.config.egress.rules as rules
	push.action == "deny"
	push.rule == "gh/no-push"
	send := egress.decision with input as req("github.com", "POST", "/o/r.git/git-receive-pack", "") with data.sandgate.config.egress.rules as rules
	send.action == "deny"
	send.rule == "gh"
	write := egress.decision with input as req("api.github.com", "POST", "/repos/o/r/issues", "") with data.sandgate.config.egress.rules as rules
	write.action == "deny"
	read := egress.decision with input as req("api.github.com", "GET", "/repos/o/r", "") with data.sandgate.config.egress.rules as rules
	read.action == "allow"
}

test_a_preset_takes_the_rules_hosts_and_scope if {
	rules := [{"name": "idx", "action": "allow", "request_preset": "pypi-install", "hosts": ["pypi.test"], "tenants": ["team-a"]}]
	d := egress.decision with input as req("pypi.test", "GET", "/simple/x/", "") with data.sandgate.config.egress.rules as rules
	d.rule == "idx/download"
	up := egress.decision with input as req("pypi.test", "POST", "/legacy/", "") with data.sandgate.config.egress.rules as rules
	up.action == "deny"
	not_pypi := egress.decision with input as req("pypi.org", "GET", "/simple/x/", "") with data.sandgate.config.egress.rules as rules
	not_pypi.rule == "default"
	other := json.patch(req("pypi.test", "GET", "/simple/x/", ""), [{"op": "replace", "path": "/tenant", "value": "team-b"}])
	o := egress.decision with input as other with data.sandgate.config.egress.rules as rules
	o.action == "deny"
}

test_requests_keep_the_address_checks if {
	rules := [{"name": "ro", "action": "allow", "hosts": ["api.test"], "methods": ["GET"], "cidrs": ["127.0.0.1/32"]}]
	local := object.union(req("api.test", "POST", "/", ""), {"resolved": ["127.0.0.1"]})
	d := egress.decision with input as local with data.sandgate.config.egress.rules as rules
	d.rule == "ro"
	d.reasons[0].code == "egress.request_not_allowed"
	elsewhere := object.union(req("api.test", "GET", "/", ""), {"resolved": ["10.0.0.1"]})
	e := egress.decision with input as elsewhere with data.sandgate.config.egress.rules as rules
	e.rule == "egress.blocked_address"
}

test_inspect_true_inspects_a_plain_rule if {
	rules := [{"name": "watched", "action": "allow", "hosts": ["api.example"], "inspect": true}]
	c := egress.decision with input as conn("STRICT", "api.example", 443, public) with data.sandgate.config.egress.rules as rules
	c.inspect == true
	r := egress.decision with input as req("api.example", "DELETE", "/x", "") with data.sandgate.config.egress.rules as rules
	r.action == "allow"
	r.rule == "watched"
	not r.inspect
}

# An accepted proposal's overlay (connection_only) lets the connection
# through and leaves the requests on an inspected host to its HTTP rules:
# it cannot widen a read-only host to writes.
test_a_connection_only_rule_decides_no_request if {
	rules := [
		{"name": "ro", "action": "allow", "hosts": ["api.example"], "request_preset": "http-readonly"},
		{"name": "proposal:p1", "action": "allow", "hosts": ["api.example"], "sessions": ["team-a/s-1"], "connection_only": true},
	]
	c := egress.decision with input as conn("STRICT", "api.example", 443, public) with data.sandgate.config.egress.rules as rules
	c.action == "allow"
	c.inspect == true
	post := egress.decision with input as req("api.example", "POST", "/v1/items", "") with data.sandgate.config.egress.rules as rules
	post.action == "deny"
	post.rule == "ro"
	plain := [{"name": "proposal:p1", "action": "allow", "hosts": ["other.example"], "sessions": ["team-a/s-1"], "connection_only": true}]
	o := egress.decision with input as conn("STRICT", "other.example", 443, public) with data.sandgate.config.egress.rules as plain
	o.action == "allow"
	o.inspect == false
}

# The gateway serves the rules compiled once (data.sandgate.derived.egress,
# written from compiled_egress); decisions over them are the decisions
# over the rules expanded per decision.
test_derived_rules_decide_as_expanded_ones if {
	rules := [
		{"name": "gh", "action": "allow", "request_preset": "github-readonly"},
		{"name": "ask", "action": "require_approval", "hosts": ["*.Example.org"], "tenants": ["team-a"]},
		{"name": "no", "action": "deny", "hosts": ["bad.example.org"], "sessions": ["team-a/s-1"]},
	]
	doc := egress.compiled_egress with data.sandgate.config.egress.rules as rules
	every i in [
		conn("STRICT", "github.com", 443, public),
		req("api.github.com", "POST", "/repos/o/r/issues", ""),
		req("github.com", "GET", "/o/r.git/info/refs", "service=git-receive-pack"),
		conn("STRICT", "www.example.org", 443, public),
		conn("STRICT", "bad.example.org", 443, public),
		conn("STRICT", "elsewhere.test", 443, public),
	] {
		want := egress.decision with input as i with data.sandgate.config.egress.rules as rules
		got := egress.decision with input as i with data.sandgate.derived.egress as doc
		got == want
	}
	d := egress.decision with input as conn("STRICT", "bad.example.org", 443, public) with data.sandgate.derived.egress as doc
	d.rule == "no"
}
