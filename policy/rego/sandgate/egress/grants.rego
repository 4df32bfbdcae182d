# Egress grants: which standing approval (a grant, package confirm) covers
# an HTTP request the decision holds for approval. The approval service
# asks data.sandgate.egress.grant with the request's decision input and
# the session's live egress grants in input.grants; an undefined answer
# means a person is asked, as without grants. A grant is data this policy
# reads, never a bypass: data.sandgate.egress.decision does not read
# input.grants, so a request that decision denies stays denied, and only
# what this file says spares the prompt of one it holds.
#
# An approver gives a grant by approving a held request "for this session
# for N minutes" with a path prefix (issue 33): it covers a later request
# of the same session (and tenant) whose decision is require_approval,
# with the same method, host and port, whose path is the prefix or lies
# beneath it (a prefix that ends in "/" covers what starts with it; any
# other covers itself and what follows it after a "/", so "/v1/items"
# covers "/v1/items/7" but not "/v1/itemsX"), until it expires.
package sandgate.egress

# grant is the id of the covering grant; the smallest id when several do,
# so the answer does not depend on evaluation order.
grant := sort(covering_grants)[0] if count(covering_grants) > 0

# The full reference, not the bare name: a tree whose egress.rego is
# replaced or removed still compiles this file (the grant is then
# undefined, and a person is asked).
covering_grants contains g.id if {
	input.http
	data.sandgate.egress.decision.action == "require_approval"
	some g in input.grants
	grant_in_session(g)
	grant_request(g)
	time.now_ns() < g.expires_ns
}

grant_in_session(g) if {
	g.scope == "session"
	g.tenant == input.tenant
	g.session_id == input.session_id
}

grant_request(g) if {
	upper(input.http.method) == upper(g.method)
	lower(input.host) == lower(g.host)
	input.port == g.port
	grant_path_under(input.http.path, g.path_prefix)
}

grant_path_under(path, prefix) if path == prefix

grant_path_under(path, prefix) if {
	endswith(prefix, "/")
	startswith(path, prefix)
}

grant_path_under(path, prefix) if {
	not endswith(prefix, "/")
	startswith(path, concat("", [prefix, "/"]))
}

# grant_miss names, for each grant in input.grants, why it does not cover
# the request: [grant id, reason] pairs. A grant with no pair covers it.
grant_miss contains [g.id, "another session or tenant"] if {
	some g in input.grants
	not grant_in_session(g)
}

grant_miss contains [g.id, sprintf("method %s, not %s", [input.http.method, g.method])] if {
	some g in input.grants
	upper(input.http.method) != upper(g.method)
}

grant_miss contains [g.id, sprintf("%s:%d is not the grant's %s:%d", [input.host, input.port, g.host, g.port])] if {
	some g in input.grants
	not grant_same_host(g)
}

grant_miss contains [g.id, sprintf("path %s is not under %s", [input.http.path, g.path_prefix])] if {
	some g in input.grants
	not grant_path_under(input.http.path, g.path_prefix)
}

grant_miss contains [g.id, "expired"] if {
	some g in input.grants
	time.now_ns() >= g.expires_ns
}

grant_miss contains [g.id, "the request is not held for approval"] if {
	some g in input.grants
	not data.sandgate.egress.decision.action == "require_approval"
}

grant_same_host(g) if {
	lower(input.host) == lower(g.host)
	input.port == g.port
}
