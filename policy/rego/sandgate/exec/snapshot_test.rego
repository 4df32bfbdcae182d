package sandgate.exec_test

import data.sandgate.exec

# Sessions created with "snapshot": "memory" (issue 30): their stateful
# cells go to config.snapshot_memory.executor (gVisor), whatever
# config.stateful says, and an executor that does not keep memory is a
# deny naming the capability.

memory_cell(mode, level) := json.patch(stateful(mode, level, false), [
	{"op": "add", "path": "/request/context/needs_memory_snapshot", "value": true},
	{"op": "add", "path": "/executors", "value": kernel_executors},
])

memory_caps := object.union(kernel_caps, {"snapshot": "memory"})

test_memory_session_cells_go_to_gvisor if {
	inp := with_executor(memory_cell("STRICT", "LOW"), "gvisor", {"available": true, "capabilities": memory_caps})
	d := exec.decision with input as inp
	d.action == "allow"
	d.executor == "gvisor"
}

test_other_sessions_cells_stay_on_the_stateful_executor if {
	inp := json.patch(memory_cell("STRICT", "LOW"), [{"op": "replace", "path": "/request/context/needs_memory_snapshot", "value": false}])
	d := exec.decision with input as with_executor(inp, "gvisor", {"available": true, "capabilities": memory_caps})
	d.executor == "docker"
}

test_memory_session_on_an_executor_without_memory_is_denied if {
	d := exec.decision with input as memory_cell("STRICT", "LOW")
	d.action == "deny"
	d.executor == "gvisor"
	d.reasons == [{"code": "executor.capability_missing", "message": "gvisor cannot keep a session's memory (snapshot: memory)"}]
}

test_memory_session_one_shot_runs_route_as_usual if {
	inp := json.patch(memory_cell("STRICT", "LOW"), [{"op": "replace", "path": "/request/stateful", "value": false}])
	d := exec.decision with input as inp
	d.executor == "docker"
	not "executor.capability_missing" in codes(d)
}
