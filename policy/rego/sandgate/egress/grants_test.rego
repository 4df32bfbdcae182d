package sandgate.egress_grants_test

import data.sandgate.egress

far := 9999999999999999999

rules := [
	{"name": "api-read", "action": "allow", "hosts": ["api.example"], "methods": ["GET"]},
	{"name": "api-write", "action": "require_approval", "hosts": ["api.example"], "methods": ["POST"]},
	{"name": "api-admin", "action": "deny", "hosts": ["api.example"], "path_prefixes": ["/admin"]},
]

req(session, method, path, grants) := {
	"mode": "STRICT", "host": "api.example", "port": 443, "scheme": "https",
	"session_id": session, "tenant": "t1", "principal": "agent", "request_id": "r-1", "risk": "LOW",
	"resolved": ["203.0.113.10"], "gateway_addresses": [],
	"http": {"method": method, "scheme": "https", "host": "api.example", "port": 443, "path": path, "query": "", "header_names": ["Host"]},
	"grants": grants,
}

g(id, prefix, expires) := {
	"id": id, "scope": "session", "tenant": "t1", "session_id": "s-1", "method": "POST",
	"host": "api.example", "port": 443, "path_prefix": prefix, "expires_ns": expires,
}

covered(session, method, path, grants) := x if {
	x := egress.grant with input as req(session, method, path, grants) with data.sandgate.config.egress.rules as rules
}

test_grant_covers_its_prefix if {
	covered("s-1", "POST", "/v1/items", [g("g1", "/v1/items", far)]) == "g1"
	covered("s-1", "POST", "/v1/items/7", [g("g1", "/v1/items", far)]) == "g1"
	covered("s-1", "post", "/v1/items/7", [g("g1", "/v1/", far)]) == "g1"
}

test_grant_not_past_a_segment if {
	not covered("s-1", "POST", "/v1/itemsX", [g("g1", "/v1/items", far)])
	not covered("s-1", "POST", "/v2/items", [g("g1", "/v1/", far)])
}

test_grant_not_another_method_session_or_host if {
	not covered("s-2", "POST", "/v1/items", [g("g1", "/v1/", far)])
	not covered("s-1", "PUT", "/v1/items", [g("g1", "/v1/", far)]) # PUT: no rule, denied anyway
	other := json.patch(g("g1", "/v1/", far), [{"op": "replace", "path": "/port", "value": 8443}])
	not covered("s-1", "POST", "/v1/items", [other])
}

test_grant_expires if {
	not covered("s-1", "POST", "/v1/items", [g("g1", "/v1/", 1)])
}

test_grant_never_turns_a_deny if {
	# A POST under /admin is denied by api-admin: a grant that names it
	# covers nothing, and the decision is still a deny.
	not covered("s-1", "POST", "/admin/users", [g("g1", "/", far)])
	d := egress.decision with input as req("s-1", "POST", "/admin/users", [g("g1", "/", far)]) with data.sandgate.config.egress.rules as rules
	d.action == "deny"
}

test_smallest_id_wins if {
	covered("s-1", "POST", "/v1/items", [g("g2", "/v1/", far), g("g1", "/v1/items", far)]) == "g1"
}

test_grant_miss_says_why if {
	m := egress.grant_miss with input as req("s-1", "POST", "/v2/x", [g("g1", "/v1/", far)]) with data.sandgate.config.egress.rules as rules
	m == {["g1", "path /v2/x is not under /v1/"]}
}
