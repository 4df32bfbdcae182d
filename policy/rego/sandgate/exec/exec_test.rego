package sandgate.exec_test

import data.sandgate.exec

full_caps := {
	"network_isolation": true,
	"network_grant": false,
	"memory_limit": true,
	"process_limit": true,
	"kill_detached": true,
	"filesystem_isolation": true,
	"kernels": false,
	"session_sandbox": true,
	"requires_session": false,
	"root_fs": "host",
	"isolation": "namespaces",
}

all_executors := {kind: {"available": true, "capabilities": full_caps} | some kind in ["subprocess", "docker", "gvisor", "aio"]}

# with_executor replaces one executor's state in inp.
with_executor(inp, kind, state) := json.patch(inp, [{"op": "add", "path": sprintf("/executors/%s", [kind]), "value": state}])

# with_caps is inp where kind has full_caps with the given changes.
with_caps(inp, kind, changes) := with_executor(inp, kind, {"available": true, "capabilities": object.union(full_caps, changes)})

codes(d) := [r.code | some r in d.reasons]

mk(mode, level, proven) := {
	"mode": mode,
	"request": {
		"kind": "run_code",
		"session_id": "s-1",
		"language": "python",
		"code_bytes": 12,
		"code_sha256": "abc",
		"timeout_s": 30,
		"context": {},
	},
	"risk": {"level": level, "proven_safe": proven, "patterns": []},
	"principal": {"role": "agent", "name": "agent"},
	"executors": all_executors,
}

# Every row of the mode table in DESIGN.md §3: [mode, level, action,
# executor], with every executor available: STRICT's HIGH (approved) and
# CRITICAL (denied) get the isolation upgrade, gVisor.
mode_table := [
	["STRICT", "SAFE", "allow", "subprocess"],
	["STRICT", "LOW", "allow", "docker"],
	["STRICT", "MEDIUM", "allow", "docker"],
	["STRICT", "HIGH", "require_approval", "gvisor"],
	["STRICT", "CRITICAL", "deny", "gvisor"],
	["PERMISSIVE", "SAFE", "allow", "subprocess"],
	["PERMISSIVE", "LOW", "allow", "subprocess"],
	["PERMISSIVE", "MEDIUM", "allow", "docker"],
	["PERMISSIVE", "HIGH", "require_approval", "docker"],
	["PERMISSIVE", "CRITICAL", "require_approval", "docker"],
]

test_mode_table if {
	every row in mode_table {
		d := exec.decision with input as mk(row[0], row[1], row[1] == "SAFE")
		d.action == row[2]
		d.executor == row[3]
	}
}

test_strict_critical_reason if {
	d := exec.decision with input as mk("STRICT", "CRITICAL", false)
	d.reasons == [{"code": "risk.critical", "message": "risk level CRITICAL is denied in STRICT mode"}]
}

test_high_needs_approval_reason if {
	d := exec.decision with input as mk("STRICT", "HIGH", false)
	d.reasons == [{"code": "risk.high", "message": "risk level HIGH requires human approval in STRICT mode"}]
}

test_allow_has_no_reasons if {
	d := exec.decision with input as mk("STRICT", "SAFE", true)
	d.reasons == []
	d.obligations == {"network": false, "timeout_s": 30, "memory_mb": 512, "max_procs": 128}
}

test_unproven_safe_is_low if {
	d := exec.decision with input as mk("STRICT", "SAFE", false)
	d.action == "allow"
	d.executor == "docker"
}

test_aio_routing if {
	every flag in ["needs_browser", "needs_persistent_fs"] {
		every mode in ["STRICT", "PERMISSIVE"] {
			inp := json.patch(mk(mode, "LOW", false), [{"op": "add", "path": "/request/context", "value": {flag: true}}])
			d := exec.decision with input as inp
			d.action == "allow"
			d.executor == "aio"
			d.obligations.memory_mb == 2048
		}
	}
}

test_aio_keeps_approval_and_deny if {
	high := json.patch(mk("STRICT", "HIGH", false), [{"op": "add", "path": "/request/context", "value": {"needs_browser": true}}])
	dh := exec.decision with input as high
	dh.action == "require_approval"
	dh.executor == "aio"
	crit := json.patch(mk("STRICT", "CRITICAL", false), [{"op": "add", "path": "/request/context", "value": {"needs_browser": true}}])
	dc := exec.decision with input as crit
	dc.action == "deny"
}

