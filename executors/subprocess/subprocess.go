package subprocess

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/internal/wsfile"
	"github.com/sandgate/sandgate/executors/process"
)

// Executor runs code as a hardened host subprocess. It is safe for
// concurrent use.
type Executor struct {
	cfg          Config
	prologue     executors.Prologue
	log          *slog.Logger
	interpreters map[string]string // language → absolute path, resolved by New
	missing      map[string]error  // language → why its interpreter is unusable
	unshare      string
	bwrap        string // bubblewrap, in IsolationUserNS
	isolation    Isolation
	noIsolation  error // why no isolation could be set up (IsolationNone)
	// noIsolationReason says it in a few words, for /readyz.
	noIsolationReason string
	dropUID           bool     // run as the sandbox uid/gid (gateway is root)
	sysRoot           string   // Config.RootDir resolved, or "/" for the host's system directories
	rootID            string   // the root filesystem's identity (capabilities)
	rootLock          *os.File // a shared flock on sysRoot, so a rebuild does not remove it under us
	runDir            string   // the executor's own host directory: stage/, probe/
	stage             string   // mount point of the base root while it is built
	base              baseNS   // every run's root starts as a copy of it

	warm     *warmPool    // nil when Config.DisableWarm
	zygotes  *zygotePool  // nil without namespaces, or when disabled
	idle     *idleZygotes // pre-started zygotes of no session (issue 34)
	nodeBoot nodeBoot     // the node preload's directory
	envTool  string       // env(1), for the bash hand-off; "" disables warm bash
	// forwarder: the root has socat, the egress forwarder a run granted
	// network needs without root (egress_linux.go).
	forwarder bool
}

// Interface guards.
var (
	_ executors.Executor        = (*Executor)(nil)
	_ executors.SessionReleaser = (*Executor)(nil)
	_ executors.Closer          = (*Executor)(nil)
)

// New resolves the interpreters and the init-step tools, decides the
// isolation level and checks it by running a probe through the real launch
// path (so a broken host fails here, not on the first request). A missing
// interpreter is not an error here: Available reports it.
func New(ctx context.Context, cfg Config) (*Executor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("subprocess: config: %w", err)
	}
	cfg = cfg.withDefaults()
	e := &Executor{
		cfg:          cfg,
		log:          cfg.Logger.With("executor", string(executors.KindSubprocess)),
		interpreters: map[string]string{},
		missing:      map[string]error{},
		prologue: executors.Prologue{Kind: executors.KindSubprocess, UID: cfg.SandboxUID, GID: cfg.SandboxGID,
			Timeout: cfg.DefaultTimeout, Limits: cfg.Limits},
	}
	if err := e.resolveRoot(); err != nil {
		return nil, fmt.Errorf("subprocess: %w", err)
	}
	for lang, name := range cfg.Interpreters {
		p, err := e.lookPath(name, cfg.SandboxPATH)
		if err != nil {
			e.missing[lang] = err
			continue
		}
		e.interpreters[lang] = p
	}
	if err := e.checkExecutable(cfg.Shell); err != nil {
		return nil, fmt.Errorf("subprocess: init shell: %w", err)
	}
	if err := e.makeRunDir(); err != nil {
		return nil, fmt.Errorf("subprocess: %w", err)
	}
	if fds, first := sealInheritedFDs(); first && len(fds) > 0 {
		e.log.Warn("descriptors the gateway inherited are now close-on-exec, so runs do not inherit them", "fds", fds)
	}
	e.chooseIsolation(ctx)
	if _, err := e.lookPath("socat", DefaultToolPATH); err == nil {
		e.forwarder = true
	}
	if !cfg.DisableWarm {
		e.warm = newWarmPool(e)
		e.nodeBoot.parent = cfg.WarmDir
		if p, err := e.lookPath("env", DefaultToolPATH); err == nil {
			e.envTool = p
		}
		if e.isolation == IsolationNamespaces && !cfg.DisableZygote {
			e.zygotes = newZygotePool(e)
		}
	}
	e.idle = newIdleZygotes(e)
	e.log.Info("subprocess executor ready", "isolation", string(e.isolation), "root", e.rootID,
		"sandbox_uid", e.cfg.SandboxUID, "drop_uid", e.dropUID,
		"warm_max", e.cfg.WarmMax, "warm_disabled", cfg.DisableWarm, "zygotes", e.zygotes != nil)
	return e, nil
}

