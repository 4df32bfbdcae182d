# METADATA
# title: sandgate egress connection decision
# description: |
#   Decides every connection a run granted network opens through the
#   gateway's egress proxy (DESIGN.md §9): CONNECT host:port or a plain
#   HTTP request. The output names the action and the rule that decided.
#
#   Rules live in data.sandgate.config.egress.rules; each has a name, an
#   action (allow, deny, require_approval), the hosts it matches (exact
#   names or globs such as "*.github.com", and presets by name), optional
#   ports, modes, tenants and sessions ("tenant/session") it is limited to,
#   and, for allow rules only, the cidrs a named host may resolve into
#   even though they are loopback or private. Precedence: a matching deny
#   rule wins, then an allow rule, then require_approval, then the mode's
#   default (config.egress.default_action). Independent of the rules, a
#   host that resolves into a blocked range (loopback, private, CGNAT,
#   link-local, metadata, the gateway's own addresses) is denied unless
#   an allow or require_approval rule that matched names that range; a port outside
#   config.egress.ports likewise needs a rule that names it.
#
#   Requests (issue 33): a rule may also name methods, paths (globs, "/"
#   the separator, "**" any number of segments), path_prefixes and query
#   (parameter: value). Such an HTTP rule marks its host for inspection:
#   the connection decision says inspect, the proxy terminates TLS and
#   asks again for every request, with input.http. On the connection an
#   HTTP allow or require_approval rule lets it through and an HTTP deny
#   rule waits for the requests; on a request every rule applies whose
#   matchers it meets, with the same precedence. A request that no rule
#   matches, on a host HTTP rules govern, is denied by those rules (the
#   mode's default is for hosts no rule names). A rule with
#   request_preset is expanded into the preset's rules
#   (config.egress.request_presets), named "<rule>/<preset rule>", each
#   keeping the rule's hosts (when it names any), ports, modes, tenants,
#   sessions and cidrs.
# scope: package
# schemas:
#   - input: schema.egress_input
package sandgate.egress

import data.sandgate.config

default decision := {"action": "deny", "rule": "policy.default", "reasons": [{"code": "policy.default", "message": "no rule produced a decision"}]}

# Enforcement modes (the last section) apply only where one is set: without
# config.enforcement or a rule's own, the decision is enforced_decision.
decision := moded_decision if {
	modes_on
} else := enforced_decision

# enforced_decision is the decision with every reason enforced.
enforced_decision := {"action": "deny", "rule": first_deny_rule, "reasons": sort(deny_reasons)} if {
	count(deny_reasons) > 0
} else := {"action": "allow", "rule": allow_rule, "reasons": [], "inspect": inspect} if {
	allow_rule
} else := {"action": "require_approval", "rule": approval_rule, "reasons": [reason("egress.approval", sprintf("%s is not on an allow-list", [subject]))], "inspect": inspect} if {
	approval_rule
} else := {"action": "deny", "rule": governing_rule, "reasons": [reason("egress.request_not_allowed", sprintf("%s is not allowed by rule %q", [subject, governing_rule]))]} if {
	governing_rule
} else := {"action": default_action, "rule": "default", "reasons": default_reasons}

# subject is what is decided, as messages name it: host:port, or the
# request's method, host:port and path (never its query).
default subject := ""

subject := sprintf("%s %s:%d%s", [input.http.method, input.host, input.port, input.http.path]) if input.http

subject := sprintf("%s:%d", [input.host, input.port]) if not input.http

reason(code, message) := {"code": code, "message": message}

session_key := sprintf("%s/%s", [input.tenant, input.session_id])

