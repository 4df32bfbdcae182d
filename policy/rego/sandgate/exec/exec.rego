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

# Without config.enforcement (the default) the chain reads deny_reasons
# and approval_reasons directly: the modes' bookkeeping costs about a tenth
# of a decision, and a policy that sets no modes does not pay for it.
decision := _moded_decision if {
	config.enforcement
} else := _document("deny", deny_reasons) if {
	count(deny_reasons) > 0
} else := _document("require_approval", approval_reasons | route_reasons) if {
	count(approval_reasons) > 0
} else := _document("allow", route_reasons)

_moded_decision := _decision("deny", enforced_deny) if {
	count(enforced_deny) > 0
} else := _decision("require_approval", enforced_approval | route_reasons) if {
	count(enforced_approval) > 0
} else := _decision("allow", route_reasons)

# The decision document; relaxed reasons (dryrun, warn) are listed beside
# the enforced ones, and would_be names the action they would have led to
# when it differs. Without relaxed reasons it is the document it always
# was.
_decision(action, reasons) := object.union(_document(action, reasons | relaxed_reasons), {"would_be": would_be}) if {
	count(relaxed_reasons) > 0
	would_be != action
} else := _document(action, reasons | relaxed_reasons) if {
	count(relaxed_reasons) > 0
} else := _document(action, reasons)

_document(action, reasons) := {
	"action": action,
	"executor": chosen_executor,
	"reasons": sort(reasons),
	"obligations": obligations,
}

# Enforcement modes, on the model of Gatekeeper's enforcementAction. A
# reason is "enforce" (the default), "dryrun" (it does not decide; the
# decision records what it would have been) or "warn" (likewise, and the
# agent is told). data.sandgate.config.enforcement.rules[code] sets a
# mode per reason code, .tenants[tenant] per tenant; when both apply, the
# stricter wins, and a mode this policy does not know is enforce. Reasons
# about the executor itself are always enforced: no run can go to an
# executor that is missing or cannot hold it (executor.fallback only
# informs).
always_enforced := {"executor_unavailable", "executor.capability_missing", "executor.fallback", "mode.unknown", "risk.unknown_level"}

mode_rank := {"dryrun": 0, "warn": 1, "enforce": 2}

enforcement(code) := "enforce" if {
	code in always_enforced
} else := mode if {
	modes := {m | m := config.enforcement.rules[code]} | {m |
		m := config.enforcement.tenants[object.get(input.principal, "tenant", "")]
	}
	some mode in modes
	every other in modes {
		mode_rank[mode] >= mode_rank[other]
	}
} else := "enforce"

enforced_deny := {r | some r in deny_reasons; not r.enforcement}

enforced_approval := {r | some r in approval_reasons; not r.enforcement}

default relaxed_reasons := set()

relaxed_reasons := {r | some r in (deny_reasons | approval_reasons); r.enforcement} if config.enforcement

would_be := "deny" if {
	count(deny_reasons) > 0
} else := "require_approval" if {
	count(approval_reasons) > 0
} else := "allow"

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
# stateful executor for a cell of the session's kernel, the isolation
# upgrade's (gVisor) when its level is at or above the upgrade's
# min_level in a mode the upgrade lists, else the mode table's.
#
# A kernel's state cannot move between executors, so every cell of a
# session goes to one executor, config.stateful.executor, whatever the
# cell's level: the level still decides allow, approval or deny, and the
# executor must have the kernels capability (required_capabilities).
# Setting it to "gvisor" (whose containers host kernels like docker's)
# puts every cell under gVisor.
#
# A detached run (one that outlives its request, E2B's processes) goes to
# config.detached.executor below the isolation upgrade: the upgrade's
# executor keeps a HIGH run, which then gets a loopback of its own (a
# gVisor sandbox has its own network stack), and an executor that cannot
# hold a detached run is refused by the manager (capability_missing).
#
# A run of a session whose front end expects one sandbox for the
# session's life (request.session_sandbox: E2B's sandboxes, whose
# processes, /tmp and installed packages persist) goes to
# config.session_sandbox.executor below the isolation upgrade, detached
# or not, so that every command of the session lands in the same
# sandbox; that executor must have the session_sandbox capability
# (required_capabilities). A run the upgrade takes (HIGH in STRICT) keeps
# the upgrade's executor and its session sandbox there, which shares the
# workspace but not /tmp or processes with the other one: setting
# session_sandbox.executor to the upgrade's executor ("gvisor") keeps
# every command in one sandbox.
preferred_executor := "aio" if {
	needs_aio
} else := _kernel_executor if {
	input.request.stateful
} else := config.isolation_upgrade.executor if {
	upgraded
} else := session_executor if {
	overlay_applies # an accepted executor proposal (overlay.rego)
} else := base_executor