// Kind implements executors.Executor.
func (e *Executor) Kind() executors.Kind { return executors.KindSubprocess }

// Isolation reports the isolation level in force, for the caller to log and
// show at /readyz.
func (e *Executor) Isolation() Isolation { return e.isolation }

// Available implements executors.Executor: nil when every configured
// interpreter is present. It only stats a few files.
func (e *Executor) Available(context.Context) error {
	if e.isolation == IsolationNone {
		return e.unavailable(e.noIsolationReason, e.noIsolation)
	}
	var errs []error
	for lang, err := range e.missing {
		errs = append(errs, fmt.Errorf("%s: %w", lang, err))
	}
	for lang, p := range e.interpreters {
		if err := e.checkExecutable(p); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", lang, err))
		}
	}
	if len(errs) > 0 {
		return e.unavailable("interpreter missing", errors.Join(errs...))
	}
	return nil
}

func (e *Executor) unavailable(reason string, err error) error {
	return &executors.UnavailableError{Kind: executors.KindSubprocess, Reason: reason, Err: err}
}

// interpreter returns the resolved interpreter for lang.
func (e *Executor) interpreter(lang string) (string, error) {
	if p, ok := e.interpreters[lang]; ok {
		if err := e.checkExecutable(p); err != nil {
			return "", e.unavailable("interpreter missing for "+lang, err)
		}
		return p, nil
	}
	if err, ok := e.missing[lang]; ok {
		return "", e.unavailable("interpreter missing for "+lang, err)
	}
	return "", fmt.Errorf("subprocess: %w: %q", executors.ErrUnsupportedLanguage, lang)
}

// interpreterArgs returns the argv that runs the code file rel.
func (e *Executor) interpreterArgs(lang, interp, rel string, lim executors.Limits) []string {
	switch lang {
	case executors.LangPython:
		// -I: ignore PYTHON* variables and the user site, do not put the
		// script's directory on sys.path. -u: output written before a
		// timeout kill still reaches the response.
		return []string{interp, "-I", "-u", rel}
	case executors.LangBash:
		return []string{interp, "--noprofile", "--norc", rel}
	default:
		return []string{interp, process.NodeHeapArg(lim.MemoryMB), rel}
	}
}

// limitsFor resolves the limits of one run into rlimits.
func (e *Executor) limitsFor(lang string, lim executors.Limits) process.Rlimits {
	asMB := lim.MemoryMB
	if lang == executors.LangJavaScript {
		asMB += e.cfg.NodeAddressSpaceHeadroomMB
	}
	return process.Rlimits{CPUSeconds: lim.CPUSeconds, AddressSpaceBytes: asMB << 20, OpenFiles: lim.MaxOpenFiles,
		Procs: lim.MaxProcs, FileSizeBytes: lim.MaxFileSizeMB << 20}
}

// env is the code's whole environment: nothing of the gateway's, the
// same as every backend's (executors.EnvFor). HOME is the workspace (by
// the layout's name), so tools that write under ~ stay inside the session.
func (e *Executor) env(l executors.Layout) []string {
	return executors.EnvFor(e.cfg.SandboxPATH, e.cfg.Lang, l)
}

