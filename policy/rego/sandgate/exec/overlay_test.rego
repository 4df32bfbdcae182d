package sandgate.exec_test

import data.sandgate.exec

overlay := {"/s-1": "gvisor"}

test_overlay_routes_the_session if {
	d := exec.decision with input as mk("PERMISSIVE", "LOW", false) with data.sandgate.overlay.executors as overlay
	d.action == "allow"
	d.executor == "gvisor"
}

test_overlay_is_for_its_session_only if {
	d := exec.decision with input as json.patch(mk("PERMISSIVE", "LOW", false), [{"op": "replace", "path": "/request/session_id", "value": "s-2"}])
		with data.sandgate.overlay.executors as overlay
	d.executor == "subprocess"
}

test_overlay_keeps_the_decision if {
	d := exec.decision with input as mk("PERMISSIVE", "HIGH", false) with data.sandgate.overlay.executors as overlay
	d.action == "require_approval"
	d.executor == "gvisor"
}

test_overlay_never_leaves_the_isolation_upgrade if {
	d := exec.decision with input as mk("STRICT", "HIGH", false) with data.sandgate.overlay.executors as {"/s-1": "subprocess"}
	d.executor == "gvisor"
}

test_overlay_never_moves_a_kernel if {
	inp := json.patch(mk("PERMISSIVE", "LOW", false), [{"op": "add", "path": "/request/stateful", "value": true}])
	d := exec.decision with input as inp with data.sandgate.overlay.executors as overlay
	d.executor == "docker"
}

test_overlay_executor_must_be_available if {
	inp := with_executor(mk("PERMISSIVE", "LOW", false), "docker", {"available": false, "reason": "down"})
	d := exec.decision with input as inp with data.sandgate.overlay.executors as {"/s-1": "docker"}
	d.action == "deny"
	"executor_unavailable" in codes(d)
}

# An overlay never lowers a run's isolation (config.executor_isolation).

test_overlay_never_weakens_the_mode_table if {
	d := exec.decision with input as mk("PERMISSIVE", "MEDIUM", false) with data.sandgate.overlay.executors as {"/s-1": "subprocess"}
	d.executor == "docker"
}

test_overlay_never_weakens_an_admin_gvisor_row if {
	d := exec.decision with input as mk("PERMISSIVE", "LOW", false)
		with data.sandgate.config.modes.PERMISSIVE.LOW.executor as "gvisor"
		with data.sandgate.overlay.executors as {"/s-1": "docker"}
	d.executor == "gvisor"
}

test_overlay_never_weakens_the_session_sandbox if {
	inp := json.patch(mk("PERMISSIVE", "LOW", false), [{"op": "add", "path": "/request/session_sandbox", "value": true}])
	d := exec.decision with input as with_caps(inp, "gvisor", {})
		with data.sandgate.config.session_sandbox.executor as "gvisor"
		with data.sandgate.overlay.executors as {"/s-1": "subprocess"}
	d.executor == "gvisor"
}

test_overlay_never_weakens_a_detached_run if {
	inp := json.patch(mk("PERMISSIVE", "LOW", false), [{"op": "add", "path": "/request/detached", "value": true}])
	d := exec.decision with input as inp with data.sandgate.overlay.executors as {"/s-1": "subprocess"}
	d.executor == "docker"
}

test_overlay_never_applies_to_critical if {
	d := exec.decision with input as mk("PERMISSIVE", "CRITICAL", false) with data.sandgate.overlay.executors as {"/s-1": "subprocess"}
	d.action == "require_approval"
	d.executor == "docker"
	d2 := exec.decision with input as mk("PERMISSIVE", "CRITICAL", false) with data.sandgate.overlay.executors as overlay
	d2.executor == "docker"
}

test_overlay_of_equal_isolation_applies if {
	d := exec.decision with input as mk("PERMISSIVE", "MEDIUM", false) with data.sandgate.overlay.executors as {"/s-1": "kubernetes"}
	d.executor == "kubernetes"
}

test_overlay_of_an_unranked_executor_never_applies if {
	d := exec.decision with input as mk("PERMISSIVE", "LOW", false) with data.sandgate.overlay.executors as {"/s-1": "mystery"}
	d.executor == "subprocess"
}
