package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/sandgate/sandgate/api"
	"github.com/sandgate/sandgate/workspace"
)

// AuthConfig lists bearer tokens and, optionally, how to accept JWTs.
// Without either, the gateway generates one token per role at start, prints
// them, and only listens on loopback.
type AuthConfig struct {
	Tokens []TokenConfig `yaml:"tokens"`
	JWT    JWTConfig     `yaml:"jwt"`
}

// JWTConfig accepts JWTs signed (RS256 or ES256) by an identity provider
// whose keys are in a JWKS file or at a JWKS URL. Setting audience turns
// it on.
type JWTConfig struct {
	// Audience must be in the token's aud. Required to accept JWTs.
	Audience string `yaml:"audience"`
	// Issuer, when set, must be the token's iss.
	Issuer string `yaml:"issuer"`
	// JWKSFile or JWKSURL (exactly one) holds the verification keys. A URL
	// must be https, or http to a loopback address.
	JWKSFile string `yaml:"jwks_file"`
	JWKSURL  string `yaml:"jwks_url"`
	// Refresh is how long keys from the URL are used before it is fetched
	// again (default 10m); a token naming an unknown key fetches sooner.
	Refresh time.Duration `yaml:"refresh"`
	// Leeway is the clock skew allowed on exp and nbf (default 30s).
	Leeway time.Duration `yaml:"leeway"`
	// Claims name the claims giving the caller's tenant, role, name and,
	// for an approver, the tenants it may see.
	Claims JWTClaimsConfig `yaml:"claims"`
}

// JWTClaimsConfig maps claims to the caller.
type JWTClaimsConfig struct {
	Tenant  string `yaml:"tenant"`
	Role    string `yaml:"role"`
	Name    string `yaml:"name"`
	Tenants string `yaml:"tenants"`
}

// Enabled reports whether JWTs are accepted.
func (j JWTConfig) Enabled() bool { return j.Audience != "" || j.JWKSFile != "" || j.JWKSURL != "" }

func (j JWTConfig) validate() []error {
	if !j.Enabled() {
		return nil
	}
	var errs []error
	if j.Audience == "" {
		errs = append(errs, errors.New("auth.jwt.audience is required to accept JWTs"))
	}
	if (j.JWKSFile == "") == (j.JWKSURL == "") {
		errs = append(errs, errors.New("auth.jwt: set exactly one of jwks_file and jwks_url"))
	}
	if j.JWKSURL != "" {
		u, err := url.Parse(j.JWKSURL)
		if err != nil || u.Host == "" || (u.Scheme != "https" && !(u.Scheme == "http" && IsLoopback(hostPort(u)))) {
			errs = append(errs, fmt.Errorf("auth.jwt.jwks_url %q: want an https URL (http only to a loopback address)", j.JWKSURL))
		}
	}
	if j.Refresh < 0 || j.Leeway < 0 {
		errs = append(errs, errors.New("auth.jwt: refresh and leeway must not be negative"))
	}
	return errs
}

// hostPort is u's host with a port, for IsLoopback.
func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	return net.JoinHostPort(u.Hostname(), "0")
}

// TokenConfig is one credential.
type TokenConfig struct {
	Name string `yaml:"name"`
	Role string `yaml:"role"`
	// Token is the secret, or "sha256:" and the hex SHA-256 of the secret
	// (printf %s "$SECRET" | sha256sum), so the file holds no secret.
	Token string `yaml:"token"`
	// Tenant owns the sessions this token creates; default: the token's
	// name, so that a single-team setup needs no change.
	Tenant string `yaml:"tenant"`
	// Tenants limits an approver token to these tenants' approvals;
	// empty (the default) lets it see and decide every tenant's.
	Tenants []string `yaml:"tenants"`
}

// tenant is the token's tenant, its name by default.
func (t TokenConfig) tenant() string {
	if t.Tenant != "" {
		return t.Tenant
	}
	return t.Name
}

// TenantsConfig holds the tenants' quotas: Quotas for every tenant, and
// per-tenant Overrides whose unset fields keep the Quotas value.
type TenantsConfig struct {
	Quotas    QuotaConfig              `yaml:"quotas"`
	Overrides map[string]QuotaOverride `yaml:"overrides"`
}

// QuotaConfig is one tenant's limits (manager.Quota). 0 turns a limit off;
// the defaults are finite and sized not to bind a normal single-team
// gateway.
type QuotaConfig struct {
	MaxSessions       int     `yaml:"max_sessions"`
	MaxConcurrentRuns int     `yaml:"max_concurrent_runs"`
	MaxWorkspaceMiB   int64   `yaml:"max_workspace_mib"`
	RequestsPerSecond float64 `yaml:"requests_per_second"`
	Burst             int     `yaml:"burst"`
	// MaxSnapshots and MaxSnapshotMiB bound the tenant's named
	// snapshots (POST /v1/sessions/{id}/snapshots).
	MaxSnapshots   int   `yaml:"max_snapshots"`
	MaxSnapshotMiB int64 `yaml:"max_snapshot_mib"`
}

