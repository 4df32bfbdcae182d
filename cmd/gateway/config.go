package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sandgate/sandgate/api"
	"github.com/sandgate/sandgate/executors/aio"
	"github.com/sandgate/sandgate/executors/subprocess"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/workspace"
)

// Config is the whole gateway configuration. Every field has a safe default
// (Default), decoding is strict (an unknown key is an error, so a typo in a
// security setting is caught), and Validate reports every problem at once.
type Config struct {
	// Listen is the HTTP address. Default 127.0.0.1:8080. A non-loopback
	// address requires configured tokens.
	Listen string `yaml:"listen"`
	// Mode is STRICT (default) or PERMISSIVE.
	Mode string `yaml:"mode"`
	// DataDir holds workspaces and the audit database.
	DataDir string `yaml:"data_dir"`

	Policy    PolicyConfig    `yaml:"policy"`
	Risk      RiskConfig      `yaml:"risk"`
	Limits    LimitsConfig    `yaml:"limits"`
	Workspace WorkspaceConfig `yaml:"workspace"`
	Audit     AuditConfig     `yaml:"audit"`
	Browser   BrowserConfig   `yaml:"browser"`
	Approval  ApprovalConfig  `yaml:"approval"`
	Executors ExecutorsConfig `yaml:"executors"`
	Auth      AuthConfig      `yaml:"auth"`
	Tenants   TenantsConfig   `yaml:"tenants"`
	Server    ServerConfig    `yaml:"server"`
	Log       LogConfig       `yaml:"log"`
}

// PolicyConfig selects the Rego tree.
type PolicyConfig struct {
	// Dir is a policy directory watched for changes; empty uses the policy
	// embedded in the binary.
	Dir         string        `yaml:"dir"`
	EvalTimeout time.Duration `yaml:"eval_timeout"`
	// WatchPoll is the content-hash poll that backs up file events.
	WatchPoll time.Duration `yaml:"watch_poll"`
}

// RiskConfig points at optional admin rules (expr).
type RiskConfig struct {
	RulesFile string `yaml:"rules_file"`
}

// LimitsConfig are request limits.
type LimitsConfig struct {
	MaxCodeBytes   int           `yaml:"max_code_bytes"`
	MaxBodyBytes   int64         `yaml:"max_body_bytes"`
	DefaultTimeout time.Duration `yaml:"default_timeout"`
}

// WorkspaceConfig limits the file API. Result caps (list/glob 200, grep
// 100, read 50,000 characters) are the deepagents contract and not
// configurable here.
type WorkspaceConfig struct {
	MaxFileMiB int   `yaml:"max_file_mib"`
	QuotaMiB   int64 `yaml:"quota_mib"`
	QuotaFiles int64 `yaml:"quota_files"`
}

// BrowserConfig tunes the browser router (browser.Config).
type BrowserConfig struct {
	Enabled bool `yaml:"enabled"`
	// AllowHosts opens "host" or "host:port" to the external browser even
	// though it resolves to a loopback, private or metadata address.
	AllowHosts  []string      `yaml:"allow_hosts"`
	IdleTTL     time.Duration `yaml:"idle_ttl"`
	MaxBrowsers int           `yaml:"max_browsers"`
	// ChromiumPath is the external backend's binary; empty finds chromium.
	ChromiumPath string `yaml:"chromium_path"`
}

// AuditConfig tunes the audit database.
type AuditConfig struct {
	// Synchronous is "full" (default: every record is fsynced before the
	// response, so not even a kernel crash caused by sandboxed code can
	// erase it) or "normal" (faster; the newest records can be lost on a
	// power or kernel failure, never on a gateway crash).
	Synchronous string `yaml:"synchronous"`
}

// ApprovalConfig configures step 4.
type ApprovalConfig struct {
	Timeout time.Duration `yaml:"timeout"`
	// AutoApprove approves every require_approval. PERMISSIVE mode only;
	// Validate rejects it in STRICT. Without it, approvers decide in the web
	// page (GET /) or through /v1/approvals.
	AutoApprove bool `yaml:"auto_approve"`
	// AllowedOrigins are extra browser origins accepted on the approval
	// socket besides the gateway's own (behind a TLS-terminating proxy).
	AllowedOrigins []string `yaml:"allowed_origins"`
}

// ExecutorsConfig enables backends.
type ExecutorsConfig struct {
	Subprocess SubprocessConfig `yaml:"subprocess"`
	Docker     DockerConfig     `yaml:"docker"`
	AIO        AIOConfig        `yaml:"aio"`
}

// AIOConfig is the pooled all-in-one sandbox (executors/aio). Its fields
// are the pool's own (min_instances, max_instances, idle_timeout, max_uses,
// image, network, ...), each with the default documented there.
// Enabled by default: needs_browser and needs_persistent_fs route here.
type AIOConfig struct {
	Enabled        bool `yaml:"enabled"`
	aio.PoolConfig `yaml:",inline"`
}

