package sandgate.exec

# session_executor is the executor an accepted executor proposal lets
# this session's runs use in place of the mode table's (and the detached
# default): data.sandgate.overlay.executors["tenant/session"], which the
# gateway writes beside the loaded data (policy.Engine.SetExecutorOverlay),
# never into it. exec.rego reads it below the AIO sandbox, a kernel's
# executor and the isolation upgrade: an overlay never moves a stateful
# cell or takes a run out of the upgrade's sandbox. The run is still
# decided as before (allow, approval, deny), and the executor must still
# be available and able to hold it.
session_executor := data.sandgate.overlay.executors[concat("/", [object.get(input.principal, "tenant", ""), input.request.session_id])]
