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

decision := {"action": "deny", "rule": first_deny_rule, "reasons": sort(deny_reasons)} if {
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

# rules are the configured rules with request presets expanded, in order.
rules := [r | some rule in config.egress.rules; some r in expand(rule)]

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

# conn_applies: the rule covers this connection (host, port, scope).
conn_applies(rule) if {
	host_matches(rule)
	port_matches(rule)
	scoped(rule, "modes", input.mode)
	scoped(rule, "tenants", input.tenant)
	scoped(rule, "sessions", session_key)
}

http_matchers := ["methods", "paths", "path_prefixes", "query"]

http_rule(rule) if {
	some f in http_matchers
	count(object.get(rule, f, [])) > 0
}

# request_matches: the request meets every matcher the rule has.
request_matches(rule) if {
	method_matches(rule)
	path_matches(rule)
	query_matches(rule)
}

method_matches(rule) if count(object.get(rule, "methods", [])) == 0

method_matches(rule) if upper(input.http.method) in {upper(m) | some m in rule.methods}

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

# effective(rule) is the action a rule that covers the connection takes
# here: on a request that it matches, its own; on a connection, a plain
# rule's own, and an HTTP rule's allow or require_approval lets the
# connection through (its requests are decided one by one). Undefined
# otherwise: an HTTP deny rule waits for the requests. A rule with
# "connection_only": true (an accepted proposal's overlay) decides
# connections only: on an inspected host the requests stay with its HTTP
# rules, which the proposal did not show the approver.
effective(rule) := rule.action if {
	input.http
	not rule.connection_only
	request_matches(rule)
}

effective(rule) := rule.action if {
	not input.http
	not http_rule(rule)
}

effective(rule) := "allow" if {
	not input.http
	http_rule(rule)
	rule.action in {"allow", "require_approval"}
}

matching(action) := [rule.name | some rule in rules; conn_applies(rule); effective(rule) == action]

deny_rules := matching("deny")

allow_rule := matching("allow")[0] if count(matching("allow")) > 0

approval_rule := matching("require_approval")[0] if count(matching("require_approval")) > 0

# inspect: an HTTP rule (or one with "inspect": true) covers the
# connection, so its requests are decided one by one (said of a
# connection only).
default inspect := false

inspect if {
	not input.http
	some rule in rules
	conn_applies(rule)
	http_rule(rule)
}

inspect if {
	not input.http
	some rule in rules
	conn_applies(rule)
	rule.inspect == true
}

# governing_rule names the HTTP rules that govern the host of a request
# no rule matched: the first one's group (the rule that named a preset)
# or name.
governing := [object.get(rule, "group", rule.name) | some rule in rules; conn_applies(rule); http_rule(rule)]

governing_rule := governing[0] if {
	input.http
	count(governing) > 0
}

first_deny_rule := deny_rules[0] if {
	count(deny_rules) > 0
} else := "egress.blocked_address" if {
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
naming_rules := [rule | some rule in rules; rule.action in {"allow", "require_approval"}; conn_applies(rule)]

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
