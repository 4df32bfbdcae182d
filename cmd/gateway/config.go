package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sandgate/sandgate/events"
	"github.com/sandgate/sandgate/executors/aio"
	"github.com/sandgate/sandgate/executors/docker"
	"github.com/sandgate/sandgate/executors/subprocess"
	"github.com/sandgate/sandgate/fleet"
	"github.com/sandgate/sandgate/mcp"
	"github.com/sandgate/sandgate/policy"
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
	Storage   StorageConfig   `yaml:"storage"`
	Browser   BrowserConfig   `yaml:"browser"`
	Approval  ApprovalConfig  `yaml:"approval"`
	Executors ExecutorsConfig `yaml:"executors"`
	MCP       MCPConfig       `yaml:"mcp"`
	DeerFlow  DeerFlowConfig  `yaml:"deerflow"`
	E2B       E2BConfig       `yaml:"e2b"`
	Daytona   DaytonaConfig   `yaml:"daytona"`
	Egress    EgressConfig    `yaml:"egress"`
	Auth      AuthConfig      `yaml:"auth"`
	Tenants   TenantsConfig   `yaml:"tenants"`
	// Sessions tunes sessions' lifecycle (issue 30).
	Sessions SessionsConfig `yaml:"sessions"`
	// Events is the lifecycle event log: retention, and the webhooks
	// (Standard Webhooks signatures) it delivers to (package events).
	Events events.Config `yaml:"events"`
	Server ServerConfig  `yaml:"server"`
	Log    LogConfig     `yaml:"log"`
}