test_executor_unavailable_denies if {
	inp := with_executor(mk("STRICT", "LOW", false), "docker", {"available": false, "reason": "engine unreachable", "capabilities": {}})
	d := exec.decision with input as inp
	d.action == "deny"
	d.executor == "docker"
	d.reasons == [{"code": "executor_unavailable", "message": "executor \"docker\" is not available: engine unreachable"}]
}

test_executor_not_wired_denies if {
	inp := json.patch(mk("STRICT", "LOW", false), [{"op": "remove", "path": "/executors/docker"}])
	d := exec.decision with input as inp
	d.action == "deny"
	d.reasons == [{"code": "executor_unavailable", "message": "executor \"docker\" is not available"}]
}

# The non-root gateway: subprocess in process-group mode cannot isolate
# the network, kill detached processes or bound the run's processes. A
# SAFE run is denied naming each, never sent there to fail.
test_process_group_subprocess_denied_naming_capabilities if {
	inp := with_caps(mk("STRICT", "SAFE", true), "subprocess", {
		"network_isolation": false, "kill_detached": false, "process_limit": false,
		"isolation": "process-group",
	})
	d := exec.decision with input as inp
	d.action == "deny"
	d.executor == "subprocess"
	d.reasons == [
		{"code": "executor.capability_missing", "message": "subprocess cannot enforce network isolation (process-group mode)"},
		{"code": "executor.capability_missing", "message": "subprocess cannot enforce the process limit (process-group mode)"},
		{"code": "executor.capability_missing", "message": "subprocess cannot enforce the timeout on detached processes (process-group mode)"},
	]
}

test_each_obligation_needs_its_capability if {
	every name in ["network_isolation", "kill_detached", "memory_limit", "process_limit"] {
		d := exec.decision with input as with_caps(mk("PERMISSIVE", "MEDIUM", false), "docker", {name: false})
		d.action == "deny"
		codes(d) == ["executor.capability_missing"]
		contains(d.reasons[0].message, exec.capability_text[name])
	}
}

test_capability_missing_beats_approval if {
	d := exec.decision with input as with_caps(mk("STRICT", "HIGH", false), "gvisor", {"memory_limit": false})
	d.action == "deny"
	codes(d) == ["executor.capability_missing"]
}

test_capability_message_without_isolation if {
	inp := with_executor(mk("STRICT", "LOW", false), "docker", {"available": true, "capabilities": {
		"network_isolation": true, "kill_detached": true, "memory_limit": true,
	}})
	d := exec.decision with input as inp
	d.reasons == [{"code": "executor.capability_missing", "message": "docker cannot enforce the process limit"}]
}

test_unavailable_is_not_also_capability_missing if {
	inp := with_executor(mk("STRICT", "LOW", false), "docker", {"available": false, "reason": "down", "capabilities": {}})
	d := exec.decision with input as inp
	codes(d) == ["executor_unavailable"]
}

test_network_grant_needed_for_network if {
	obl := {"network": true, "timeout_s": 30, "memory_mb": 512, "max_procs": 128}
	d := exec.decision with input as mk("STRICT", "LOW", false) with exec.obligations as obl
	d.action == "deny"
	d.reasons == [{"code": "executor.capability_missing", "message": "docker cannot enforce network access through the egress proxy (namespaces mode)"}]
	dg := exec.decision with input as with_caps(mk("STRICT", "LOW", false), "docker", {"network_grant": true})
		with exec.obligations as obl
	dg.action == "allow"
}

test_required_capabilities_from_config if {
	inp := with_caps(mk("STRICT", "SAFE", true), "subprocess", {"filesystem_isolation": false})
	allowed := exec.decision with input as inp
	allowed.action == "allow"
	d := exec.decision with input as inp with data.sandgate.config.required_capabilities as ["filesystem_isolation"]
	d.action == "deny"
	d.reasons[0].message == "subprocess cannot enforce filesystem isolation (namespaces mode)"
}

test_required_capabilities_lists_what_the_run_needs if {
	exec.required_capabilities == {"network_isolation", "kill_detached", "memory_limit", "process_limit"} with input as mk("STRICT", "LOW", false)
	stateful := json.patch(mk("STRICT", "LOW", false), [{"op": "add", "path": "/request/stateful", "value": true}])
	"kernels" in exec.required_capabilities with input as stateful
	"filesystem_isolation" in exec.required_capabilities with input as mk("STRICT", "LOW", false)
		with data.sandgate.config.required_capabilities as ["filesystem_isolation"]
}