# Compiled rules (issue 32, speed). A decision matches the connection
# against `compiled`: the configured rules with request presets expanded,
# in order, each with what would otherwise be worked out again for every
# connection and request (compile_rule), and an index of their host
# patterns. The gateway evaluates compiled_egress once per policy and
# data revision (and again when an overlay changes the rules) and puts it
# at data.sandgate.derived.egress, a path reserved for it; where that
# document is absent (opa test, another tool evaluating this package),
# it is computed here, per decision, with the same result.
compiled := d if {
	d := data.sandgate.derived.egress
} else := compiled_egress

# compiled_egress: rules, the compiled rules in order; exact, each exact
# host name (lowercased) to the rules naming it; globs, [rule, pattern]
# pairs; any, the rules for every host ("*").
compiled_egress := {
	"rules": entries,
	"exact": {h: [i | some i, e in entries; h in e.exact] | some e in entries; some h in e.exact},
	"globs": [[i, p] | some i, e in entries; some p in e.globs],
	"any": [i | some i, e in entries; e.any_host],
} if {
	entries := [compile_rule(r) | some rule in config.egress.rules; some r in expand(rule)]
}

# rules are the configured rules with request presets expanded, in order.
rules := [e.rule | some e in compiled.rules]

expand(rule) := [rule] if not rule.request_preset

expand(rule) := [object.union(preset_base(rule, sub), object.union(scope_of(rule), {"name": sprintf("%s/%s", [rule.name, sub.name]), "group": rule.name})) |
	some sub in object.get(config.egress, ["request_presets", rule.request_preset], [])
] if rule.request_preset

# A rule that names hosts (or host presets) replaces the preset's.
preset_base(rule, sub) := object.remove(sub, ["hosts", "presets"]) if {
	count(object.get(rule, "hosts", [])) + count(object.get(rule, "presets", [])) > 0
} else := sub

scope_of(rule) := object.remove(rule, ["name", "action", "request_preset", "methods", "paths", "path_prefixes", "query"])

# hosts(rule) is every host pattern of a rule, its presets expanded.
rule_hosts(rule) := {h | some h in object.get(rule, "hosts", [])} | {h |
	some p in object.get(rule, "presets", [])
	some h in config.egress.presets[p]
}

# compile_rule(rule) is an expanded rule with: its host patterns
# (lowercased, presets expanded) split into exact names and globs, and
# any_host for "*" alone; its ports (the configured ones when it names
# none); the modes, tenants and sessions it is limited to, present only
# when it is; whether it has HTTP matchers, and what it does to a
# connection (conn_action, see effective); its methods in upper case; and
# the names it exempts blocked addresses for (its own hosts, not its
# presets or the matches of its globs).
compile_rule(rule) := object.union_n([
	{
		"rule": rule,
		"any_host": "*" in hosts,
		"exact": {lower(h) | some h in hosts; not is_glob(h)},
		"globs": [lower(h) | some h in hosts; is_glob(h)],
		"ports": object.get(rule, "ports", config.egress.ports),
		"http": http,
		"methods": {upper(m) | some m in object.get(rule, "methods", [])},
		"named": {lower(h) | some h in object.get(rule, "hosts", [])},
	},
	{f: rule[f] | some f in ["modes", "tenants", "sessions"]; count(object.get(rule, f, [])) > 0},
	{"conn_action": a | some a in [conn_action(rule, http)]},
]) if {
	hosts := rule_hosts(rule)
	http := count([f | some f in http_matchers; count(object.get(rule, f, [])) > 0]) > 0
}

# A pattern without glob syntax matches exactly itself: the index looks it
# up.
is_glob(pattern) if regex.match(`[*?\[\]{}\\]`, pattern)

# conn_action is what a rule does to a connection it covers: a plain
# rule's own action, and an HTTP rule's allow or require_approval lets
# the connection through (its requests are decided one by one).
# Undefined for an HTTP deny rule, which waits for the requests.
conn_action(rule, false) := rule.action

conn_action(rule, true) := "allow" if rule.action in {"allow", "require_approval"}

# "*" alone matches every host; elsewhere "*" matches one label
# ("*.github.com" is not github.com) and "**" any number.
host := lower(input.host)

