package subprocess

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/sandgate/sandgate/executors"
)

// Defaults for Config. Each one is finite and non-zero: a zero field in
// Config means "use the default", never "unlimited".
const (
	// DefaultSandboxPATH is the PATH the sandboxed code gets. Interpreters are
	// looked up in it too (not in the gateway's PATH): the gateway's PATH may
	// name directories the sandbox uid cannot enter (a pyenv shim under
	// /root, say), and the code's own `python3` must resolve to the binary
	// the executor checked.
	DefaultSandboxPATH = "/usr/local/bin:/usr/bin:/bin"
	// DefaultLang gives Python and Node UTF-8 standard streams.
	DefaultLang = "C.UTF-8"
	// DefaultShell runs the init step (rlimits, then the interpreter). It
	// only needs a POSIX shell with the ulimit builtin; Debian's dash starts
	// in about half a millisecond.
	DefaultShell = "/bin/sh"
	// DefaultUnshare names util-linux unshare(1), looked up in
	// DefaultToolPATH. It mounts the fresh /proc and drops to the sandbox
	// uid/gid.
	DefaultUnshare = "unshare"
	// DefaultBwrap names bubblewrap, looked up in DefaultToolPATH on the
	// host. Only a gateway that is not root uses it (IsolationUserNS).
	DefaultBwrap = "bwrap"
	// DefaultTmpMB caps each run's private /tmp (a tmpfs, so it counts
	// against memory, not disk).
	DefaultTmpMB = 64
	// DefaultToolPATH is where the init-step tools are looked up.
	DefaultToolPATH = "/usr/bin:/bin:/usr/sbin:/sbin"
	// DefaultSandboxID is the uid and gid the code runs as when the gateway
	// runs as root. It is deliberately not 65534 (nobody): RLIMIT_NPROC
	// counts every process of a uid on the host, so sharing the uid with
	// daemons that run as nobody would let them eat the sandbox's process
	// budget and the other way round. Nothing else on the host should use it.
	DefaultSandboxID = 60000
	// DefaultTimeout applies when Spec.Timeout is zero.
	DefaultTimeout = 30 * time.Second
	// DefaultKillGrace bounds how long Execute waits for the output pipes
	// to close after the process tree was killed or the main process
	// exited (exec.Cmd.WaitDelay). With PID namespaces the kernel closes
	// them at once; in process-group mode a setsid'd grandchild could hold
	// them forever.
	DefaultKillGrace = time.Second
	// DefaultNodeAddressSpaceHeadroomMB is added to the address-space limit
	// for javascript. V8 reserves virtual memory far beyond what it uses: at
	// RLIMIT_AS = 1 GiB Node 20 starts but a 160 MB array already fails. The
	// JS heap itself is bounded by --max-old-space-size=<MemoryMB>, so the
	// headroom buys virtual space, not resident memory. WebAssembly memories
	// (which reserve ~10 GiB each) stay unavailable.
	DefaultNodeAddressSpaceHeadroomMB = 3072
	// DefaultWarmMax bounds the warm interpreters held at once, across all
	// sessions. Each is an idle interpreter under the same rlimits as a run
	// (python3 ~10 MB resident, node ~40 MB).
	DefaultWarmMax = 8
	// DefaultWarmIdleTTL is how long a warm interpreter may wait for its
	// session's next run before it is killed.
	DefaultWarmIdleTTL = 30 * time.Second
)

// DefaultLimits are the limits applied to fields a Spec leaves at zero.
var DefaultLimits = executors.Limits{
	// 1 GiB of address space: enough for python3 and bash to start and do
	// real work, small enough that bytearray(1<<30) fails with MemoryError.
	MemoryMB: 1024,
	// CPU time per process (RLIMIT_CPU). The wall-clock timeout is the
	// real bound; this one stops a busy loop that outlives it somehow.
	CPUSeconds: 30,
	// RLIMIT_NPROC counts threads too, and counts every process of the
	// sandbox uid on the host, so concurrent runs share it: a fork bomb in
	// one run can starve the others until its timeout. Node needs ~11
	// threads.
	MaxProcs: 128,
	// File descriptors per process.
	MaxOpenFiles: 256,
	// Largest single file the code may write (RLIMIT_FSIZE).
	MaxFileSizeMB: 100,
	// Response cap per stream.
	MaxOutputBytes: 1 << 20,
	// Full output kept in the workspace when the response was truncated.
	MaxSpillBytes: 16 << 20,
}