test_max_procs_obligation if {
	d := exec.decision with input as mk("STRICT", "LOW", false)
	d.obligations.max_procs == 128
	dd := exec.decision with input as mk("STRICT", "LOW", false)
		with data.sandgate.config.limits.max_procs as {"docker": 16}
	dd.obligations.max_procs == 16
}

test_unknown_mode_denies if {
	d := exec.decision with input as mk("YOLO", "SAFE", true)
	d.action == "deny"
	d.executor == "none"
	d.reasons[0].code == "mode.unknown"
	count(d.reasons) == 1
}

test_unknown_level_denies if {
	d := exec.decision with input as mk("STRICT", "BOGUS", false)
	d.action == "deny"
	"risk.unknown_level" in {r.code | some r in d.reasons}
}

test_language_not_allowed if {
	inp := json.patch(mk("PERMISSIVE", "LOW", false), [{"op": "replace", "path": "/request/language", "value": "ruby"}])
	d := exec.decision with input as inp
	d.action == "deny"
	d.reasons[0].code == "language.not_allowed"
}

test_timeout_clamped if {
	inp := json.patch(mk("STRICT", "LOW", false), [{"op": "replace", "path": "/request/timeout_s", "value": 9999}])
	d := exec.decision with input as inp
	d.obligations.timeout_s == 300
}

test_deny_beats_approval if {
	inp := json.patch(mk("STRICT", "HIGH", false), [{"op": "replace", "path": "/executors", "value": {}}])
	d := exec.decision with input as inp
	d.action == "deny"
}

test_default_decision_denies if {
	d := exec.decision with exec.deny_reasons as set()
		with exec.approval_reasons as set()
		with exec.chosen_executor as "docker"
		with input as mk("STRICT", "LOW", false)
	d.action == "allow"
	dd := exec.decision with data.sandgate.config.modes as {} with input as mk("STRICT", "LOW", false)
	dd.action == "deny"
}

# without is STRICT HIGH with the given executors not wired.
without(kinds) := json.patch(mk("STRICT", "HIGH", false), [{"op": "remove", "path": sprintf("/executors/%s", [k])} | some k in kinds])

# Approved HIGH code goes to gVisor when it is available, with nothing
# but the approval reason.
test_strict_high_goes_to_gvisor if {
	d := exec.decision with input as mk("STRICT", "HIGH", false)
	d.action == "require_approval"
	d.executor == "gvisor"
	d.obligations.memory_mb == 512
	[r.code | some r in d.reasons] == ["risk.high"]
}

# Without gVisor it goes to docker, and the decision says so.
test_strict_high_falls_back_to_docker_with_reason if {
	d := exec.decision with input as without({"gvisor"})
	d.action == "require_approval"
	d.executor == "docker"
	d.reasons == [
		{"code": "executor.fallback", "message": "executor \"gvisor\" is not available; the run goes to \"docker\" instead"},
		{"code": "risk.high", "message": "risk level HIGH requires human approval in STRICT mode"},
	]
}

# Neither available: denied, naming the executor the run should have had.
test_strict_high_without_gvisor_or_docker_denies if {
	d := exec.decision with input as without({"gvisor", "docker"})
	d.action == "deny"
	d.executor == "gvisor"
	[r.code | some r in d.reasons] == ["executor_unavailable"]
}

# An upgrade without a fallback requires gVisor: no gVisor, no run.
test_upgrade_without_fallback_denies if {
	d := exec.decision with input as without({"gvisor"})
		with data.sandgate.config.isolation_upgrade.fallback as ""
	d.action == "deny"
	d.executor == "gvisor"
	[r.code | some r in d.reasons] == ["executor_unavailable"]
}

# The levels below the upgrade, PERMISSIVE and the AIO sandbox are not
# upgraded by default.
test_upgrade_scope_by_default if {
	every c in [
		["STRICT", "MEDIUM", false, {}, "docker"],
		["PERMISSIVE", "HIGH", false, {}, "docker"],
		["PERMISSIVE", "CRITICAL", false, {}, "docker"],
		["STRICT", "HIGH", false, {"needs_browser": true}, "aio"],
	] {
		inp := json.patch(mk(c[0], c[1], c[2]), [{"op": "add", "path": "/request/context", "value": c[3]}])
		d := exec.decision with input as inp
		d.executor == c[4]
	}
}