host_hits contains i if some i in object.get(compiled.exact, host, [])

host_hits contains i if some i in compiled.any

host_hits contains i if {
	some [i, pattern] in compiled.globs
	glob.match(pattern, ["."], host)
}

# covering are the compiled rules that cover this connection (host,
# port, scope), in order: what every part of the decision below looks
# at. A rule without ports covers the configured ports (80 and 443 by
# default); one not limited to modes, tenants or sessions covers all.
covering := [e |
	some i in sort(host_hits)
	e := compiled.rules[i]
	input.port in e.ports
	input.mode in object.get(e, "modes", [input.mode])
	input.tenant in object.get(e, "tenants", [input.tenant])
	session_key in object.get(e, "sessions", [session_key])
]

http_matchers := ["methods", "paths", "path_prefixes", "query"]

# request_matches: the request meets every matcher the compiled rule has.
request_matches(e) if {
	method_matches(e)
	path_matches(e.rule)
	query_matches(e.rule)
}

method_matches(e) if count(e.methods) == 0

method_matches(e) if upper(input.http.method) in e.methods

path_matches(rule) if {
	count(object.get(rule, "paths", [])) + count(object.get(rule, "path_prefixes", [])) == 0
}

path_matches(rule) if {
	some pattern in object.get(rule, "paths", [])
	glob.match(pattern, ["/"], input.http.path)
}

path_matches(rule) if {
	some prefix in object.get(rule, "path_prefixes", [])
	startswith(input.http.path, prefix)
}

query_matches(rule) if count(object.get(rule, "query", {})) == 0

query_matches(rule) if {
	count(rule.query) > 0
	q := urlquery.decode_object(input.http.query)
	every k, v in rule.query {
		v in q[k]
	}
}

# acting are the [name, action, rule] of the covering rules that act
# here: on a request, those whose matchers it meets, with their own
# action; on a connection, each with its conn_action. A rule with
# "connection_only": true (an accepted proposal's overlay) decides
# connections only: on an inspected host the requests stay with its HTTP
# rules, which the proposal did not show the approver.
acting := a if {
	input.http
	a := [[e.rule.name, e.rule.action, e.rule] | some e in covering; not e.rule.connection_only; request_matches(e)]
} else := [[e.rule.name, e.conn_action, e.rule] | some e in covering; e.conn_action]

deny_rules := [name | some [name, a, _] in acting; a == "deny"]

allow_rule := [name | some [name, a, _] in acting; a == "allow"][0]

approval_rule := [name | some [name, a, _] in acting; a == "require_approval"][0]

# inspect: an HTTP rule (or one with "inspect": true) covers the
# connection, so its requests are decided one by one (said of a
# connection only).
default inspect := false

inspect if {
	not input.http
	some e in covering
	e.http
}

inspect if {
	not input.http
	some e in covering
	e.rule.inspect == true
}

# governing_rule names the HTTP rules that govern the host of a request
# no rule matched: the first one's group (the rule that named a preset)
# or name.
governing := [object.get(e.rule, "group", e.rule.name) | some e in covering; e.http]

governing_rule := governing[0] if {
	input.http
	count(governing) > 0
}

first_deny_rule := deny_rules[0] if {
	count(deny_rules) > 0
} else := builtin_deny_rule

# builtin_deny_rule names the first of the refusals no rule can lift.
builtin_deny_rule := "egress.blocked_address" if {
	some ip in blocked_ips
	not exempt(ip)
} else := "egress.unresolved" if {
	count(input.resolved) == 0
} else := "egress.scheme"

deny_reasons contains reason("egress.denied", sprintf("%s is denied by rule %q", [subject, name])) if {
	some name in deny_rules
}

deny_reasons contains reason("egress.scheme", sprintf("scheme %q is not allowed", [input.scheme])) if {
	not input.scheme in {"http", "https"}
}