// DockerConfig tunes the network-less container executor. It is enabled by
// default: STRICT sends everything not proven SAFE there, and an engine that
// is down only makes those requests 503 until it answers again.
//
// A field left out (zero) takes the docker package's default (DefaultImage,
// DefaultLimits, DefaultCPUs, DefaultTmpfsMB, DefaultWarmMax,
// DefaultWarmIdle): the shipped defaults live there, not here.
type DockerConfig struct {
	Enabled bool `yaml:"enabled"`
	// Host is the engine address; empty means DOCKER_HOST or the local socket.
	Host string `yaml:"host"`
	// Image is the runtime image for every language.
	Image    string  `yaml:"image"`
	MemoryMB int     `yaml:"memory_mb"`
	CPUs     float64 `yaml:"cpus"`
	MaxProcs int     `yaml:"max_procs"`
	TmpfsMB  int     `yaml:"tmpfs_mb"`
	// WarmMax bounds the per-session warm containers; negative disables.
	WarmMax  int           `yaml:"warm_max"`
	WarmIdle time.Duration `yaml:"warm_idle"`
	// Runtime is the OCI runtime (runsc for gVisor); empty is the engine's.
	Runtime string `yaml:"runtime"`
}

// SubprocessConfig tunes the hardened host-process executor. A limit left
// out (zero) takes the subprocess package's default (DefaultLimits): the
// shipped defaults live there, not here.
type SubprocessConfig struct {
	Enabled bool `yaml:"enabled"`
	// WarmMax bounds the single-use interpreters started ahead for a
	// session's next run (0 turns warm starts off). Default
	// subprocess.DefaultWarmMax.
	WarmMax int `yaml:"warm_max"`
	// Zygotes runs a session's Python code in a per-session zygote that
	// forks each run (needs root; see the subprocess package). Default
	// true; warm_max also bounds them, and 0 turns them off too.
	Zygotes      bool `yaml:"zygotes"`
	MemoryMB     int  `yaml:"memory_mb"`
	CPUSeconds   int  `yaml:"cpu_seconds"`
	MaxProcs     int  `yaml:"max_procs"`
	MaxOutputKiB int  `yaml:"max_output_kib"`
	// RootDir is the runtime root filesystem that `make images` exports
	// (/var/lib/sandgate/rootfs/runtime): runs then see the same toolchain
	// (python3 with the data stack, node, bash, git) as in docker and aio.
	// Empty: the host's system directories, read-only, so the gateway
	// runs with no build step.
	RootDir string `yaml:"root_dir"`
	// TmpMB caps each run's private /tmp; 0 is the executor's default.
	TmpMB int `yaml:"tmp_mb"`
}

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
}

// QuotaOverride is a tenant's own limits; a field left out keeps the
// default.
type QuotaOverride struct {
	MaxSessions       *int     `yaml:"max_sessions"`
	MaxConcurrentRuns *int     `yaml:"max_concurrent_runs"`
	MaxWorkspaceMiB   *int64   `yaml:"max_workspace_mib"`
	RequestsPerSecond *float64 `yaml:"requests_per_second"`
	Burst             *int     `yaml:"burst"`
}

// over returns q with o's set fields.
func (o QuotaOverride) over(q QuotaConfig) QuotaConfig {
	set(&q.MaxSessions, o.MaxSessions)
	set(&q.MaxConcurrentRuns, o.MaxConcurrentRuns)
	set(&q.MaxWorkspaceMiB, o.MaxWorkspaceMiB)
	set(&q.RequestsPerSecond, o.RequestsPerSecond)
	set(&q.Burst, o.Burst)
	return q
}

func set[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}

