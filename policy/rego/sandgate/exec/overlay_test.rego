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