// QuotaOverride is a tenant's own limits; a field left out keeps the
// default.
type QuotaOverride struct {
	MaxSessions       *int     `yaml:"max_sessions"`
	MaxConcurrentRuns *int     `yaml:"max_concurrent_runs"`
	MaxWorkspaceMiB   *int64   `yaml:"max_workspace_mib"`
	RequestsPerSecond *float64 `yaml:"requests_per_second"`
	Burst             *int     `yaml:"burst"`
	MaxSnapshots      *int     `yaml:"max_snapshots"`
	MaxSnapshotMiB    *int64   `yaml:"max_snapshot_mib"`
}

// over returns q with o's set fields.
func (o QuotaOverride) over(q QuotaConfig) QuotaConfig {
	set(&q.MaxSessions, o.MaxSessions)
	set(&q.MaxConcurrentRuns, o.MaxConcurrentRuns)
	set(&q.MaxWorkspaceMiB, o.MaxWorkspaceMiB)
	set(&q.RequestsPerSecond, o.RequestsPerSecond)
	set(&q.Burst, o.Burst)
	set(&q.MaxSnapshots, o.MaxSnapshots)
	set(&q.MaxSnapshotMiB, o.MaxSnapshotMiB)
	return q
}

func set[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}

func (q QuotaConfig) validate(where string) []error {
	var errs []error
	if q.MaxSessions < 0 || q.MaxConcurrentRuns < 0 || q.MaxWorkspaceMiB < 0 || q.RequestsPerSecond < 0 || q.Burst < 0 ||
		q.MaxSnapshots < 0 || q.MaxSnapshotMiB < 0 {
		errs = append(errs, fmt.Errorf("%s: quotas must not be negative (0 turns a limit off)", where))
	}
	if q.RequestsPerSecond > 0 && q.Burst < 1 {
		errs = append(errs, fmt.Errorf("%s: burst must be at least 1 when requests_per_second is set", where))
	}
	return errs
}

func (t TenantsConfig) validate() []error {
	errs := t.Quotas.validate("tenants.quotas")
	for _, name := range sortedKeys(t.Overrides) {
		if workspace.ValidateTenant(name) != nil {
			errs = append(errs, fmt.Errorf("tenants.overrides: %q is not a valid tenant name", name))
		}
		errs = append(errs, t.Overrides[name].over(t.Quotas).validate("tenants.overrides."+name)...)
	}
	return errs
}

func (a AuthConfig) validate() []error {
	errs := a.JWT.validate()
	seen := map[[32]byte]bool{}
	for i, t := range a.Tokens {
		switch t.Role {
		case "agent", "approver", "admin":
		default:
			errs = append(errs, fmt.Errorf("auth.tokens[%d]: role %q: want agent, approver or admin", i, t.Role))
		}
		if t.Name == "" {
			errs = append(errs, fmt.Errorf("auth.tokens[%d]: name is required", i))
		}
		sum, err := api.ParseSecret(t.Token)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("auth.tokens[%d] (%s): %w", i, t.Name, err))
		case !strings.HasPrefix(t.Token, api.HashPrefix) && len(t.Token) < 16:
			errs = append(errs, fmt.Errorf("auth.tokens[%d] (%s): token must be at least 16 characters", i, t.Name))
		case seen[sum]:
			errs = append(errs, fmt.Errorf("auth.tokens[%d] (%s): the same token is configured twice", i, t.Name))
		}
		seen[sum] = true
		errs = append(errs, t.validateTenants(i)...)
	}
	return errs
}

func (t TokenConfig) validateTenants(i int) []error {
	var errs []error
	if t.Name != "" && workspace.ValidateTenant(t.tenant()) != nil {
		errs = append(errs, fmt.Errorf("auth.tokens[%d] (%s): tenant %q: want 1-64 of [A-Za-z0-9._-], starting with a letter or digit (set tenant: when the name is not one)",
			i, t.Name, t.tenant()))
	}
	if len(t.Tenants) > 0 && t.Role != "approver" {
		errs = append(errs, fmt.Errorf("auth.tokens[%d] (%s): tenants limits an approver; a %s token has one tenant (tenant:)", i, t.Name, t.Role))
	}
	for _, name := range t.Tenants {
		if workspace.ValidateTenant(name) != nil {
			errs = append(errs, fmt.Errorf("auth.tokens[%d] (%s): tenants: %q is not a valid tenant name", i, t.Name, name))
		}
	}
	return errs
}
