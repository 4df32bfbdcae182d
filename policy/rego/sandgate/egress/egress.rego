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
# scope: package
# schemas:
#   - input: schema.egress_input
package sandgate.egress

import data.sandgate.config

default decision := {"action": "deny", "rule": "policy.default", "reasons": [{"code": "policy.default", "message": "no rule produced a decision"}]}

decision := {"action": "deny", "rule": first_deny_rule, "reasons": sort(deny_reasons)} if {
	count(deny_reasons) > 0
} else := {"action": "allow", "rule": allow_rule, "reasons": []} if {
	allow_rule
} else := {"action": "require_approval", "rule": approval_rule, "reasons": [reason("egress.approval", sprintf("%s:%d is not on an allow-list", [input.host, input.port]))]} if {
	approval_rule
} else := {"action": default_action, "rule": "default", "reasons": default_reasons}

reason(code, message) := {"code": code, "message": message}

session_key := sprintf("%s/%s", [input.tenant, input.session_id])

# hosts(rule) is every host pattern of a rule, its presets expanded.
rule_hosts(rule) := {h | some h in object.get(rule, "hosts", [])} | {h |
	some p in object.get(rule, "presets", [])
	some h in config.egress.presets[p]
}

# "*" alone matches every host; elsewhere "*" matches one label
# ("*.github.com" is not github.com) and "**" any number.
host_matches(rule) if "*" in rule_hosts(rule)

host_matches(rule) if {
	some pattern in rule_hosts(rule)
	glob.match(lower(pattern), ["."], lower(input.host))
}

# A rule without ports covers the configured ports (80 and 443 by default).
port_matches(rule) if input.port in object.get(rule, "ports", config.egress.ports)

scoped(rule, field, _) if count(object.get(rule, field, [])) == 0

scoped(rule, field, value) if value in object.get(rule, field, [])

applies(rule) if {
	host_matches(rule)
	port_matches(rule)
	scoped(rule, "modes", input.mode)
	scoped(rule, "tenants", input.tenant)
	scoped(rule, "sessions", session_key)
}

matching(action) := [rule.name | some rule in config.egress.rules; rule.action == action; applies(rule)]

deny_rules := matching("deny")

allow_rules := [rule | some rule in config.egress.rules; rule.action == "allow"; applies(rule)]

allow_rule := allow_rules[0].name if count(allow_rules) > 0

approval_rule := matching("require_approval")[0] if count(matching("require_approval")) > 0

first_deny_rule := deny_rules[0] if {
	count(deny_rules) > 0
} else := "egress.blocked_address" if {
	some ip in blocked_ips
	not exempt(ip)
} else := "egress.unresolved" if {
	count(input.resolved) == 0
} else := "egress.scheme"

deny_reasons contains reason("egress.denied", sprintf("%s:%d is denied by rule %q", [input.host, input.port, name])) if {
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
blocked_ips contains ip if {
	some ip in input.resolved
	some cidr in config.egress.blocked_cidrs
	net.cidr_contains(cidr, ip)
}

blocked_ips contains ip if {
	some ip in input.resolved
	ip in input.gateway_addresses
}

# An allow (or require_approval) rule that names the host exactly (no
# glob, no preset) and a range containing the address exempts it: an
# administrator who wrote {"hosts": ["db.internal"], "cidrs":
# ["10.1.2.0/24"]} meant it. A deny rule never exempts anything.
naming_rules := [rule | some rule in config.egress.rules; rule.action in {"allow", "require_approval"}; applies(rule)]

exempt(ip) if {
	some rule in naming_rules
	lower(input.host) in {lower(h) | some h in object.get(rule, "hosts", [])}
	some cidr in object.get(rule, "cidrs", [])
	net.cidr_contains(cidr, ip)
}

deny_reasons contains reason("egress.blocked_address", sprintf("%s resolves to %s, a blocked address", [input.host, ip])) if {
	some ip in blocked_ips
	not exempt(ip)
}

default default_action := "deny"

default_action := a if {
	a := config.egress.default_action[input.mode]
	a in {"deny", "require_approval"}
}

default_reasons := [reason("egress.not_allowed", sprintf("%s:%d is not on an allow-list", [input.host, input.port]))] if {
	default_action == "deny"
} else := [reason("egress.approval", sprintf("%s:%d is not on an allow-list", [input.host, input.port]))]
