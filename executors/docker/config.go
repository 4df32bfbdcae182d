package docker

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/sandgate/sandgate/executors"
)

// Defaults for Config. Each one is finite and non-zero: a zero field in
// Config means "use the default", never "unlimited".
const (
	// DefaultImage is the runtime image `make images` builds (python3, bash
	// and node from Debian) under a moving tag that points at the build of
	// the current recipe.
	DefaultImage = "sandgate/runtime:latest"
	// DefaultInstance names this gateway's containers (label
	// sandgate.instance). New reaps leftovers carrying the same instance
	// only, so gateways sharing one engine must each have their own.
	DefaultInstance = "default"
	// DefaultSandboxID is the uid and gid of a run whose Spec names none.
	// The gateway always passes the session's own uid; this is for callers
	// without a workspace identity (tests, tools). Containers share the
	// host's uid space (no user namespace), so it is deliberately not the
	// subprocess executor's default (60000): RLIMIT_NPROC and process
	// accounting are per host uid, and container processes would eat that
	// executor's process budget.
	DefaultSandboxID = 61000
	// DefaultTimeout applies when Spec.Timeout is zero.
	DefaultTimeout = 30 * time.Second
	// DefaultCPUs is the CPU quota of one container, in CPUs.
	DefaultCPUs = 1.0
	// DefaultTmpfsMB caps the tmpfs at /tmp. It is charged to the
	// container's memory limit too.
	DefaultTmpfsMB = 64
	// DefaultWarmMax bounds the warm containers alive at once, across all
	// sessions. An idle one costs ~16 MiB under runc and ~76 MiB RSS
	// under gVisor (see the package doc, "Warm starts").
	DefaultWarmMax = 8
	// DefaultWarmPerSession bounds the warm containers one session holds
	// when its runs come back to back (a session pausing between runs
	// holds one). A gVisor start costs about five warm runs (~400 vs
	// ~70 ms, quiet 2-core VM): with 2, the third run of a burst already
	// waits for a start (5-run bursts measured 0.40x the runsc CLI at
	// p50); with 3, bursts of three are served warm throughout.
	DefaultWarmPerSession = 3
	// DefaultWarmAfter: see Config.WarmAfter.
	DefaultWarmAfter = 2
	// DefaultWarmIdle is how long a warm container waits for its session's
	// next run before it is removed.
	DefaultWarmIdle = 2 * time.Minute
	// DefaultEngineTimeout bounds each engine call that is not a run itself
	// (create, start, kill, remove, ping): an engine that stops answering
	// makes requests fail with executor_unavailable instead of hanging.
	DefaultEngineTimeout = 30 * time.Second
	// DefaultPingTimeout bounds Available's ping.
	DefaultPingTimeout = 2 * time.Second
	// DefaultKillGrace is how long a run waits for its output stream to end
	// after the container was killed before it gives up on the stream.
	DefaultKillGrace = 5 * time.Second
)

// DefaultLimits are the limits applied to fields a Spec leaves at zero.
var DefaultLimits = executors.Limits{
	// Memory cgroup limit (and memory+swap, so no swap is used).
	MemoryMB: 512,
	// RLIMIT_CPU of each process in the container. The wall-clock timeout
	// and the CPU quota (Config.CPUs) are the real bounds.
	CPUSeconds: 60,
	// pids cgroup limit: threads count too (Node needs ~11).
	MaxProcs: 128,
	// RLIMIT_NOFILE.
	MaxOpenFiles: 256,
	// RLIMIT_FSIZE: the largest single file the code may write.
	MaxFileSizeMB: 100,
	// Response cap per stream.
	MaxOutputBytes: 1 << 20,
	// Full output kept in the workspace when the response was truncated.
	MaxSpillBytes: 16 << 20,
}

