# METADATA
# title: sandgate execution decision
# description: |
#   Decides what happens to one run_code or execute request. The single
#   output is `decision`; precedence is an else chain over the partial sets
#   deny_reasons and approval_reasons, so rules added in other files of this
#   package never conflict at run time. Thresholds live in
#   data.sandgate.config (config/data.json).
# scope: package
# schemas:
#   - input: schema.exec_input
package sandgate.exec

import data.sandgate.config

default decision := {
	"action": "deny",
	"executor": "none",
	"reasons": [{"code": "policy.default", "message": "no rule produced a decision"}],
	"obligations": {"network": false, "timeout_s": 0, "memory_mb": 0, "max_procs": 0},
}

decision := _decision("deny", deny_reasons) if {
	count(deny_reasons) > 0
} else := _decision("require_approval", approval_reasons | route_reasons) if {
	count(approval_reasons) > 0
} else := _decision("allow", route_reasons)

_decision(action, reasons) := {
	"action": action,
	"executor": chosen_executor,
	"reasons": sort(reasons),
	"obligations": obligations,
}

# SAFE counts only with the allowlist proof; anything else claiming SAFE is
# treated as LOW (hints may only escalate).
level := "LOW" if {
	input.risk.level == "SAFE"
	not input.risk.proven_safe
} else := input.risk.level

row := config.modes[input.mode][level]

needs_aio if input.request.context.needs_browser

needs_aio if input.request.context.needs_persistent_fs

# The executor the run should get: the AIO sandbox when it needs one, the
# isolation upgrade's (gVisor) when its level is at or above the upgrade's
# min_level in a mode the upgrade lists, else the mode table's.
preferred_executor := "aio" if {
	needs_aio
} else := config.isolation_upgrade.executor if {
	upgraded
} else := row.executor

level_rank := {"SAFE": 0, "LOW": 1, "MEDIUM": 2, "HIGH": 3, "CRITICAL": 4}

upgraded if {
	input.mode in config.isolation_upgrade.modes
	level_rank[level] >= level_rank[config.isolation_upgrade.min_level]
}

# When the upgrade's executor is not available the run goes to the
# upgrade's fallback, if it names one and that one is available, and the
# decision says so in its reasons (route_reasons): never silently. Without
# a fallback (or with it unavailable too) the run is denied
# executor_unavailable, naming the preferred executor.
executor := fallback if {
	preferred_executor == config.isolation_upgrade.executor
	not executor_available(preferred_executor)
	fallback := object.get(config.isolation_upgrade, "fallback", "")
	fallback != ""
	executor_available(fallback)
} else := preferred_executor

route_reasons contains reason("executor.fallback", msg) if {
	executor != preferred_executor
	msg := sprintf("executor %q is not available; the run goes to %q instead", [preferred_executor, executor])
}

# An executor that is not wired is absent from input.executors: it is as
# unavailable as one whose probe failed.
executor_available(kind) if input.executors[kind].available

default chosen_executor := "none"

chosen_executor := executor

obligations := {
	"network": network_granted,
	"timeout_s": min([input.request.timeout_s, config.limits.max_timeout_s]),
	"memory_mb": object.get(config.limits.memory_mb, chosen_executor, config.limits.default_memory_mb),
	"max_procs": object.get(config.limits.max_procs, chosen_executor, config.limits.default_max_procs),
}

reason(code, message) := {"code": code, "message": message}

# A run gets network (through the egress proxy only, DESIGN.md §9) when its
# mode is in config.egress.network_modes, or when an egress rule other
# than a deny is scoped to its session ("tenant/session") or its tenant:
# an administrator who allows PyPI for a session means that session's runs
# should reach it. Rules scoped to nobody (the PERMISSIVE presets) grant
# nothing by themselves.
default network_granted := false

network_granted if input.mode in object.get(config.egress, "network_modes", [])

network_granted if {
	some rule in config.egress.rules
	rule.action != "deny"
	_rule_in_mode(rule)
	sprintf("%s/%s", [input.principal.tenant, input.request.session_id]) in object.get(rule, "sessions", [])
}

network_granted if {
	some rule in config.egress.rules
	rule.action != "deny"
	_rule_in_mode(rule)
	input.principal.tenant in object.get(rule, "tenants", [])
}

_rule_in_mode(rule) if count(object.get(rule, "modes", [])) == 0

_rule_in_mode(rule) if input.mode in object.get(rule, "modes", [])

deny_reasons contains reason("mode.unknown", sprintf("unknown security mode %q", [input.mode])) if {
	not config.modes[input.mode]
}

deny_reasons contains reason("risk.unknown_level", sprintf("unknown risk level %q", [level])) if {
	config.modes[input.mode]
	not row
}

deny_reasons contains reason(sprintf("risk.%s", [lower(level)]), msg) if {
	row.action == "deny"
	msg := sprintf("risk level %s is denied in %s mode", [level, input.mode])
}

deny_reasons contains reason("language.not_allowed", sprintf("language %q is not allowed", [input.request.language])) if {
	not input.request.language in config.languages
}

deny_reasons contains reason("executor_unavailable", unavailable_message) if {
	not executor_available(executor)
}

unavailable_message := sprintf("executor %q is not available: %s", [executor, input.executors[executor].reason]) if {
	input.executors[executor].reason != ""
} else := sprintf("executor %q is not available", [executor])

# The capabilities the run's obligations need from the executor (the Go
# side applies the same rule: executors.Required). The timeout must reach
# processes that left the run's process group, hence kill_detached.
# Administrators can require more for every run in
# config.required_capabilities (filesystem_isolation, say).
required_capabilities contains "network_isolation" if not obligations.network

required_capabilities contains "network_grant" if obligations.network

required_capabilities contains "kill_detached" if obligations.timeout_s > 0

required_capabilities contains "memory_limit" if obligations.memory_mb > 0

required_capabilities contains "process_limit" if obligations.max_procs > 0

required_capabilities contains name if some name in config.required_capabilities

# A run is never routed to an executor that cannot enforce its
# obligations: it is denied, naming what is missing, rather than sent to
# fail there (executor_unavailable would make the client retry forever).
deny_reasons contains reason("executor.capability_missing", msg) if {
	state := input.executors[executor]
	state.available
	some name in required_capabilities
	not state.capabilities[name]
	msg := sprintf("%s cannot enforce %s%s", [executor, object.get(capability_text, name, name), isolation_note(state)])
}

capability_text := {
	"network_isolation": "network isolation",
	"network_grant": "network access through the egress proxy",
	"memory_limit": "the memory limit",
	"process_limit": "the process limit",
	"kill_detached": "the timeout on detached processes",
	"filesystem_isolation": "filesystem isolation",
	"kernels": "stateful kernels",
}

isolation_note(state) := sprintf(" (%s mode)", [state.capabilities.isolation]) if {
	state.capabilities.isolation != ""
} else := ""

approval_reasons contains reason(sprintf("risk.%s", [lower(level)]), msg) if {
	row.action == "require_approval"
	msg := sprintf("risk level %s requires human approval in %s mode", [level, input.mode])
}
