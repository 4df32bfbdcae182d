package sandgate.browser_test

import data.sandgate.browser

req(url, scheme, host, port, nav) := {
	"url": url, "scheme": scheme, "host": host, "port": port,
	"method": "GET", "resource_type": "Document", "navigation": nav,
}

mk(backend, r, resolved, allow) := {
	"mode": "STRICT", "session_id": "s-1", "backend": backend,
	"request": r, "resolved": resolved, "allow_hosts": allow,
}

codes(d) := {r.code | some r in d.reasons}

test_public_https_allowed if {
	d := browser.decision with input as mk("external", req("https://example.com/", "https", "example.com", 443, true), ["93.184.216.34"], [])
	d.action == "allow"
}

test_ssrf_addresses_denied if {
	every ip in ["127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "::1", "fe80::1", "fd00::1", "0.0.0.0", "100.64.0.1", "::ffff:127.0.0.1"] {
		d := browser.decision with input as mk("external", req("http://x.test/", "http", "x.test", 80, true), [ip], [])
		d.action == "deny"
		"browser.blocked_address" in codes(d)
	}
}

test_any_bad_address_denies if {
	d := browser.decision with input as mk("external", req("http://x.test/", "http", "x.test", 80, false), ["93.184.216.34", "127.0.0.1"], [])
	d.action == "deny"
}

test_unresolved_denied if {
	d := browser.decision with input as mk("external", req("http://nowhere.test/", "http", "nowhere.test", 80, true), [], [])
	"browser.unresolved" in codes(d)
}

test_schemes_denied if {
	every s in ["file", "chrome", "javascript", "chrome-extension", "view-source", "ftp", "ws"] {
		d := browser.decision with input as mk("external", req(concat("", [s, ":x"]), s, "", 0, true), ["93.184.216.34"], [])
		d.action == "deny"
		"browser.scheme" in codes(d)
	}
}

test_local_schemes if {
	blank := browser.decision with input as mk("external", req("about:blank", "about", "", 0, true), [], [])
	blank.action == "allow"
	img := browser.decision with input as mk("external", req("data:image/png;base64,AA==", "data", "", 0, false), [], [])
	img.action == "allow"
	nav := browser.decision with input as mk("external", req("data:text/html,<h1>x</h1>", "data", "", 0, true), [], [])
	nav.action == "deny"
}

test_allowlist_by_host_and_port if {
	by_port := browser.decision with input as mk("external", req("http://127.0.0.1:8123/", "http", "127.0.0.1", 8123, true), ["127.0.0.1"], ["127.0.0.1:8123"])
	by_port.action == "allow"
	other_port := browser.decision with input as mk("external", req("http://127.0.0.1:8080/v1/policy", "http", "127.0.0.1", 8080, true), ["127.0.0.1"], ["127.0.0.1:8123"])
	other_port.action == "deny"
	by_host := browser.decision with input as mk("external", req("http://intranet.test/", "http", "intranet.test", 80, true), ["10.0.0.5"], ["intranet.test"])
	by_host.action == "allow"
	from_data := browser.decision with data.sandgate.config.browser.allow_hosts as ["intranet.test"]
		with input as mk("external", req("http://intranet.test/", "http", "intranet.test", 80, true), ["10.0.0.5"], [])
	from_data.action == "allow"
}

test_allowlist_never_opens_schemes if {
	d := browser.decision with input as mk("external", req("file:///etc/passwd", "file", "", 0, true), [], ["", "127.0.0.1"])
	d.action == "deny"
}

test_blocked_hosts if {
	d := browser.decision with input as mk("aio", req("http://metadata.google.internal/", "http", "metadata.google.internal", 80, true), ["93.184.216.34"], [])
	"browser.blocked_host" in codes(d)
	l := browser.decision with input as mk("external", req("http://foo.localhost/", "http", "foo.localhost", 80, true), ["93.184.216.34"], [])
	l.action == "deny"
}

test_aio_backend_skips_address_check if {
	# The aio browser runs inside a network-less sandbox container: its
	# loopback is its own, so private addresses are not the gateway's.
	d := browser.decision with input as mk("aio", req("http://127.0.0.1:3000/", "http", "127.0.0.1", 3000, true), ["127.0.0.1"], [])
	d.action == "allow"
}

