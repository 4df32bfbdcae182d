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

decision := {"action": "deny", "reasons": sort(deny_reasons)} if {
	count(deny_reasons) > 0
} else := {"action": "allow", "reasons": []}

reason(code, message) := {"code": code, "message": message}

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