// PolicyConfig selects the Rego tree.
type PolicyConfig struct {
	// Dir is a policy directory watched for changes; empty uses the policy
	// embedded in the binary.
	Dir         string        `yaml:"dir"`
	EvalTimeout time.Duration `yaml:"eval_timeout"`
	// WatchPoll is the content-hash poll that backs up file events.
	WatchPoll time.Duration `yaml:"watch_poll"`

	// Source is "folder" (the default: dir, or the embedded policy, hot
	// reloaded) or "bundle" (OPA bundle services, configured by the
	// bundles section of opa_config and kept current by OPA's bundle
	// plugin; dir must then be empty).
	Source string `yaml:"source"`
	// OPAConfig is OPA's own configuration, as `opa run --config-file`
	// reads it: services, keys, bundles, decision_logs, status, labels.
	// Either the path of a YAML or JSON file, or the document inline. It
	// holds credentials (service tokens, signing keys) and is never logged.
	// With source folder it may configure decision_logs and status only.
	OPAConfig OPAConfig `yaml:"opa_config"`
	// PersistDir is where OPA keeps the last activated bundle of a bundle
	// configured with persist: true, so a restart with the bundle server
	// down starts on it. Default: data_dir/opa.
	PersistDir string `yaml:"persist_dir"`
	// InstanceID is labels.id in OPA's status reports and decision logs.
	// Default: the replica name (storage.replica).
	InstanceID string `yaml:"instance_id"`
	// ShadowDir is a candidate policy folder evaluated beside the active
	// policy on every decision and never enforced: GET /v1/policy/shadow
	// and the sandgate_policy_shadow_* metrics show where it disagrees.
	// A shadow_dir naming a bundle file (.tar.gz) loads it once, unverified,
	// as a folder on the same disk is.
	ShadowDir string `yaml:"shadow_dir"`
	// ShadowOPAConfig makes the shadow candidate an OPA bundle, kept
	// current by OPA's bundle plugin as the active bundle source is: OPA's
	// configuration (services, keys, bundles; a bundle file to verify is
	// a file:// resource) as a file path or inline, never logged. Its
	// bundles need a signing section unless allow_unsigned_bundles; a
	// refused candidate shows in GET /v1/policy/shadow. Not with
	// shadow_dir.
	ShadowOPAConfig OPAConfig `yaml:"shadow_opa_config"`
	// AllowUnsignedBundles accepts bundles opa_config gives no signing
	// section. Off by default: the policy is the security boundary, and
	// an unsigned bundle is whatever the bundle service (or whoever sits
	// between it and the gateway) serves.
	AllowUnsignedBundles bool `yaml:"allow_unsigned_bundles"`
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

// StorageConfig selects the database behind audit records and approvals.
type StorageConfig struct {
	// Driver is "sqlite" (default: an embedded database under data_dir,
	// for one process) or "postgres" (a fleet's shared database, reached
	// through DSN).
	Driver string `yaml:"driver"`
	// DSN is the PostgreSQL connection string (libpq keyword/value or a
	// postgres:// URL), postgres only. Prefer SANDGATE_STORAGE_DSN over the
	// file for one holding a password; the password is never logged.
	DSN string `yaml:"dsn"`
	// Replica names this process in a fleet: its audit hash chain and the
	// write-ahead records it resolves as interrupted when it starts
	// again. Each replica needs its own, stable across restarts. Default:
	// "local" on sqlite, the host name on postgres (env
	// SANDGATE_REPLICA).
	Replica string `yaml:"replica"`
	// Lease is how long a replica counts as alive after its last
	// heartbeat (postgres): once it expires, another replica resolves
	// its pending approvals and started audit records as interrupted. A
	// restarted replica waits out its own previous lease. Default 15s.
	Lease time.Duration `yaml:"lease"`
	// AdvertiseURL is where the other replicas reach this one to forward
	// the requests of the sessions it owns (postgres), e.g.
	// http://gw-a.internal:8080. Default: http:// and the bound listen
	// address, with the host name in place of an unspecified host
	// (0.0.0.0, [::]). Env SANDGATE_ADVERTISE_URL.
	AdvertiseURL string `yaml:"advertise_url"`
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
	// PageURL is the approval page's public base URL
	// (https://gate.example.com), for the links the channels send.
	// Default: http:// and the listen address.
	PageURL string `yaml:"page_url"`
	// Channels are told of held requests besides the page: signed
	// webhooks and Slack apps (ChannelConfig).
	Channels []ChannelConfig `yaml:"channels"`
}

// MCPConfig is the MCP endpoint at /mcp (package mcp). Enabled by default:
// it takes the same agent tokens as the HTTP API and runs everything
// through the same pipeline.
type MCPConfig struct {
	Enabled bool `yaml:"enabled"`
	// PublicURL is the gateway's base URL as clients reach it (behind a
	// TLS-terminating proxy); empty derives it from each request's Host.
	PublicURL string `yaml:"public_url"`
	// AllowedHosts, when set, are the only Host values /mcp accepts (the
	// DNS-rebinding guard of a non-loopback listener).
	AllowedHosts []string `yaml:"allowed_hosts"`
	// AllowedOrigins are browser origins accepted besides the gateway's own.
	AllowedOrigins []string `yaml:"allowed_origins"`
	// SessionTimeout closes an idle MCP session (and releases its session's
	// browser and pool instance).
	SessionTimeout time.Duration `yaml:"session_timeout"`
	// ProgressInterval paces the notifications sent while a call waits for
	// approval.
	ProgressInterval time.Duration `yaml:"progress_interval"`
	// PurgeOnClose also deletes the workspace of an MCP session's own
	// sandgate session when the MCP session ends.
	PurgeOnClose bool `yaml:"purge_on_close"`
}

// DeerFlowConfig is the DeerFlow provisioner API under /deerflow (DeerFlow's
// `sandbox.provisioner_url: http://<gateway>/deerflow`, with an agent token
// as its provisioner_api_key). Enabled by default, like /mcp: it takes the
// same agent tokens and runs every call through the same pipeline; the
// sandbox URLs it hands out carry a per-sandbox capability (api.DeerFlow).
type DeerFlowConfig struct {
	Enabled bool `yaml:"enabled"`
	// PublicURL is the gateway's base URL as DeerFlow reaches it (behind a
	// proxy), for the sandbox URLs; empty derives it from each request's
	// Host.
	PublicURL string `yaml:"public_url"`
}

// E2BConfig is the E2B front end under /e2b (package e2b): E2B's control
// plane, envd and the code interpreter, for the unmodified E2B SDKs with
// E2B_API_URL and E2B_SANDBOX_URL set to http://<gateway>/e2b and an
// agent token as E2B_API_KEY. Enabled by default, like /mcp and
// /deerflow: the control plane takes the same agent tokens, each sandbox
// call its sandbox's own token, and every command, cell and file call
// passes the same pipeline.
type E2BConfig struct {
	Enabled bool `yaml:"enabled"`
}

// DaytonaConfig is the Daytona front end under /daytona (package
// daytona): the sandbox API and toolbox calls of the unmodified Daytona
// SDK with apiUrl (DAYTONA_API_URL) set to http://<gateway>/daytona and
// an agent token as its apiKey. Enabled by default, like /e2b: every call
// carries that agent token and passes the same pipeline.
type DaytonaConfig struct {
	Enabled bool `yaml:"enabled"`
	// PublicURL is the gateway's base URL as the SDK reaches it (behind a
	// proxy), for the toolbox URL create answers; empty derives it from
	// each request's Host.
	PublicURL string `yaml:"public_url"`
}

// EgressConfig is the egress proxy (package egress, DESIGN.md §9): the only
// network a run granted it has. Which hosts it reaches is policy (the
// sandgate.egress package and data.sandgate.config.egress); this is the
// proxy's machinery. Enabled by default: a run is granted network only by
// the policy, and without the proxy such a run is denied. Zero fields take
// the egress package's defaults (DefaultHandshakeTimeout,
// DefaultMaxTunnels, TLS ports [443]); the wait for a person is
// approval.timeout.
type EgressConfig struct {
	Enabled              bool          `yaml:"enabled"`
	HandshakeTimeout     time.Duration `yaml:"handshake_timeout"`
	MaxTunnelsPerSession int           `yaml:"max_tunnels_per_session"`
	// TLSPorts are the CONNECT ports whose ClientHello must name the
	// CONNECT host.
	TLSPorts []int `yaml:"tls_ports"`
	// Credentials bind a header to a host: the proxy adds it to every
	// HTTPS request to that host (terminating TLS with the gateway CA,
	// kept in data_dir/egress, for those hosts only). The sandbox never
	// sees the value.
	Credentials []EgressCredential `yaml:"credentials"`
	// Hosts pins names to addresses before DNS ("db.internal":
	// ["10.1.2.3"]), like /etc/hosts for the proxy. The policy still
	// decides, on these addresses.
	Hosts map[string][]string `yaml:"hosts"`
	// UpgradeProtocols are the protocols a request through an inspected
	// host may switch to (Upgrade), once the policy allowed it; absent,
	// egress's default (websocket). An empty list allows none.
	UpgradeProtocols []string `yaml:"upgrade_protocols"`
}

// EgressCredential is one secret bound to a host. Prefer ValueEnv (the
// name of an environment variable holding the value) to Value in the
// file.
type EgressCredential struct {
	Host     string `yaml:"host"`
	Header   string `yaml:"header"`
	Value    string `yaml:"value"`
	ValueEnv string `yaml:"value_env"`
	// Methods and PathPrefix scope the credential: it is attached only to
	// requests with one of the methods (empty: any) under the prefix
	// (empty: any path); the others go out without it.
	Methods    []string `yaml:"methods"`
	PathPrefix string   `yaml:"path_prefix"`
}

// ExecutorsConfig enables backends.
type ExecutorsConfig struct {
	Subprocess SubprocessConfig `yaml:"subprocess"`
	Docker     DockerConfig     `yaml:"docker"`
	// GVisor is the docker executor's container path under gVisor's runsc
	// (executors/gvisor), with the same fields; runtime defaults to
	// "runsc" (gvisor.DefaultRuntime). Enabled by default: the default
	// STRICT policy sends approved HIGH code there when it is available,
	// and to docker, with a reason in the decision, when it is not (an
	// engine without runsc).
	GVisor DockerConfig `yaml:"gvisor"`
	AIO    AIOConfig    `yaml:"aio"`
	// Kubernetes is the pod-per-session tier (kubernetes.go).
	Kubernetes KubernetesConfig `yaml:"kubernetes"`
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
// DefaultWarmPerSession, DefaultWarmIdle): the shipped defaults live there, not here.
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
	// WarmMax bounds the warm containers across sessions; negative
	// disables them.
	WarmMax int `yaml:"warm_max"`
	// WarmPerSession bounds one session's warm containers (more than one
	// serves runs sent back to back).
	WarmPerSession int           `yaml:"warm_per_session"`
	WarmIdle       time.Duration `yaml:"warm_idle"`
	// Runtime is the OCI runtime; empty is the engine's default (runc) for
	// docker, and "runsc" for gvisor.
	Runtime string `yaml:"runtime"`
	// Pool sizes the pool of pre-started sandboxes of no session that a
	// session's first run claims (size per shape, max in all, shapes,
	// dir); zero fields take the docker package's defaults (the memory
	// of the machine sets max), max: -1 turns it off.
	Pool docker.PoolConfig `yaml:"pool"`
	// Instance labels this gateway's containers; at start the executor
	// removes the leftovers of its own instance (a crash's) and nothing
	// else, so gateways sharing one engine need distinct instances. Empty
	// is the package default ("default").
	Instance string `yaml:"instance"`
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
	Zygotes bool `yaml:"zygotes"`
	// ZygotePool sizes the pool of pre-started zygotes of no session that
	// sessions' first Python runs claim (size per shape, max in all, 0 for
	// the memory-derived default, negative off; shapes). Needs root and
	// zygotes.
	ZygotePool   subprocess.ZygotePoolConfig `yaml:"zygote_pool"`
	MemoryMB     int                         `yaml:"memory_mb"`
	CPUSeconds   int                         `yaml:"cpu_seconds"`
	MaxProcs     int                         `yaml:"max_procs"`
	MaxOutputKiB int                         `yaml:"max_output_kib"`
	// RootDir is the runtime root filesystem that `make images` exports
	// (/var/lib/sandgate/rootfs/runtime): runs then see the same toolchain
	// (python3 with the data stack, node, bash, git) as in docker and aio.
	// Empty: the host's system directories, read-only, so the gateway
	// runs with no build step.
	RootDir string `yaml:"root_dir"`
	// TmpMB caps each run's private /tmp; 0 is the executor's default.
	TmpMB int `yaml:"tmp_mb"`
}

// SessionsConfig tunes sessions' lifecycle.
type SessionsConfig struct {
	// PauseIdleAfter pauses a session with no request for this long: its
	// containers and processes are freed, a gVisor kernel keeping its
	// memory in a checkpoint, and its next request resumes it. 0 (the
	// default) never pauses one.
	PauseIdleAfter time.Duration `yaml:"pause_idle_after"`
	// SnapshotRetention deletes a named snapshot this long after it was
	// taken (default 7 days); SnapshotCompress writes its kernel image
	// compressed. Default false, as measured here (bench -only pause, a
	// kernel holding pandas): flate takes its 139 MB image to 38 MB, but
	// taking the snapshot (the session frozen meanwhile) went from about
	// 0.7 to 4 s and starting a session from it from about 0.9 to 2.9 s
	// on this loaded 2-core machine; compression pays where disk or the
	// byte quota, not latency, is what is short.
	SnapshotRetention time.Duration `yaml:"snapshot_retention"`
	SnapshotCompress  bool          `yaml:"snapshot_compress"`
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
		Storage:   StorageConfig{Driver: "sqlite", Lease: fleet.DefaultLease},
		Browser:   BrowserConfig{Enabled: true, IdleTTL: 5 * time.Minute, MaxBrowsers: 8},
		Workspace: WorkspaceConfig{MaxFileMiB: 32, QuotaMiB: 1024, QuotaFiles: 100_000},
		Approval:  ApprovalConfig{Timeout: 120 * time.Second},
		// Quotas sized not to bind one team's gateway (bench/ drives ~600
		// req/s on 2 cores); set them per tenant for shared gateways.
		Tenants: TenantsConfig{Quotas: QuotaConfig{MaxSessions: 10_000, MaxConcurrentRuns: 64, MaxWorkspaceMiB: 10 << 10,
			RequestsPerSecond: 5000, Burst: 10000, MaxSnapshots: 100, MaxSnapshotMiB: 20 << 10}},
		Sessions: SessionsConfig{SnapshotRetention: 7 * 24 * time.Hour},
		MCP:      MCPConfig{Enabled: true, SessionTimeout: mcp.DefaultSessionTimeout, ProgressInterval: mcp.DefaultProgressInterval},
		DeerFlow: DeerFlowConfig{Enabled: true},
		E2B:      E2BConfig{Enabled: true},
		Daytona:  DaytonaConfig{Enabled: true},
		// The proxy's tunables are left at zero: the egress package's
		// defaults apply.
		Egress: EgressConfig{Enabled: true},
		Executors: ExecutorsConfig{
			// The executors' tunables are left at zero: their packages'
			// defaults apply (TestExecutorDefaultsInOnePlace).
			Subprocess: SubprocessConfig{Enabled: true, WarmMax: subprocess.DefaultWarmMax, Zygotes: true},
			Docker:     DockerConfig{Enabled: true},
			GVisor:     DockerConfig{Enabled: true},
			AIO:        AIOConfig{Enabled: true, PoolConfig: aio.PoolConfig{AheadOnDemand: true}},
		},
		Server: ServerConfig{
			ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 60 * time.Second,
			// A request may wait for approval and then run to the policy's
			// ceiling (300 s), so writes need the sum plus a margin. A
			// streamed run (Accept: application/x-ndjson) is not bound by
			// it: each of its writes has its own deadline
			// (api.DefaultStreamWriteTimeout).
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
	if err := c.Events.Validate(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.Policy.validate()...)
	if c.Approval.AutoApprove && c.Mode != "PERMISSIVE" {
		add("approval.auto_approve is allowed only in PERMISSIVE mode")
	}
	errs = append(errs, c.Approval.validateChannels()...)
	positive := map[string]time.Duration{
		"policy.eval_timeout": c.Policy.EvalTimeout, "policy.watch_poll": c.Policy.WatchPoll,
		"limits.default_timeout": c.Limits.DefaultTimeout, "approval.timeout": c.Approval.Timeout,
		"server.read_header_timeout": c.Server.ReadHeaderTimeout, "server.read_timeout": c.Server.ReadTimeout,
		"server.write_timeout": c.Server.WriteTimeout, "server.idle_timeout": c.Server.IdleTimeout,
		"server.shutdown_timeout": c.Server.ShutdownTimeout, "storage.lease": c.Storage.Lease,
	}
	for _, name := range sortedKeys(positive) {
		if positive[name] <= 0 {
			add("%s must be positive", name)
		}
	}
	if c.Sessions.SnapshotRetention < 0 {
		add("sessions.snapshot_retention must not be negative")
	}
	if c.Sessions.PauseIdleAfter < 0 {
		add("sessions.pause_idle_after must not be negative")
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
	switch {
	case c.Storage.Driver != "sqlite" && c.Storage.Driver != "postgres":
		add("storage.driver %q: want sqlite or postgres", c.Storage.Driver)
	case c.Storage.Driver == "postgres" && c.Storage.DSN == "":
		add("storage.dsn is required with storage.driver postgres (or set SANDGATE_STORAGE_DSN)")
	case c.Storage.Driver == "sqlite" && c.Storage.DSN != "":
		add("storage.dsn is set but storage.driver is sqlite (the database lives under data_dir)")
	}
	if u := c.Storage.AdvertiseURL; u != "" {
		if p, err := url.Parse(u); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" || (p.Path != "" && p.Path != "/") {
			add("storage.advertise_url %q: want http(s)://host:port", u)
		}
	}
	// Zero means the executor's default; a negative value is a mistake,
	// not "unlimited".
	sp := c.Executors.Subprocess
	if sp.Enabled && (sp.MemoryMB < 0 || sp.CPUSeconds < 0 || sp.MaxProcs < 0 || sp.MaxOutputKiB < 0 || sp.TmpMB < 0) {
		add("executors.subprocess: memory_mb, cpu_seconds, max_procs, max_output_kib and tmp_mb must not be negative")
	}
	for _, d := range []struct {
		name string
		DockerConfig
	}{{"docker", c.Executors.Docker}, {"gvisor", c.Executors.GVisor}} {
		if d.Enabled && (d.MemoryMB < 0 || d.CPUs < 0 || d.MaxProcs < 0 || d.TmpfsMB < 0 || d.WarmIdle < 0 || d.WarmPerSession < 0) {
			add("executors.%s: memory_mb, cpus, max_procs, tmpfs_mb, warm_per_session and warm_idle must not be negative", d.name)
		}
	}
	if m := c.MCP; m.Enabled && (m.SessionTimeout <= 0 || m.ProgressInterval <= 0) {
		add("mcp: session_timeout and progress_interval must be positive")
	}
	if b := c.Browser; b.Enabled && (b.IdleTTL <= 0 || b.MaxBrowsers <= 0) {
		add("browser: idle_ttl and max_browsers must be positive")
	}
	if e := c.Egress; e.Enabled {
		if e.HandshakeTimeout < 0 || e.MaxTunnelsPerSession < 0 {
			add("egress: handshake_timeout and max_tunnels_per_session must not be negative")
		}
		for i, cr := range e.Credentials {
			if cr.Host == "" || cr.Header == "" || (cr.Value == "") == (cr.ValueEnv == "") {
				add("egress.credentials[%d]: host, header and exactly one of value and value_env are required", i)
			}
		}
		for host, addrs := range e.Hosts {
			for _, a := range addrs {
				if net.ParseIP(a) == nil {
					add("egress.hosts[%s]: %q is not an IP address", host, a)
				}
			}
		}
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