deny_reasons contains reason("egress.unresolved", sprintf("host %q did not resolve", [input.host])) if {
	count(input.resolved) == 0
}

# Addresses in a blocked range (or the gateway's own) that the host
# resolved to.
blocked_ips contains input.resolved[i] if {
	some [_, i] in net.cidr_contains_matches(config.egress.blocked_cidrs, input.resolved)
}

blocked_ips contains ip if {
	some ip in input.resolved
	ip in input.gateway_addresses
}

# An allow (or require_approval) rule that names the host exactly (no
# glob, no preset) and a range containing the address exempts it: an
# administrator who wrote {"hosts": ["db.internal"], "cidrs":
# ["10.1.2.0/24"]} meant it. A deny rule never exempts anything.
naming_rules := [e | some e in covering; e.rule.action in {"allow", "require_approval"}]

exempt(ip) if {
	some e in naming_rules
	host in e.named
	some cidr in object.get(e.rule, "cidrs", [])
	net.cidr_contains(cidr, ip)
}

deny_reasons contains reason("egress.blocked_address", sprintf("%s resolves to %s, a blocked address", [input.host, ip])) if {
	some ip in blocked_ips
	not exempt(ip)
}

default default_action := "deny"

# (The table is read whole, then indexed: a reference into data with a
# variable part costs several times more.)
default_action := a if {
	a := object.get(config.egress.default_action, input.mode, null)
	a in {"deny", "require_approval"}
}

default_reasons := [reason("egress.not_allowed", sprintf("%s:%d is not on an allow-list", [input.host, input.port]))] if {
	default_action == "deny"
} else := [reason("egress.approval", sprintf("%s:%d is not on an allow-list", [input.host, input.port]))]

# Enforcement modes of egress decisions (issue 32), on the model of
# Gatekeeper's enforcementAction and of the exec policy's modes. A reason
# that would deny or hold a connection or request is "enforce" (the
# default), "dryrun" (it does not decide: the decision records what it
# would have been) or "warn" (likewise, and the agent is told). The mode
# of a reason is the strictest of:
#   - the "enforcement" of the egress rule it comes from (a deny rule, a
#     require_approval rule, or the HTTP rule governing a request no rule
#     matched; a rule that names a request preset passes it to its
#     expanded rules);
#   - data.sandgate.config.enforcement.rules[code], by reason code
#     (egress.denied, egress.approval, egress.request_not_allowed, and
#     egress.not_allowed or egress.approval for the mode's default);
#   - data.sandgate.config.enforcement.tenants[tenant].
# A mode this policy does not know is enforce. The refusals that keep the
# gateway's own network out of reach (egress.blocked_address,
# egress.unresolved, egress.scheme) are always enforced.
#
# A relaxed reason does not decide, and the decision records what it
# would have been: would_be and would_be_rule name the action and rule of
# enforced_decision (every reason enforced) when its action differs, and
# the relaxed reasons are listed with their enforcement.
#   - A relaxed deny rule leaves the decision to the rest of the policy:
#     what an allow rule allows goes through, what the mode's default
#     denies stays denied (a dryrun deny rule for "*" opens nothing).
#   - A relaxed hold (require_approval rule, or a default of
#     require_approval) lets the connection or request through.
#   - A request the HTTP rules governing its host would refuse goes
#     through when they are relaxed (its connection was let through by
#     them).
#   - A relaxed default deny lets it through.
# So a relaxed reason never makes a decision stricter than enforcing it.

# modes_on: some mode may apply here, so the moded chain runs.
modes_on if config.enforcement

modes_on if {
	some e in covering
	e.rule.enforcement
}

mode_rank := {"dryrun": 0, "warn": 1, "enforce": 2}

table_modes(code) := {m | m := config.enforcement.rules[code]} | {m | m := config.enforcement.tenants[input.tenant]}