# The one data change the README shows: min_level LOW sends everything
# that is not SAFE to gVisor in STRICT (proven-safe code still runs in the
# subprocess, browser work in the AIO sandbox), and an allowed run that
# falls back to docker says so too.
test_admin_sends_everything_not_safe_to_gvisor if {
	every c in [
		["SAFE", true, {}, "allow", "subprocess"],
		["SAFE", false, {}, "allow", "gvisor"],
		["LOW", false, {}, "allow", "gvisor"],
		["MEDIUM", false, {}, "allow", "gvisor"],
		["HIGH", false, {}, "require_approval", "gvisor"],
		["CRITICAL", false, {}, "deny", "gvisor"],
		["LOW", false, {"needs_persistent_fs": true}, "allow", "aio"],
	] {
		inp := json.patch(mk("STRICT", c[0], c[1]), [{"op": "add", "path": "/request/context", "value": c[2]}])
		d := exec.decision with input as inp with data.sandgate.config.isolation_upgrade.min_level as "LOW"
		d.action == c[3]
		d.executor == c[4]
	}
	low := json.patch(without({"gvisor"}), [{"op": "replace", "path": "/risk/level", "value": "LOW"}])
	d := exec.decision with input as low with data.sandgate.config.isolation_upgrade.min_level as "LOW"
	d.action == "allow"
	d.executor == "docker"
	[r.code | some r in d.reasons] == ["executor.fallback"]
}

test_network_granted_by_a_session_scoped_egress_rule if {
	inp := json.patch(mk("STRICT", "LOW", false), [{"op": "add", "path": "/principal/tenant", "value": "team-a"}])
	plain := exec.decision with input as inp
	plain.obligations.network == false
	rules := [{"name": "demo-pypi", "action": "allow", "presets": ["pypi"], "sessions": ["team-a/s-1"]}]
	granted := exec.decision with input as inp with data.sandgate.config.egress.rules as rules
	granted.obligations.network == true
	other := json.patch(inp, [{"op": "replace", "path": "/request/session_id", "value": "s-2"}])
	not_other := exec.decision with input as other with data.sandgate.config.egress.rules as rules
	not_other.obligations.network == false
	denies := [{"name": "no", "action": "deny", "hosts": ["*"], "sessions": ["team-a/s-1"]}]
	d := exec.decision with input as inp with data.sandgate.config.egress.rules as denies
	d.obligations.network == false
}

# Stateful runs (DESIGN.md §11): every cell goes to the stateful executor
# whatever its level, the level still decides the action, and an executor
# without kernels is a deny naming the capability.
stateful(mode, level, proven) := json.patch(mk(mode, level, proven), [{"op": "add", "path": "/request/stateful", "value": true}])

kernel_caps := object.union(full_caps, {"kernels": true})

kernel_executors := {kind: {"available": true, "capabilities": kernel_caps} | some kind in ["subprocess", "docker", "gvisor", "aio"]}

test_stateful_routes_to_one_executor if {
	every row in mode_table {
		inp := json.patch(stateful(row[0], row[1], row[1] == "SAFE"), [{"op": "add", "path": "/executors", "value": kernel_executors}])
		d := exec.decision with input as inp
		d.action == row[2]
		d.executor == "docker"
	}
}

test_stateful_needs_kernels if {
	d := exec.decision with input as stateful("STRICT", "LOW", false)
	d.action == "deny"
	d.reasons == [{"code": "executor.capability_missing", "message": "docker cannot enforce stateful kernels (namespaces mode)"}]
}

test_stateful_python_only if {
	inp := json.patch(stateful("STRICT", "LOW", false), [
		{"op": "add", "path": "/executors", "value": kernel_executors},
		{"op": "replace", "path": "/request/language", "value": "bash"},
	])
	d := exec.decision with input as inp
	d.action == "deny"
	"stateful.language" in codes(d)
}

test_stateful_aio_when_needed if {
	inp := json.patch(stateful("STRICT", "LOW", false), [
		{"op": "add", "path": "/executors", "value": kernel_executors},
		{"op": "add", "path": "/request/context", "value": {"needs_persistent_fs": true}},
	])
	d := exec.decision with input as inp
	d.action == "allow"
	d.executor == "aio"
}

