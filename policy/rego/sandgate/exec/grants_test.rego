package sandgate.exec_grants_test

import data.sandgate.exec

far := 9999999999999999999

held(level, patterns, grants) := {
	"mode": "PERMISSIVE",
	"request": {
		"kind": "run_code",
		"session_id": "s-1",
		"language": "python",
		"code_bytes": 12,
		"code_sha256": "abc",
		"timeout_s": 30,
		"context": {},
	},
	"risk": {"level": level, "proven_safe": false, "patterns": [{"id": p, "level": level, "line": 1} | some p in patterns]},
	"principal": {"role": "agent", "name": "agent", "tenant": "t1"},
	"executors": {},
	"grants": grants,
}

g(id, scope, session, level, patterns, expires) := {
	"id": id, "scope": scope, "tenant": "t1", "session_id": session, "language": "python",
	"level": level, "patterns": patterns, "expires_ns": expires,
}

test_session_grant_covers_its_session if {
	exec.grant == "gr_1" with input as held("HIGH", ["subprocess"], [g("gr_1", "session", "s-1", "HIGH", ["subprocess"], far)])
}

test_session_grant_not_another_session if {
	not exec.grant with input as held("HIGH", ["subprocess"], [g("gr_1", "session", "s-2", "HIGH", ["subprocess"], far)])
}

test_tenant_grant_covers_every_session if {
	exec.grant == "gr_1" with input as held("HIGH", ["subprocess"], [g("gr_1", "tenant", "", "HIGH", ["subprocess", "socket"], far)])
}

test_other_tenant_not_covered if {
	inp := json.patch(held("HIGH", [], [g("gr_1", "tenant", "", "HIGH", [], far)]), [{"op": "replace", "path": "/principal/tenant", "value": "t2"}])
	not exec.grant with input as inp
}

test_new_pattern_not_covered if {
	not exec.grant with input as held("HIGH", ["subprocess", "socket"], [g("gr_1", "session", "s-1", "HIGH", ["subprocess"], far)])
}

test_expired_not_covered if {
	not exec.grant with input as held("HIGH", [], [g("gr_1", "session", "s-1", "HIGH", [], 1)])
}

test_higher_level_not_covered if {
	not exec.grant with input as held("HIGH", [], [g("gr_1", "session", "s-1", "MEDIUM", [], far)])
}

test_critical_never_by_default if {
	not exec.grant with input as held("CRITICAL", [], [g("gr_1", "session", "s-1", "CRITICAL", [], far)])
}

test_critical_when_the_administrator_says_so if {
	exec.grant == "gr_1" with input as held("CRITICAL", [], [g("gr_1", "session", "s-1", "CRITICAL", [], far)])
		with data.sandgate.config.grants.critical_ids as ["gr_1"]
}

test_smallest_id_wins if {
	exec.grant == "gr_a" with input as held("HIGH", [], [g("gr_b", "session", "s-1", "HIGH", [], far), g("gr_a", "tenant", "", "HIGH", [], far)])
}

test_no_grants_no_answer if {
	not exec.grant with input as held("HIGH", [], [])
}

test_any_language_grant if {
	gr := object.union(g("gr_1", "session", "s-1", "HIGH", ["subprocess"], far), {"language": "*"})
	exec.grant == "gr_1" with input as held("HIGH", ["subprocess"], [gr])
}

test_other_language_not_covered if {
	gr := object.union(g("gr_1", "session", "s-1", "HIGH", ["subprocess"], far), {"language": "bash"})
	not exec.grant with input as held("HIGH", ["subprocess"], [gr])
}

test_grant_miss_names_why if {
	misses := exec.grant_miss with input as held("HIGH", ["subprocess", "socket"], [g("gr_1", "session", "s-1", "HIGH", ["subprocess"], far)])
	misses == {["gr_1", "pattern socket is not among the grant's"]}
}

test_covering_grant_misses_nothing if {
	count(exec.grant_miss) == 0 with input as held("HIGH", ["subprocess"], [g("gr_1", "session", "s-1", "HIGH", ["subprocess"], far)])
}
