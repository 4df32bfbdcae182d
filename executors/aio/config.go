package aio

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"regexp"
	"time"

	"github.com/sandgate/sandgate/executors"
)

// Network modes of the local backend.
const (
	// NetworkNone is the default: the container has no network at all and
	// the gateway reaches sandboxd over a Unix socket in a per-instance
	// directory mounted into the container.
	NetworkNone = "none"
	// NetworkBridge runs the image's own entrypoint on Docker's bridge with
	// its port 8080 published on 127.0.0.1 (an ephemeral host port): this
	// is how the real agent-infra/sandbox image (≥ 1.9.3) is served. The
	// sandbox then has a network, so runs whose policy says network=false
	// are refused (executor.capability_missing), never run.
	NetworkBridge = "bridge"
)

// Defaults for PoolConfig. Every one is finite: a zero field means "use
// the default", never "unlimited".
const (
	DefaultImage          = "sandgate/aio:latest"
	DefaultInstance       = "default"
	DefaultStateDir       = "/var/lib/sandgate/aio"
	DefaultMinInstances   = 0
	DefaultMaxInstances   = 8
	DefaultIdleTimeout    = 10 * time.Minute
	DefaultMaxUses        = 1000
	DefaultAcquireTimeout = 30 * time.Second
	DefaultReadyTimeout   = 60 * time.Second
	DefaultMemoryMB       = 2048
	DefaultCPUs           = 1.0
	DefaultPids           = 512
	DefaultTmpfsMB        = 1024
	// DefaultSandboxID is the uid/gid code runs as when a Spec names none
	// (the gateway always names the session's own). It differs from the
	// subprocess (60000) and docker (61000) executors' defaults:
	// RLIMIT_NPROC counts every process and thread of a uid on the host,
	// and a sandbox's Chromium alone has dozens of threads.
	DefaultSandboxID = 62000
	// DefaultTimeout applies to a Spec without a timeout.
	DefaultTimeout = 30 * time.Second
	// DefaultClientMargin is added to a run's hard timeout to make the HTTP
	// client's deadline: the server kills the run at the timeout and needs
	// a moment to answer (aio-api.md §7.3).
	DefaultClientMargin = 5 * time.Second
	// bridgePort is the real image's one public port.
	bridgePort = 8080
)

// DefaultLimits are applied to the fields a Spec leaves at zero. Output
// caps and rlimits are per run. A Spec's MemoryMB and MaxProcs (the
// policy's obligations, always set by the gateway) are enforced per run by
// sandboxd (RLIMIT_AS, and a RLIMIT_NPROC budget that concurrent runs of
// the session share: see cmd/sandboxd/limits.go); left at zero, the
// container's limits (PoolConfig.MemoryMB, Pids), which every run of the
// session shares, are the bound. CPU is the container's (PoolConfig.CPUs).
var DefaultLimits = executors.Limits{
	MaxOpenFiles:   1024,
	MaxFileSizeMB:  100,
	MaxOutputBytes: 1 << 20,
	MaxSpillBytes:  16 << 20,
}

// PoolConfig configures the AIO executor: its pool and its local Docker
// backend. The zero value is valid; every zero field takes the default
// documented on it. YAML names are the gateway's config keys.
type PoolConfig struct {
	// MinInstances are started ahead, unbound, so that a new session does
	// not pay a container start: the first acquire of a session binds one
	// (mounts the session's workspace into it and starts sandboxd as the
	// session's uid). Replenished in the background, as far as
	// MaxInstances allows, once the claiming run has ended (or at the
	// pool's next tick): a container start beside that run would slow it.
	// Default 0.
	MinInstances int `yaml:"min_instances"`
	// AheadOnDemand keeps at least one instance started ahead while
	// sessions arrive (one took an instance within IdleTimeout), on top
	// of MinInstances: a new session's bind then finds one started
	// (issue 34), and a gateway whose aio tier nobody uses keeps no
	// container for it. Its cost is one idle container. Off in the zero
	// value; the gateway's defaults turn it on.
	AheadOnDemand bool `yaml:"ahead_on_demand"`
	// MaxInstances caps the containers of this pool, bound, unbound and
	// being torn down together. Default 8.
	MaxInstances int `yaml:"max_instances"`
	// IdleTimeout destroys an instance no run has used for this long.
	// Default 10m.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// MaxUses recycles an instance after this many acquires: it is
	// destroyed when its last run ends, and the session's next run gets a
	// fresh one. Default 1000.
	MaxUses int `yaml:"max_uses"`
	// AcquireTimeout bounds how long a run waits for a free slot when the
	// pool is full of busy instances; it then fails with pool_exhausted.
	// Default 30s.
	AcquireTimeout time.Duration `yaml:"acquire_timeout"`
	// ReadyTimeout bounds a container start until sandboxd answers.
	// Default 60s.
	ReadyTimeout time.Duration `yaml:"ready_timeout"`

	// Image is the sandbox image: the locally built sandgate/aio (make
	// images) or, with Network bridge, the agent-infra image. Default
	// sandgate/aio:latest.
	Image string `yaml:"image"`
	// Network is none (default) or bridge; see NetworkNone, NetworkBridge.
	Network string `yaml:"network"`
	// Instance scopes container names and the adoption after a restart to
	// this gateway (label sandgate.instance). Default "default".
	Instance string `yaml:"instance"`
	// StateDir holds one directory per instance: its API key, its socket
	// directory and the mount point of its session's workspace. It is made
	// a shared mount (mount propagation is how a workspace reaches an
	// instance started ahead of its session); it must be on a local
	// filesystem and reachable only by root. Default /var/lib/sandgate/aio.
	StateDir string `yaml:"state_dir"`
	// Host is the Docker engine address; default from DOCKER_HOST.
	Host string `yaml:"host"`

	// MemoryMB, CPUs and Pids are each container's cgroup limits.
	// Defaults 2048 MB (Chromium needs room), 1 CPU, 512 processes.
	MemoryMB int     `yaml:"memory_mb"`
	CPUs     float64 `yaml:"cpus"`
	Pids     int     `yaml:"pids"`
	// TmpfsMB sizes the container's private /tmp. Default 1024.
	TmpfsMB int `yaml:"tmpfs_mb"`
	// Limits are the per-run defaults for fields a Spec leaves at zero.
	// Zero fields here take DefaultLimits.
	Limits executors.Limits `yaml:"limits"`
	// SandboxUID and SandboxGID: see DefaultSandboxID.
	SandboxUID int `yaml:"sandbox_uid"`
	SandboxGID int `yaml:"sandbox_gid"`
	// DefaultTimeout applies to a Spec without a timeout. Default 30s.
	DefaultTimeout time.Duration `yaml:"default_timeout"`
	// KeepOnClose leaves the containers running when the executor is
	// closed, for the next gateway process to adopt. Default false:
	// shutdown removes them.
	KeepOnClose bool `yaml:"keep_on_close"`

	// Workspaces resolves a session's workspace, for BrowserCDP on a
	// session that has no instance yet. The gateway passes the workspace
	// package's Ensure. Optional.
	Workspaces func(ctx context.Context, sessionID string) (Workspace, error) `yaml:"-"`
	// Logger receives operational logs; never keys or code.
	Logger *slog.Logger `yaml:"-"`
}

