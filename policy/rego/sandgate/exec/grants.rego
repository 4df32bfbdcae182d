# Grants: which standing approval (a grant, package confirm) covers a request the
# decision holds for approval. The approval service asks
# data.sandgate.exec.grant with the request's decision input and the
# tenant's live grants in input.grants; an undefined answer means a
# person is asked, as without grants. A grant is data this policy reads,
# never a bypass: the decision is unchanged, and only what this file
# says about the grants spares the prompt.
#
# A grant covers a request when the request's approval comes from the
# mode table (the risk level's row requires approval), the grant's scope
# holds (its session, or any session of its tenant), the language is the
# same (or the grant's is "*"), the request's level is at or below the grant's, every risk
# pattern of the request is among the grant's, and it has not expired.
# CRITICAL is never covered unless an administrator's Rego adds a
# definition of grant_covers_critical(g) (or lists grant ids in
# data.sandgate.config.grants.critical_ids).
package sandgate.exec

import data.sandgate.config

# grant is the id of the covering grant; the smallest id when several do,
# so the answer does not depend on evaluation order.
grant := sort(covering_grants)[0] if count(covering_grants) > 0

covering_grants contains g.id if {
	row.action == "require_approval"
	some g in input.grants
	grant_in_scope(g)
	grant_language(g)
	level_rank[level] <= level_rank[g.level]
	grant_level_allowed(g)
	every p in input.risk.patterns {
		p.id in g.patterns
	}
	time.now_ns() < g.expires_ns
}

grant_in_scope(g) if {
	g.scope == "session"
	g.tenant == input.principal.tenant
	g.session_id == input.request.session_id
}

grant_in_scope(g) if {
	g.scope == "tenant"
	g.tenant == input.principal.tenant
}

# A grant names its language, or "*" (an accepted pattern proposal,
# which is about the pattern whatever the language).
grant_language(g) if g.language == input.request.language

grant_language(g) if g.language == "*"

grant_level_allowed(_) if level != "CRITICAL"

grant_level_allowed(g) if {
	level == "CRITICAL"
	grant_covers_critical(g)
}

# The administrators' switch for CRITICAL; by default it lists nothing.
grant_covers_critical(g) if g.id in object.get(object.get(config, "grants", {}), "critical_ids", [])

# grant_miss names, for each grant in input.grants, why it does not cover
# the request: [grant id, reason] pairs, which the approval page shows as
# "grants that almost matched". A grant with no pair covers it.
grant_miss contains [g.id, "another session or tenant"] if {
	some g in input.grants
	not grant_in_scope(g)
}

grant_miss contains [g.id, sprintf("language %s, not %s", [input.request.language, g.language])] if {
	some g in input.grants
	not grant_language(g)
}

grant_miss contains [g.id, sprintf("risk %s is above the grant's %s", [level, g.level])] if {
	some g in input.grants
	level_rank[level] > level_rank[g.level]
}

grant_miss contains [g.id, "CRITICAL is covered only when an administrator's rule says so"] if {
	some g in input.grants
	level == "CRITICAL"
	not grant_covers_critical(g)
}

grant_miss contains [g.id, sprintf("pattern %s is not among the grant's", [p.id])] if {
	some g in input.grants
	some p in input.risk.patterns
	not p.id in g.patterns
}

grant_miss contains [g.id, "expired"] if {
	some g in input.grants
	time.now_ns() >= g.expires_ns
}

grant_miss contains [g.id, "the request's approval does not come from the mode table"] if {
	some g in input.grants
	not row.action == "require_approval"
}