// Config configures the Docker executor. The zero value is valid: every zero
// field takes the default documented on it.
type Config struct {
	// Host is the engine's address (unix:///var/run/docker.sock,
	// tcp://...). Default: DOCKER_HOST from the environment, else the
	// local socket. The API version is negotiated with the engine.
	Host string
	// Images maps a language to its image. Languages missing from the map
	// use DefaultImage. Runs of languages that share an image can share a
	// session's warm container.
	Images map[string]string
	// Instance is the value of the sandgate.instance label on every
	// container this executor creates; New reaps leftovers of the same
	// instance (from a crash) and nothing else. Gateways sharing an engine
	// need distinct instances. Default DefaultInstance.
	Instance string
	// Labels are extra labels put on every container. Keys under
	// "sandgate." are reserved and rejected.
	Labels map[string]string
	// SandboxUID and SandboxGID are the ids a run uses when its Spec names
	// none. Zero means DefaultSandboxID; uid or gid 0 is never used.
	SandboxUID int
	SandboxGID int
	// Limits are the defaults for fields a Spec leaves at zero. Zero fields
	// here take DefaultLimits.
	Limits executors.Limits
	// CPUs is each container's CPU quota in CPUs (NanoCPUs). Default
	// DefaultCPUs.
	CPUs float64
	// TmpfsMB caps the tmpfs mounted at /tmp. Default DefaultTmpfsMB.
	TmpfsMB int
	// DefaultTimeout applies when Spec.Timeout is zero. Default
	// DefaultTimeout.
	DefaultTimeout time.Duration
	// WarmMax bounds the warm containers alive at once, across sessions.
	// Zero means DefaultWarmMax; a negative value disables warm starts.
	WarmMax int
	// WarmPerSession bounds the warm containers one session holds. A
	// session holds as many as its recent pace needs: one when it pauses
	// between runs longer than a container takes to start, more (up to
	// this) when its runs come back to back. Default
	// DefaultWarmPerSession.
	WarmPerSession int
	// WarmAfter is how many runs a session must have had before a
	// container is prepared for its next one. Default 2: a one-off session
	// never pays for a second container start, which would compete with
	// the next session's run for the engine. 1 prepares after every run.
	WarmAfter int
	// WarmIdle is how long a warm container waits for its session's next
	// run before it is removed. Default DefaultWarmIdle.
	WarmIdle time.Duration
	// EngineTimeout bounds each engine call outside the run itself.
	// Default DefaultEngineTimeout.
	EngineTimeout time.Duration
	// PingTimeout bounds Available's ping. Default DefaultPingTimeout.
	PingTimeout time.Duration
	// KillGrace bounds the wait for the output stream after a kill.
	// Default DefaultKillGrace.
	KillGrace time.Duration
	// Runtime is the OCI runtime of the containers (HostConfig.Runtime),
	// runsc for gVisor say. Default: the engine's default (runc). When set,
	// Available also requires the engine to list it among its runtimes,
	// so an engine without it makes the executor unavailable instead of
	// failing each run (or, worse, running it under another runtime).
	Runtime string
	// OwnKernel says Runtime runs the code on a kernel of its own (gVisor's
	// sentry), not the host's. The pids cgroup then counts the runtime's
	// host tasks, not the code's: about 28 at rest and two more per task
	// of the code (runsc, systrap platform, measured), so a pids limit of
	// MaxProcs would kill the sandbox itself after a dozen processes.
	// The process limit is then RLIMIT_NPROC, which that kernel counts
	// for this run alone (the run is the only user of its uid there,
	// unlike on the host) and which counts threads too, as the pids
	// cgroup does; the pids cgroup stays as a backstop sized for the
	// runtime (ownKernelHostPids). Set by executors/gvisor.
	OwnKernel bool
	// EgressDir is the host directory under which the executor makes the
	// per-container directories of runs granted network (the proxy's
	// socket and CA bundle, bind-mounted into the container at
	// executors.EgressDir). It must be on the engine's host. Default
	// os.TempDir().
	EgressDir string
	// SnapshotDir is where paused sessions' checkpoint images are kept
	// (checkpoint.go), under a directory per kind and instance, so that
	// an executor started again with the same instance finds them. It
	// must outlive the process: the gateway puts it in its data
	// directory, since a temporary directory is private to a service
	// unit (systemd's PrivateTmp) and emptied at boot. Default
	// os.TempDir()/sandgate-snapshots.
	SnapshotDir string
	// Kind is the executor's name: what Kind returns, what the policy
	// routes to, and the sandgate.executor label, which scopes the orphan
	// reaper, so executors of different kinds sharing an engine and an
	// Instance never reap each other's containers. Default
	// executors.KindDocker; executors/gvisor sets executors.KindGVisor
	// along with Runtime.
	Kind executors.Kind
	// Pool sizes the pool of pre-started sandboxes that belong to no
	// session until a run claims one (pool.go).
	Pool PoolConfig
	// Logger receives operational messages. Default slog.Default().
	Logger *slog.Logger
}