// Workspace is a session's workspace directory and the identity owning it.
type Workspace struct {
	Dir      string
	UID, GID int
	// Root and Home are the session's layout (layout.go): the root its
	// workspace also shows at ("" none), and the HOME of its commands,
	// its workdir ("" is /workspace).
	Root, Home string
}

var instanceRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$`)

// Validate reports every problem of c at once.
func (c PoolConfig) Validate() error {
	var errs []error
	if c.MinInstances < 0 || c.MaxInstances < 0 || c.MaxUses < 0 || c.MemoryMB < 0 || c.Pids < 0 || c.TmpfsMB < 0 || c.CPUs < 0 {
		errs = append(errs, errors.New("counts and limits must not be negative"))
	}
	d := c.withDefaults()
	if d.MinInstances > d.MaxInstances {
		errs = append(errs, fmt.Errorf("min_instances %d exceeds max_instances %d", d.MinInstances, d.MaxInstances))
	}
	if c.IdleTimeout < 0 || c.AcquireTimeout < 0 || c.ReadyTimeout < 0 || c.DefaultTimeout < 0 {
		errs = append(errs, errors.New("durations must not be negative"))
	}
	if d.Network != NetworkNone && d.Network != NetworkBridge {
		errs = append(errs, fmt.Errorf("network %q: want none or bridge", c.Network))
	}
	if !instanceRe.MatchString(d.Instance) {
		errs = append(errs, fmt.Errorf("instance %q must match %s", c.Instance, instanceRe))
	}
	if !filepath.IsAbs(d.StateDir) {
		errs = append(errs, fmt.Errorf("state_dir %q must be absolute", c.StateDir))
	} else if len(d.StateDir) > 60 {
		// <state>/<slot>/run/sandboxd.sock must fit a Unix socket address
		// (108 bytes).
		errs = append(errs, fmt.Errorf("state_dir %q is longer than 60 bytes", c.StateDir))
	}
	if c.SandboxUID < 0 || c.SandboxGID < 0 {
		errs = append(errs, errors.New("sandbox ids must not be negative"))
	}
	return errors.Join(errs...)
}

func (c PoolConfig) withDefaults() PoolConfig {
	if c.MaxInstances == 0 {
		c.MaxInstances = DefaultMaxInstances
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.MaxUses == 0 {
		c.MaxUses = DefaultMaxUses
	}
	if c.AcquireTimeout == 0 {
		c.AcquireTimeout = DefaultAcquireTimeout
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = DefaultReadyTimeout
	}
	if c.Image == "" {
		c.Image = DefaultImage
	}
	if c.Network == "" {
		c.Network = NetworkNone
	}
	if c.Instance == "" {
		c.Instance = DefaultInstance
	}
	if c.StateDir == "" {
		c.StateDir = DefaultStateDir
	}
	c.StateDir = filepath.Clean(c.StateDir)
	if c.MemoryMB == 0 {
		c.MemoryMB = DefaultMemoryMB
	}
	if c.CPUs == 0 {
		c.CPUs = DefaultCPUs
	}
	if c.Pids == 0 {
		c.Pids = DefaultPids
	}
	if c.TmpfsMB == 0 {
		c.TmpfsMB = DefaultTmpfsMB
	}
	c.Limits = c.Limits.Or(DefaultLimits)
	if c.SandboxUID == 0 {
		c.SandboxUID = DefaultSandboxID
	}
	if c.SandboxGID == 0 {
		c.SandboxGID = DefaultSandboxID
	}
	if c.DefaultTimeout == 0 {
		c.DefaultTimeout = DefaultTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}