test_default_denies if {
	d := browser.decision with browser.deny_reasons as {{"code": "x", "message": "y"}}
		with input as mk("external", req("https://example.com/", "https", "example.com", 443, true), ["93.184.216.34"], [])
	d.action == "deny"
}

# Enforcement modes (config.enforcement): a host an administrator blocks
# by name, in dryrun or warn.

public_nav(tenant) := object.union(
	mk("external", req("https://forms.example/", "https", "forms.example", 443, true), ["93.184.216.34"], []),
	{"tenant": tenant},
)

test_dryrun_rule_allows_and_records_would_be if {
	d := browser.decision with input as public_nav("acme")
		with data.sandgate.config.browser.blocked_hosts as ["forms.example"]
		with data.sandgate.config.enforcement.rules as {"browser.blocked_host": "dryrun"}
	d.action == "allow"
	d.would_be == "deny"
	d.reasons == [{"code": "browser.blocked_host", "message": "host \"forms.example\" is blocked", "enforcement": "dryrun"}]
}

test_warn_tenant_allows_and_marks_warn if {
	d := browser.decision with input as public_nav("acme")
		with data.sandgate.config.browser.blocked_hosts as ["forms.example"]
		with data.sandgate.config.enforcement.tenants as {"acme": "warn"}
	d.action == "allow"
	d.would_be == "deny"
	[r.enforcement | some r in d.reasons] == ["warn"]

	# another tenant is enforced
	other := browser.decision with input as public_nav("other")
		with data.sandgate.config.browser.blocked_hosts as ["forms.example"]
		with data.sandgate.config.enforcement.tenants as {"acme": "warn"}
	other.action == "deny"
	not other.would_be
}

test_stricter_mode_wins if {
	d := browser.decision with input as public_nav("acme")
		with data.sandgate.config.browser.blocked_hosts as ["forms.example"]
		with data.sandgate.config.enforcement as {"rules": {"browser.blocked_host": "dryrun"}, "tenants": {"acme": "enforce"}}
	d.action == "deny"
	not d.would_be
}

test_unknown_mode_is_enforced if {
	d := browser.decision with input as public_nav("acme")
		with data.sandgate.config.browser.blocked_hosts as ["forms.example"]
		with data.sandgate.config.enforcement.rules as {"browser.blocked_host": "maybe"}
	d.action == "deny"
	not d.would_be
}

# The checks that keep the external browser off the gateway host cannot be
# relaxed, by rule or by tenant.
test_host_protections_always_enforced if {
	every code in ["browser.blocked_address", "browser.scheme", "browser.unresolved"] {
		d := browser.decision with input as object.union(mk("external", req("http://x.test/", "http", "x.test", 80, true), ["127.0.0.1"], []), {"tenant": "acme"})
			with data.sandgate.config.enforcement as {"rules": {code: "dryrun"}, "tenants": {"acme": "dryrun"}}
		d.action == "deny"
		not d.would_be
	}
	f := browser.decision with input as object.union(mk("external", req("file:///etc/passwd", "file", "", 0, true), [], []), {"tenant": "acme"})
		with data.sandgate.config.enforcement.tenants as {"acme": "dryrun"}
	f.action == "deny"
	"browser.scheme" in codes(f)
}

# An enforced reason denies even beside a relaxed one, and both are listed.
test_enforced_beside_relaxed_denies if {
	d := browser.decision with input as object.union(mk("external", req("http://forms.example/", "http", "forms.example", 80, true), ["10.0.0.1"], []), {"tenant": "acme"})
		with data.sandgate.config.browser.blocked_hosts as ["forms.example"]
		with data.sandgate.config.enforcement.rules as {"browser.blocked_host": "dryrun"}
	d.action == "deny"
	codes(d) == {"browser.blocked_host", "browser.blocked_address"}
	not d.would_be
}

test_no_modes_no_would_be if {
	d := browser.decision with input as public_nav("acme")
		with data.sandgate.config.browser.blocked_hosts as ["forms.example"]
	d == {"action": "deny", "reasons": [{"code": "browser.blocked_host", "message": "host \"forms.example\" is blocked"}]}
}