# A kernel's executor: gVisor's for a session that keeps its memory
# (_memory_kernel), else config.stateful's.
_kernel_executor := config.snapshot_memory.executor if {
	_memory_kernel
} else := config.stateful.executor

# base_executor is the executor a run gets below the AIO sandbox, a
# kernel's executor and the isolation upgrade: the session sandbox's, the
# detached default, else the mode table's. An executor overlay replaces
# it only where it isolates at least as much (overlay.rego).
base_executor := config.session_sandbox.executor if {
	input.request.session_sandbox
	not input.request.stateful
} else := config.detached.executor if {
	input.request.detached
} else := row.executor

level_rank := {"SAFE": 0, "LOW": 1, "MEDIUM": 2, "HIGH": 3, "CRITICAL": 4}

# OPA pays per reference into the data, so the upgrade's settings are
# read once; this is on every decision's path, as are the single reads
# of config.limits and the inline _memory_kernel test below.
upgraded if {
	u := config.isolation_upgrade
	input.mode in u.modes
	level_rank[level] >= level_rank[u.min_level]
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
	"network": run_network,
	"timeout_s": min([input.request.timeout_s, limits.max_timeout_s]),
	"memory_mb": object.get(limits.memory_mb, chosen_executor, limits.default_memory_mb),
	"max_procs": object.get(limits.max_procs, chosen_executor, limits.default_max_procs),
} if {
	limits := config.limits
}

# reason carries its enforcement mode only when it is not "enforce", so a
# policy without modes produces the decision documents it always did.
reason(code, message) := {"code": code, "message": message, "enforcement": mode} if {
	config.enforcement
	mode := enforcement(code)
	mode != "enforce"
} else := {"code": code, "message": message}

# A run gets network (through the egress proxy only, DESIGN.md §9) when its
# mode is in config.egress.network_modes, or when an egress rule other
# than a deny is scoped to its session ("tenant/session") or its tenant:
# an administrator who allows PyPI for a session means that session's runs
# should reach it. Rules scoped to nobody (the PERMISSIVE presets) grant
# nothing by themselves.
default network_granted := false

# A stateful cell never gets network: a kernel outlives its cells, and the
# executors' egress bridge is set up per run (DESIGN.md §9, §11). Its cells
# run without network even where the session's other runs get it.
default run_network := false

run_network := network_granted if not input.request.stateful

network_granted if {
	n := _network[input.mode]
	n.any # most modes grant nobody: this one lookup decides
	true in [n.all, concat("/", [input.principal.tenant, input.request.session_id]) in n.sessions, input.principal.tenant in n.tenants]
}

# network_scopes says, per mode of config.modes, whom the data grants
# network ("any": anyone at all): every run ("all": the mode is in
# config.egress.network_modes),
# and the sessions ("tenant/session") and tenants that an egress rule
# other than a deny, applying in that mode (a rule without modes applies
# in every mode), is scoped to. It depends on the data alone, and
# walking the rules is a good part of a decision, so the gateway
# evaluates it once per policy, data and overlay revision and puts it at
# data.sandgate.derived.network, a path reserved for it (as
# derived.egress is); where that is absent (opa test, another tool
# evaluating this package) it is computed here, with the same result.
network_scopes[mode] := {"any": true in [everyone, count(sessions) > 0, count(tenants) > 0], "all": everyone, "sessions": sessions, "tenants": tenants} if {
	some mode, _ in config.modes
	everyone := mode in object.get(config.egress, "network_modes", [])
	sessions := {s | some rule in _granting(mode); some s in object.get(rule, "sessions", [])}
	tenants := {t | some rule in _granting(mode); some t in object.get(rule, "tenants", [])}
}

