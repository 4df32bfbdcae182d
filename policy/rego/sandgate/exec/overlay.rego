package sandgate.exec

import data.sandgate.config

# session_executor is the executor an accepted executor proposal lets
# this session's runs use in place of the mode table's (and the detached
# default): data.sandgate.overlay.executors["tenant/session"], which the
# gateway writes beside the loaded data (policy.Engine.SetExecutorOverlay),
# never into it. exec.rego reads it below the AIO sandbox, a kernel's
# executor and the isolation upgrade: an overlay never moves a stateful
# cell or takes a run out of the upgrade's sandbox. The run is still
# decided as before (allow, approval, deny), and the executor must still
# be available and able to hold it.
#
# An overlay only ever keeps or raises a run's isolation: it applies when
# its executor ranks at least as high in config.executor_isolation (the
# one ranking, in the data config) as the executor it replaces, and
# never to a CRITICAL run, which keeps what the admin configured. An
# executor the ranking does not list never applies (fail closed).
session_executor := data.sandgate.overlay.executors[concat("/", [object.get(input.principal, "tenant", ""), input.request.session_id])]

# overlay_applies is tested first for any overlay at all, then for this
# session's: without one (every gateway before its first accepted
# proposal) it fails at its first expression, a single read of the data,
# and the default decision pays nothing more.
overlay_applies if {
	data.sandgate.overlay.executors
	session_executor
	level != "CRITICAL"
	config.executor_isolation[session_executor] >= config.executor_isolation[base_executor]
}