// Execute implements executors.Executor.
func (e *Executor) Execute(ctx context.Context, spec executors.Spec) (executors.Result, error) {
	spec, err := e.prologue.Resolve(spec)
	if err != nil {
		return executors.Result{}, err
	}
	interp, err := e.interpreter(spec.Language)
	if err != nil {
		return executors.Result{}, err
	}
	if e.isolation == IsolationNone {
		return executors.Result{}, e.unavailable(e.noIsolationReason, e.noIsolation)
	}
	if err := executors.CheckEgress(executors.KindSubprocess, e.Capabilities(), spec); err != nil {
		return executors.Result{}, err
	}
	id, dir, lim := spec.RequestID, spec.WorkspaceDir, spec.Limits
	ws, err := e.openWorkspace(dir, spec.UID, spec.GID)
	if err != nil {
		return executors.Result{}, err
	}
	defer ws.Close()

	codeHost, rel, err := e.writeCodeFile(dir, id, spec.Language, spec.Code)
	if err != nil {
		return executors.Result{}, fmt.Errorf("subprocess: %w", err)
	}
	defer func() {
		if err := os.Remove(codeHost); err != nil && !errors.Is(err, os.ErrNotExist) {
			e.log.Warn("remove code file", "request_id", id, "err", err)
		}
	}()

	l := launch{
		argv:   e.interpreterArgs(spec.Language, interp, rel, lim),
		limits: e.limitsFor(spec.Language, lim),
		dir:    dir,
		env:    e.env(spec.Layout),
		uid:    spec.UID,
		gid:    spec.GID,
		root:   e.rootFor(dir, spec.Layout),
	}
	if err := e.grantNetwork(spec, &l); err != nil {
		return executors.Result{}, err
	}
	timeout := spec.Timeout
	newOut := func() *output { return e.newOutput(ws, spec) }
	var (
		res    executors.Result
		served bool
	)
	if spec.SessionID != "" && e.useZygote(spec.Language) {
		res, served, err = e.runZygote(ctx, spec.SessionID, interp, ws, l, lim, rel, newOut, timeout)
	} else if e.warm != nil && spec.SessionID != "" {
		next, werr := e.warmSpecFor(spec.Language, interp, ws, l, lim)
		if werr != nil {
			e.log.Warn("warm interpreter: cannot describe run", "session_id", spec.SessionID, "error", werr.Error())
			next = nil
		}
		w := e.warm.begin(ctx, spec.SessionID)
		// The session's next interpreter starts once this run is over, so
		// the two never compete for the session's process budget.
		defer func() { e.warm.end(spec.SessionID, next) }()
		if w != nil {
			res, served, err = e.runWarm(ctx, w, next, rel, newOut, timeout)
		} else {
			e.warm.count(false, false, false)
		}
	}
	if !served {
		out := newOut()
		defer out.finish() // idempotent; closes the spill file on early returns
		res, err = e.run(ctx, l, out, timeout)
	}
	if res.Truncated && res.OutputPath == "" {
		e.log.Warn("output truncated and not spilled", "request_id", id)
	}
	e.log.DebugContext(ctx, "run finished", "request_id", id, "session_id", spec.SessionID,
		"language", spec.Language, "warm", served, "exit_code", res.ExitCode, "timed_out", res.TimedOut,
		"truncated", res.Truncated, "duration_ms", res.Duration.Milliseconds())
	return res, err
}

// openWorkspace hands the workspace directory itself to the sandbox uid
// and opens it as an os.Root for every gateway-side access. dir is
// absolute and clean (the prologue checked it).
func (e *Executor) openWorkspace(dir string, uid, gid int) (*os.Root, error) {
	if e.dropUID {
		if err := wsfile.GiveDir(dir, uid, gid); err != nil {
			return nil, fmt.Errorf("subprocess: %w", err)
		}
		if err := checkAncestors(dir, uid, gid); err != nil {
			return nil, fmt.Errorf("subprocess: %w", err)
		}
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("subprocess: open workspace: %w", err)
	}
	return root, nil
}

// errTimedOut is the cause of a run's context when Spec.Timeout expired.
var errTimedOut = errors.New("run timed out")

// run starts the launch cold and waits for it, killing the whole tree at
// the timeout or when ctx is done. A parent ctx that ends first is
// returned as an error (the client went away); the timeout is a Result.
func (e *Executor) run(ctx context.Context, l launch, out *output, timeout time.Duration) (executors.Result, error) {
	runCtx, cancel := context.WithTimeoutCause(ctx, timeout, errTimedOut)
	defer cancel()
	stopBridge, err := e.openBridge(ctx, &l)
	if err != nil {
		return executors.Result{}, err
	}
	defer stopBridge()
	cmd := e.command(l)
	cmd.Stdout, cmd.Stderr = out.Stdout(), out.Stderr()
	// WaitDelay bounds the wait for pipes a surviving grandchild could
	// hold (process-group mode only).
	cmd.WaitDelay = e.cfg.KillGrace
	began := time.Now()
	p, err := e.startLaunch(cmd, l)
	if err != nil {
		return executors.Result{}, fmt.Errorf("subprocess: start: %w", err)
	}
	return e.await(ctx, runCtx, p, out, began)
}