// languages are the languages the executor knows, in a stable order.
var languages = []string{executors.LangPython, executors.LangBash, executors.LangJavaScript}

// withDefaults returns c with every zero field replaced by its default.
func (c Config) withDefaults() Config {
	images := make(map[string]string, len(languages))
	for _, lang := range languages {
		images[lang] = orString(c.Images[lang], DefaultImage)
	}
	c.Images = images
	c.Instance = orString(c.Instance, DefaultInstance)
	c.Kind = executors.Kind(orString(string(c.Kind), string(executors.KindDocker)))
	c.SandboxUID = orInt(c.SandboxUID, DefaultSandboxID)
	c.SandboxGID = orInt(c.SandboxGID, DefaultSandboxID)
	c.Limits = c.Limits.Or(DefaultLimits)
	if c.CPUs <= 0 {
		c.CPUs = DefaultCPUs
	}
	c.TmpfsMB = orInt(c.TmpfsMB, DefaultTmpfsMB)
	c.DefaultTimeout = orDuration(c.DefaultTimeout, DefaultTimeout)
	if c.WarmMax == 0 {
		c.WarmMax = DefaultWarmMax
	}
	c.WarmPerSession = orInt(c.WarmPerSession, DefaultWarmPerSession)
	c.WarmIdle = orDuration(c.WarmIdle, DefaultWarmIdle)
	c.WarmAfter = orInt(c.WarmAfter, DefaultWarmAfter)
	c.EngineTimeout = orDuration(c.EngineTimeout, DefaultEngineTimeout)
	c.PingTimeout = orDuration(c.PingTimeout, DefaultPingTimeout)
	c.KillGrace = orDuration(c.KillGrace, DefaultKillGrace)
	c.EgressDir = orString(c.EgressDir, os.TempDir())
	c.SnapshotDir = orString(c.SnapshotDir, filepath.Join(os.TempDir(), "sandgate-snapshots"))
	c.Pool = c.Pool.withDefaults(c.OwnKernel)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// labelValue limits what the instance label may hold, so it can be used
// in an engine filter as is.
var labelValue = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// Validate reports every problem in c (after defaults) at once.
func (c Config) Validate() error {
	var errs []error
	for lang := range c.Images {
		if !knownLanguage(lang) {
			errs = append(errs, fmt.Errorf("images: %w: %q", executors.ErrUnsupportedLanguage, lang))
		}
	}
	for k := range c.Labels {
		if strings.HasPrefix(k, labelPrefix) || k == "" {
			errs = append(errs, fmt.Errorf("labels: key %q is reserved", k))
		}
	}
	d := c.withDefaults()
	if !labelValue.MatchString(d.Instance) {
		errs = append(errs, fmt.Errorf("instance: %q must match %s", d.Instance, labelValue))
	}
	if !labelValue.MatchString(string(d.Kind)) {
		errs = append(errs, fmt.Errorf("kind: %q must match %s", d.Kind, labelValue))
	}
	if d.SandboxUID < 0 || d.SandboxGID < 0 {
		errs = append(errs, errors.New("sandbox uid/gid must not be negative"))
	}
	return errors.Join(errs...)
}

func knownLanguage(lang string) bool {
	for _, l := range languages {
		if l == lang {
			return true
		}
	}
	return false
}

func orString(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func orInt(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

func orDuration(v, def time.Duration) time.Duration {
	if v <= 0 {
		return def
	}
	return v
}