// Config configures the subprocess executor. The zero value is valid: every
// zero field takes the default documented on it.
type Config struct {
	// Interpreters maps a language to the command that runs it: a bare name
	// is looked up in SandboxPATH when New runs; an absolute path is used
	// as is. Defaults: python → python3, bash → bash, javascript → node.
	// Languages missing from the map keep their default.
	Interpreters map[string]string
	// SandboxPATH is the code's PATH and where interpreters are looked up.
	// Default DefaultSandboxPATH.
	SandboxPATH string
	// Lang is the code's LANG. Default DefaultLang.
	Lang string
	// Shell is the absolute path of the POSIX shell used as the init step.
	// Default DefaultShell.
	Shell string
	// Unshare is util-linux unshare(1), as a name looked up in
	// DefaultToolPATH or an absolute path. Only needed for namespace
	// isolation. Default DefaultUnshare.
	Unshare string
	// SandboxUID and SandboxGID are the ids the code runs as when a Spec
	// names none (the gateway passes each session's own uid in Spec.UID), and
	// the ids of the start-up probe. Zero means DefaultSandboxID; running
	// sandboxed code as root is not possible.
	SandboxUID int
	SandboxGID int
	// Bwrap is bubblewrap, as a name looked up in DefaultToolPATH or an
	// absolute path: the launcher of a gateway that is not root
	// (IsolationUserNS). Default DefaultBwrap.
	Bwrap string
	// RootDir is the runtime root filesystem (the export scripts/images.sh
	// makes of the runtime image): its usr, bin, lib* and etc are the
	// system directories every run sees, so the toolchain is the one the
	// docker and aio executors run. Empty: the host's own, read-only, with
	// only the /etc entries a run needs (hostEtc), so the gateway runs
	// with no build step.
	RootDir string
	// TmpMB caps each run's private /tmp. Default DefaultTmpMB.
	TmpMB int
	// Limits are the defaults for fields a Spec leaves at zero. Zero fields
	// here take DefaultLimits.
	Limits executors.Limits
	// DefaultTimeout applies when Spec.Timeout is zero. Default
	// DefaultTimeout.
	DefaultTimeout time.Duration
	// KillGrace is exec.Cmd.WaitDelay. Default DefaultKillGrace.
	KillGrace time.Duration
	// NodeAddressSpaceHeadroomMB is added to the address-space limit for
	// javascript. Default DefaultNodeAddressSpaceHeadroomMB.
	NodeAddressSpaceHeadroomMB int
	// DisableWarm turns warm interpreters off: every run starts cold, and
	// Prewarm does nothing. See "Warm interpreters" in the package
	// documentation for what differs between a warm and a cold run.
	DisableWarm bool
	// DisableZygote keeps Python runs on warm interpreters instead of
	// per-session zygotes (see "Zygotes" in the package documentation).
	// Zygotes need namespace isolation; without it they are off anyway.
	DisableZygote bool
	// WarmMax bounds the warm interpreters held at once, across all
	// sessions; the least recently started one is killed to make room.
	// It bounds the zygotes (one per session) separately.
	// Default DefaultWarmMax.
	WarmMax int
	// WarmIdleTTL is how long a warm interpreter waits for its session's
	// next run before it is killed. Default DefaultWarmIdleTTL.
	WarmIdleTTL time.Duration
	// WarmDir is where the executor makes its own root-owned directory
	// (mode 0711) for the Node.js hand-off preload. Every directory above
	// it must be traversable by the sandbox uids, or javascript runs stay
	// cold. Default os.TempDir().
	WarmDir string
	// ZygotePool sizes the pool of pre-started Python zygotes of no
	// session, which sessions' first runs claim (zygote_pool_idle.go).
	ZygotePool ZygotePoolConfig
	// Logger receives operational messages. Default slog.Default().
	Logger *slog.Logger
}

// withDefaults returns c with every zero field replaced by its default.
func (c Config) withDefaults() Config {
	c.Interpreters = mergeInterpreters(c.Interpreters)
	c.SandboxPATH = orString(c.SandboxPATH, DefaultSandboxPATH)
	c.Lang = orString(c.Lang, DefaultLang)
	c.Shell = orString(c.Shell, DefaultShell)
	c.Unshare = orString(c.Unshare, DefaultUnshare)
	c.Bwrap = orString(c.Bwrap, DefaultBwrap)
	c.TmpMB = orInt(c.TmpMB, DefaultTmpMB)
	c.SandboxUID = orInt(c.SandboxUID, DefaultSandboxID)
	c.SandboxGID = orInt(c.SandboxGID, DefaultSandboxID)
	c.Limits = c.Limits.Or(DefaultLimits)
	c.DefaultTimeout = orDuration(c.DefaultTimeout, DefaultTimeout)
	c.KillGrace = orDuration(c.KillGrace, DefaultKillGrace)
	c.NodeAddressSpaceHeadroomMB = orInt(c.NodeAddressSpaceHeadroomMB, DefaultNodeAddressSpaceHeadroomMB)
	c.WarmMax = orInt(c.WarmMax, DefaultWarmMax)
	c.WarmIdleTTL = orDuration(c.WarmIdleTTL, DefaultWarmIdleTTL)
	c.WarmDir = orString(c.WarmDir, os.TempDir())
	c.ZygotePool = c.ZygotePool.withDefaults()
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports every problem in c (after defaults) at once. Numeric
// fields cannot be invalid: non-positive values take their defaults.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	for lang := range c.Interpreters {
		if _, ok := defaultInterpreters[lang]; !ok {
			errs = append(errs, fmt.Errorf("interpreters: %w: %q", executors.ErrUnsupportedLanguage, lang))
		}
	}
	if c.RootDir != "" && !filepath.IsAbs(c.RootDir) {
		errs = append(errs, fmt.Errorf("root dir %q is not an absolute path", c.RootDir))
	}
	if !filepath.IsAbs(c.WarmDir) {
		errs = append(errs, fmt.Errorf("warm dir %q is not an absolute path", c.WarmDir))
	}
	return errors.Join(errs...)
}

var defaultInterpreters = map[string]string{
	executors.LangPython:     "python3",
	executors.LangBash:       "bash",
	executors.LangJavaScript: "node",
}

func mergeInterpreters(m map[string]string) map[string]string {
	out := make(map[string]string, len(defaultInterpreters))
	for lang, cmd := range defaultInterpreters {
		out[lang] = cmd
	}
	for lang, cmd := range m {
		if cmd != "" {
			out[lang] = cmd
		}
	}
	return out
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
