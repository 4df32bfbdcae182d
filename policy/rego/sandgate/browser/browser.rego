# METADATA
# title: sandgate browser request decision
# description: |
#   Decides every request a session's browser makes: the typed URL, each
#   redirect hop and every sub-resource. The external backend runs on the
#   gateway host, so it must never reach loopback, private, link-local or
#   metadata addresses (SSRF); the check is on the addresses the gateway
#   resolved and will connect to, so DNS rebinding cannot pass. Hosts in
#   data.sandgate.config.browser.allow_hosts or in the gateway's configured
#   allowlist (input.allow_hosts) are exempt from the address check, never
#   from the scheme check.
# scope: package
# schemas:
#   - input: schema.browser_input
package sandgate.browser

import data.sandgate.config

default decision := {"action": "deny", "reasons": [{"code": "policy.default", "message": "no rule produced a decision"}]}

# Without config.enforcement (the default) every reason is enforced, and
# the chain reads deny_reasons directly: a policy that sets no modes does
# not pay for them on every request a page makes.
decision := _moded_decision if {
	config.enforcement
} else := {"action": "deny", "reasons": sort(deny_reasons)} if {
	count(deny_reasons) > 0
} else := {"action": "allow", "reasons": []}

# A request is denied when an enforced reason denies it. Reasons in
# dryrun or warn mode (see enforcement) do not decide: the request is
# allowed, its reasons are listed and would_be says it would have been
# denied.
_moded_decision := {"action": "deny", "reasons": sort(deny_reasons)} if {
	count(_enforced_deny) > 0
} else := {"action": "allow", "reasons": sort(deny_reasons), "would_be": "deny"} if {
	count(deny_reasons) > 0
} else := {"action": "allow", "reasons": []}

_enforced_deny := {r | some r in deny_reasons; not r.enforcement}

# reason carries its enforcement mode only when it is not "enforce".
reason(code, message) := {"code": code, "message": message, "enforcement": mode} if {
	config.enforcement
	mode := enforcement(code)
	mode != "enforce"
} else := {"code": code, "message": message}

# Enforcement modes, as for runs (sandgate.exec, on the model of
# Gatekeeper's enforcementAction): data.sandgate.config.enforcement.rules
# [code] sets a mode per reason code, .tenants[tenant] per tenant (the
# session's, input.tenant); when both apply the stricter wins, and a mode
# this policy does not know is enforce.
#
# The checks that keep the browser off the gateway host and its networks
# are always enforced, whatever the tables say: the external backend runs
# on the gateway host, so a dry run of the scheme or address checks would
# let an agent read the host's files (file:) or reach its loopback,
# private and metadata addresses. browser.blocked_host and rules an
# administrator adds can be dry-run or warned; a name blocked_hosts lists
# that resolves to such an address is still refused by the address check.
always_enforced := {"browser.scheme", "browser.blocked_address", "browser.unresolved"}

mode_rank := {"dryrun": 0, "warn": 1, "enforce": 2}

enforcement(code) := "enforce" if {
	code in always_enforced
} else := mode if {
	modes := {m | m := config.enforcement.rules[code]} | {m |
		m := config.enforcement.tenants[object.get(input, "tenant", "")]
	}
	some mode in modes
	every other in modes {
		mode_rank[mode] >= mode_rank[other]
	}
} else := "enforce"

# Schemes that never load a network resource are allowed without an
# address check; everything else must be http(s).
local_schemes := {"about", "data", "blob"}

deny_reasons contains reason("browser.scheme", sprintf("scheme %q is not allowed", [input.request.scheme])) if {
	not input.request.scheme in config.browser.allowed_schemes
	not input.request.scheme in local_schemes
}

deny_reasons contains reason("browser.scheme", "only http(s) may be navigated to from the agent") if {
	input.request.navigation
	input.request.scheme in local_schemes
	input.request.url != "about:blank"
}

allowlisted if input.request.host in config.browser.allow_hosts

allowlisted if input.request.host in input.allow_hosts

allowlisted if sprintf("%s:%d", [input.request.host, input.request.port]) in input.allow_hosts

network_request if input.request.scheme in config.browser.allowed_schemes

deny_reasons contains reason("browser.unresolved", sprintf("host %q did not resolve", [input.request.host])) if {
	network_request
	input.backend == "external"
	not allowlisted
	count(input.resolved) == 0
}

deny_reasons contains reason("browser.blocked_address", sprintf("%s resolves to %s, inside %s", [input.request.host, ip, cidr])) if {
	network_request
	input.backend == "external"
	not allowlisted
	some ip in input.resolved
	some cidr in config.browser.blocked_cidrs
	net.cidr_contains(cidr, ip)
}

deny_reasons contains reason("browser.blocked_host", sprintf("host %q is blocked", [input.request.host])) if {
	network_request
	not allowlisted
	some pattern in config.browser.blocked_hosts
	glob.match(pattern, ["."], input.request.host)
}