rule_mode(rule, code) := strictest({m | m := rule.enforcement} | table_modes(code))

strictest(modes) := m if {
	some m in modes
	every other in modes {
		mode_rank[m] >= mode_rank[other]
	}
} else := "enforce"

relaxed(r, mode) := {object.union(r, {"enforcement": mode})} if {
	mode != "enforce"
} else := set()

# The deny rules, approval rules and governing rules with their modes, in
# order.
deny_modes := [[name, rule_mode(rule, "egress.denied")] | some [name, a, rule] in acting; a == "deny"]

approval_modes := [[name, rule_mode(rule, "egress.approval")] | some [name, a, rule] in acting; a == "require_approval"]

governing_modes := [[object.get(e.rule, "group", e.rule.name), rule_mode(e.rule, "egress.request_not_allowed")] |
	input.http
	some e in covering
	e.http
]

default_code := "egress.not_allowed" if default_action == "deny"

else := "egress.approval"

default_mode := strictest(table_modes(default_code))

moded_deny_rules := [name | some [name, mode] in deny_modes; mode == "enforce"]

moded_deny_reasons := {r | some r in deny_reasons; r.code != "egress.denied"} | {reason("egress.denied", sprintf("%s is denied by rule %q", [subject, name])) |
	some name in moded_deny_rules
}

moded_first_deny_rule := moded_deny_rules[0] if {
	count(moded_deny_rules) > 0
} else := builtin_deny_rule

moded_approval_rule := [name | some [name, mode] in approval_modes; mode == "enforce"][0]

moded_governing_rule := [name | some [name, mode] in governing_modes; mode == "enforce"][0]

# moded_base is the decision with the relaxed reasons left out.
moded_base := {"action": "deny", "rule": moded_first_deny_rule, "reasons": moded_deny_reasons} if {
	count(moded_deny_reasons) > 0
} else := {"action": "allow", "rule": allow_rule, "reasons": set(), "inspect": inspect} if {
	allow_rule
} else := {"action": "require_approval", "rule": moded_approval_rule, "reasons": {reason("egress.approval", sprintf("%s is not on an allow-list", [subject]))}, "inspect": inspect} if {
	moded_approval_rule
} else := {"action": "allow", "rule": approval_rule, "reasons": set(), "inspect": inspect} if {
	approval_rule
} else := {"action": "deny", "rule": moded_governing_rule, "reasons": {reason("egress.request_not_allowed", sprintf("%s is not allowed by rule %q", [subject, moded_governing_rule]))}} if {
	moded_governing_rule
} else := {"action": "allow", "rule": governing_rule, "reasons": set()} if {
	governing_rule
} else := {"action": default_action, "rule": "default", "reasons": {r | some r in default_reasons}} if {
	default_mode == "enforce"
} else := {"action": "allow", "rule": enforced_decision.rule, "reasons": set(), "inspect": inspect}

# relaxed_reasons are the reasons of enforced_decision that did not
# decide, each with its mode.
relaxed_reasons := {r | some [name, mode] in deny_modes; some r in relaxed(reason("egress.denied", sprintf("%s is denied by rule %q", [subject, name])), mode)} if {
	count(deny_reasons) > 0
} else := set() if {
	allow_rule
} else := relaxed(reason("egress.approval", sprintf("%s is not on an allow-list", [subject])), approval_modes[0][1]) if {
	approval_rule
} else := relaxed(reason("egress.request_not_allowed", sprintf("%s is not allowed by rule %q", [subject, governing_rule])), governing_modes[0][1]) if {
	governing_rule
} else := relaxed(default_reasons[0], default_mode)

moded_document := object.union(moded_base, {"reasons": sort(moded_base.reasons | relaxed_reasons)})

moded_decision := object.union(moded_document, {"would_be": enforced_decision.action, "would_be_rule": enforced_decision.rule}) if {
	enforced_decision.action != moded_base.action
} else := moded_document