_network := d if {
	d := data.sandgate.derived.network
} else := network_scopes

_granting(mode) := [rule |
	some rule in config.egress.rules
	rule.action != "deny"
	_applies_in(object.get(rule, "modes", []), mode)
]

_applies_in(modes, _) if count(modes) == 0

_applies_in(modes, mode) if mode in modes

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
# required_capabilities lists them for administrators' queries (`policy
# check`) and tests; the decision itself asks _requires.
required_capabilities contains name if {
	some name in _builtin_capabilities
	_requires(name)
}

required_capabilities contains name if some name in config.required_capabilities

_builtin_capabilities := ["network_isolation", "network_grant", "kill_detached", "memory_limit", "process_limit", "kernels", "session_sandbox"]

_requires("network_isolation") if not obligations.network

_requires("network_grant") if obligations.network

_requires("kill_detached") if obligations.timeout_s > 0

_requires("memory_limit") if obligations.memory_mb > 0

_requires("process_limit") if obligations.max_procs > 0

_requires("kernels") if input.request.stateful

# A session created with "snapshot": "memory" (issue 30) keeps its
# kernel where a pause keeps memory: its stateful cells go to
# config.snapshot_memory.executor (gVisor), and an executor that does not
# report snapshot "memory" is a deny naming it, never a kernel whose
# memory a pause would lose.
_memory_kernel if {
	input.request.context.needs_memory_snapshot
	input.request.stateful
}

deny_reasons contains reason("executor.capability_missing", msg) if {
	input.request.stateful # _memory_kernel, tested inline: most runs stop here
	input.request.context.needs_memory_snapshot
	state := input.executors[executor]
	state.available
	object.get(state.capabilities, "snapshot", "none") != "memory"
	msg := sprintf("%s cannot keep a session's memory (snapshot: memory)", [executor])
}

_requires("session_sandbox") if {
	input.request.session_sandbox
	not input.request.stateful
}

# A run is never routed to an executor that cannot enforce its
# obligations: it is denied, naming what is missing, rather than sent to
# fail there (executor_unavailable would make the client retry forever).
#
# The check asks whether the run needs each capability the executor lacks
# (reported false, or not reported at all), rather than building
# required_capabilities and testing each member: an executor lacks one or
# two, and this is on every decision's path.
deny_reasons contains _capability_reason(state, name) if {
	state := input.executors[executor]
	state.available
	not _holds_plain(state)
	some name in _builtin_capabilities
	not state.capabilities[name]
	_requires(name)
}

# _holds_plain: the run needs no more than a plain run does (no network,
# no kernel, no session sandbox: network isolation and the timeout, memory
# and process limits at most), and the executor reports all four, so no
# capability of _builtin_capabilities can be missing. Most decisions stop
# at this one test instead of walking the list.
_holds_plain(state) if {
	object.subset(state.capabilities, {"network_isolation": true, "kill_detached": true, "memory_limit": true, "process_limit": true})
	not obligations.network
	not input.request.stateful
	not input.request.session_sandbox
}

deny_reasons contains _capability_reason(state, name) if {
	state := input.executors[executor]
	state.available
	some name in config.required_capabilities
	not state.capabilities[name]
}

_capability_reason(state, name) := reason("executor.capability_missing", msg) if {
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
	"session_sandbox": "one sandbox for the session's life",
}

isolation_note(state) := sprintf(" (%s mode)", [state.capabilities.isolation]) if {
	state.capabilities.isolation != ""
} else := ""

# A kernel is IPython: stateful runs are python only.
deny_reasons contains reason("stateful.language", msg) if {
	input.request.stateful
	input.request.language != "python"
	msg := sprintf("stateful runs are python only, not %q", [input.request.language])
}

approval_reasons contains reason(sprintf("risk.%s", [lower(level)]), msg) if {
	row.action == "require_approval"
	msg := sprintf("risk level %s requires human approval in %s mode", [level, input.mode])
}
