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
	"obligations": {"network": false, "timeout_s": 0, "memory_mb": 0},
}

decision := _decision("deny", deny_reasons) if {
	count(deny_reasons) > 0
} else := _decision("require_approval", approval_reasons) if {
	count(approval_reasons) > 0
} else := _decision("allow", set())

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

executor := "aio" if {
	needs_aio
} else := row.executor

default chosen_executor := "none"

chosen_executor := executor

obligations := {
	"network": false,
	"timeout_s": min([input.request.timeout_s, config.limits.max_timeout_s]),
	"memory_mb": object.get(config.limits.memory_mb, chosen_executor, config.limits.default_memory_mb),
}

reason(code, message) := {"code": code, "message": message}

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

deny_reasons contains reason("executor_unavailable", sprintf("executor %q is not available", [executor])) if {
	not executor in input.executors.available
}

approval_reasons contains reason(sprintf("risk.%s", [lower(level)]), msg) if {
	row.action == "require_approval"
	msg := sprintf("risk level %s requires human approval in %s mode", [level, input.mode])
}