test_stateful_cells_get_no_network if {
	inp := json.patch(stateful("STRICT", "LOW", false), [
		{"op": "add", "path": "/executors", "value": kernel_executors},
		{"op": "add", "path": "/principal/tenant", "value": "team-a"},
	])
	rules := [{"name": "demo-pypi", "action": "allow", "presets": ["pypi"], "sessions": ["team-a/s-1"]}]
	d := exec.decision with input as inp with data.sandgate.config.egress.rules as rules
	d.action == "allow"
	d.obligations.network == false
}

# Enforcement modes: a dryrun rule lets the run through and records the
# would-be decision; warn does the same and tags the reason for the agent.
test_dryrun_rule_allows_and_records_would_be if {
	d := exec.decision with input as mk("STRICT", "CRITICAL", false)
		with data.sandgate.config.enforcement.rules as {"risk.critical": "dryrun"}
	d.action == "allow"
	d.executor == "gvisor"
	d.would_be == "deny"
	d.reasons == [{"code": "risk.critical", "message": "risk level CRITICAL is denied in STRICT mode", "enforcement": "dryrun"}]
}

test_warn_tenant_allows_approval_with_warning if {
	inp := json.patch(mk("STRICT", "HIGH", false), [{"op": "add", "path": "/principal/tenant", "value": "acme"}])
	d := exec.decision with input as inp
		with data.sandgate.config.enforcement.tenants as {"acme": "warn"}
	d.action == "allow"
	d.would_be == "require_approval"
	[r.enforcement | some r in d.reasons] == ["warn"]
}

test_stricter_mode_wins if {
	inp := json.patch(mk("STRICT", "CRITICAL", false), [{"op": "add", "path": "/principal/tenant", "value": "acme"}])
	d := exec.decision with input as inp
		with data.sandgate.config.enforcement as {"rules": {"risk.critical": "dryrun"}, "tenants": {"acme": "enforce"}}
	d.action == "deny"
	not d.would_be
}

test_executor_reasons_are_always_enforced if {
	inp := with_executor(mk("STRICT", "LOW", false), "docker", {"available": false, "reason": "down", "capabilities": full_caps})
	d := exec.decision with input as inp
		with data.sandgate.config.enforcement.rules as {"executor_unavailable": "dryrun"}
	d.action == "deny"
	codes(d) == ["executor_unavailable"]
}

test_no_modes_no_would_be if {
	d := exec.decision with input as mk("STRICT", "CRITICAL", false)
	d.action == "deny"
	not d.would_be
}

# A session that expects one sandbox for its life (E2B's): its SAFE and
# LOW runs both go to session_sandbox.executor, so they share the
# sandbox; a HIGH run in STRICT keeps the isolation upgrade; an executor
# without session_sandbox is refused, naming it; a stateful cell keeps
# the stateful executor and needs no session sandbox.
sandboxed(inp) := json.patch(inp, [{"op": "add", "path": "/request/session_sandbox", "value": true}])

test_session_sandbox_routes_every_level_to_one_executor if {
	every level in ["SAFE", "LOW", "MEDIUM"] {
		d := exec.decision with input as sandboxed(mk("STRICT", level, level == "SAFE"))
		d.action == "allow"
		d.executor == "docker"
	}
	high := exec.decision with input as sandboxed(mk("STRICT", "HIGH", false))
	high.executor == "gvisor"
}

test_session_sandbox_needs_the_capability if {
	d := exec.decision with input as with_caps(sandboxed(mk("STRICT", "LOW", false)), "docker", {"session_sandbox": false})
	d.action == "deny"
	d.reasons == [{"code": "executor.capability_missing", "message": "docker cannot enforce one sandbox for the session's life (namespaces mode)"}]
}

test_session_sandbox_not_asked_not_needed if {
	d := exec.decision with input as with_caps(mk("STRICT", "SAFE", true), "subprocess", {"session_sandbox": false})
	d.action == "allow"
	d.executor == "subprocess"
}

test_session_sandbox_stateful_cell_keeps_the_kernel_executor if {
	inp := json.patch(sandboxed(mk("STRICT", "LOW", false)), [{"op": "add", "path": "/request/stateful", "value": true}])
	d := exec.decision with input as with_caps(with_caps(inp, "docker", {"kernels": true, "session_sandbox": false}), "subprocess", {})
	d.action == "allow"
	d.executor == "docker"
}
