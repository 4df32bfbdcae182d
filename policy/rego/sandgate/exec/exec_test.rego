package sandgate.exec_test

import data.sandgate.exec

all_executors := ["subprocess", "docker", "aio"]

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
	"executors": {"available": all_executors},
}

# Every row of the mode table in DESIGN.md §3: [mode, level, action, executor].
mode_table := [
	["STRICT", "SAFE", "allow", "subprocess"],
	["STRICT", "LOW", "allow", "docker"],
	["STRICT", "MEDIUM", "allow", "docker"],
	["STRICT", "HIGH", "require_approval", "docker"],
	["STRICT", "CRITICAL", "deny", "docker"],
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
	d.reasons[0].code == "risk.high"
}

test_allow_has_no_reasons if {
	d := exec.decision with input as mk("STRICT", "SAFE", true)
	d.reasons == []
	d.obligations == {"network": false, "timeout_s": 30, "memory_mb": 512}
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
	inp := json.patch(mk("STRICT", "LOW", false), [{"op": "replace", "path": "/executors/available", "value": ["subprocess"]}])
	d := exec.decision with input as inp
	d.action == "deny"
	d.executor == "docker"
	d.reasons[0].code == "executor_unavailable"
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
	inp := json.patch(mk("STRICT", "HIGH", false), [{"op": "replace", "path": "/executors/available", "value": []}])
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