func (q QuotaConfig) validate(where string) []error {
	var errs []error
	if q.MaxSessions < 0 || q.MaxConcurrentRuns < 0 || q.MaxWorkspaceMiB < 0 || q.RequestsPerSecond < 0 || q.Burst < 0 {
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

// ServerConfig holds the HTTP server's timeouts. None may be zero: a zero
// http.Server timeout means none at all.
type ServerConfig struct {
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	ReadTimeout       time.Duration `yaml:"read_timeout"`
	WriteTimeout      time.Duration `yaml:"write_timeout"`
	IdleTimeout       time.Duration `yaml:"idle_timeout"`
	ShutdownTimeout   time.Duration `yaml:"shutdown_timeout"`
}

// LogConfig sets the log level (debug, info, warn, error).
type LogConfig struct {
	Level string `yaml:"level"`
}

// Default is the configuration `go run ./cmd/gateway` starts with.
func Default() Config {
	return Config{
		Listen:  "127.0.0.1:8080",
		Mode:    "STRICT",
		DataDir: ".data",
		Policy:  PolicyConfig{EvalTimeout: policy.DefaultEvalTimeout, WatchPoll: 5 * time.Second},
		Limits: LimitsConfig{
			MaxCodeBytes: 256 << 10, MaxBodyBytes: 2 << 20, DefaultTimeout: 30 * time.Second,
		},
		Audit:     AuditConfig{Synchronous: "full"},
		Browser:   BrowserConfig{Enabled: true, IdleTTL: 5 * time.Minute, MaxBrowsers: 8},
		Workspace: WorkspaceConfig{MaxFileMiB: 32, QuotaMiB: 1024, QuotaFiles: 100_000},
		Approval:  ApprovalConfig{Timeout: 120 * time.Second},
		Tenants: TenantsConfig{Quotas: QuotaConfig{MaxSessions: 1000, MaxConcurrentRuns: 64, MaxWorkspaceMiB: 10 << 10,
			RequestsPerSecond: 1000, Burst: 2000}},
		Executors: ExecutorsConfig{
			// The executors' tunables are left at zero: their packages'
			// defaults apply (TestExecutorDefaultsInOnePlace).
			Subprocess: SubprocessConfig{Enabled: true, WarmMax: subprocess.DefaultWarmMax, Zygotes: true},
			Docker:     DockerConfig{Enabled: true},
			AIO:        AIOConfig{Enabled: true},
		},
		Server: ServerConfig{
			ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 60 * time.Second,
			// A request may wait for approval and then run to the policy's
			// ceiling (300 s), so writes need the sum plus a margin.
			WriteTimeout: 10 * time.Minute, IdleTimeout: 2 * time.Minute, ShutdownTimeout: 30 * time.Second,
		},
		Log: LogConfig{Level: "info"},
	}
}

// LoadFile decodes path over the defaults, strictly.
func LoadFile(path string) (Config, error) {
	cfg := Default()
	f, err := os.Open(path)
	if err != nil {
		return cfg, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil {
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// Validate reports every problem, joined.
func (c Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		add("listen %q: %v", c.Listen, err)
	}
	if c.Mode != "STRICT" && c.Mode != "PERMISSIVE" {
		add("mode %q: want STRICT or PERMISSIVE", c.Mode)
	}
	if c.DataDir == "" {
		add("data_dir is required")
	}
	if c.Approval.AutoApprove && c.Mode != "PERMISSIVE" {
		add("approval.auto_approve is allowed only in PERMISSIVE mode")
	}
	positive := map[string]time.Duration{
		"policy.eval_timeout": c.Policy.EvalTimeout, "policy.watch_poll": c.Policy.WatchPoll,
		"limits.default_timeout": c.Limits.DefaultTimeout, "approval.timeout": c.Approval.Timeout,
		"server.read_header_timeout": c.Server.ReadHeaderTimeout, "server.read_timeout": c.Server.ReadTimeout,
		"server.write_timeout": c.Server.WriteTimeout, "server.idle_timeout": c.Server.IdleTimeout,
		"server.shutdown_timeout": c.Server.ShutdownTimeout,
	}
	for _, name := range sortedKeys(positive) {
		if positive[name] <= 0 {
			add("%s must be positive", name)
		}
	}
	if c.Limits.MaxCodeBytes <= 0 || c.Limits.MaxBodyBytes < int64(c.Limits.MaxCodeBytes) {
		add("limits: max_code_bytes must be positive and max_body_bytes at least as large")
	}
	if w := c.Workspace; w.MaxFileMiB <= 0 || w.QuotaMiB <= 0 || w.QuotaFiles <= 0 {
		add("workspace: max_file_mib, quota_mib and quota_files must be positive")
	}
	if c.Audit.Synchronous != "full" && c.Audit.Synchronous != "normal" {
		add("audit.synchronous %q: want full or normal", c.Audit.Synchronous)
	}
	// Zero means the executor's default; a negative value is a mistake,
	// not "unlimited".
	sp := c.Executors.Subprocess
	if sp.Enabled && (sp.MemoryMB < 0 || sp.CPUSeconds < 0 || sp.MaxProcs < 0 || sp.MaxOutputKiB < 0 || sp.TmpMB < 0) {
		add("executors.subprocess: memory_mb, cpu_seconds, max_procs, max_output_kib and tmp_mb must not be negative")
	}
	if d := c.Executors.Docker; d.Enabled && (d.MemoryMB < 0 || d.CPUs < 0 || d.MaxProcs < 0 || d.TmpfsMB < 0 || d.WarmIdle < 0) {
		add("executors.docker: memory_mb, cpus, max_procs, tmpfs_mb and warm_idle must not be negative")
	}
	if b := c.Browser; b.Enabled && (b.IdleTTL <= 0 || b.MaxBrowsers <= 0) {
		add("browser: idle_ttl and max_browsers must be positive")
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		add("log.level %q: want debug, info, warn or error", c.Log.Level)
	}
	errs = append(errs, c.Auth.validate()...)
	errs = append(errs, c.Tenants.validate()...)
	return errors.Join(errs...)
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

// IsLoopback reports whether the listen address can only be reached from
// this host.
func IsLoopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
