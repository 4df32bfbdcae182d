package policy

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/metrics"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// DefaultEvalTimeout bounds one evaluation. A prepared decision takes tens of
// microseconds; a policy that needs half a second is broken, and the request
// is denied rather than held. The bound is wall-clock, so it leaves room for
// a CPU-starved host (100 ms was hit under a load average of 10 on 2 cores).
const DefaultEvalTimeout = 500 * time.Millisecond

// Options configure an Engine.
type Options struct {
	// Dir is a policy directory on disk. When set, it is loaded instead of
	// the embedded default, and Watch reloads it on change.
	Dir string
	// FS overrides the policy tree (tests). Ignored when Dir is set.
	FS fs.FS
	// EvalTimeout bounds each evaluation; zero means DefaultEvalTimeout.
	EvalTimeout time.Duration
	Logger      *slog.Logger

	// Source is where the policy comes from: SourceFolder (or empty, the
	// default: Dir, FS or the embedded tree, as before) or SourceBundle
	// (OPA bundle services; Dir and FS are then ignored).
	Source string
	// OPAConfig is OPA's own configuration document, JSON or YAML, as
	// `opa run --config-file` reads it: services, keys, bundles (with
	// signing, polling, persist), decision_logs, status, labels. Empty
	// with SourceFolder means no OPA plugin runs, which is the default
	// behaviour. With SourceFolder it may configure decision_logs and
	// status but not bundles; SourceBundle requires bundles.
	OPAConfig []byte
	// PersistDir is OPA's persistence_directory: where a bundle with
	// `persist: true` is kept, so a restart with the bundle server down
	// starts on the last activated bundle. Empty: OPAConfig's
	// persistence_directory, else OPA's default (.opa in the working
	// directory).
	PersistDir string
	// InstanceID is OPA's instance id: labels.id in status reports and
	// decision logs. Empty: a random one per process.
	InstanceID string

	// ShadowDir is a candidate policy folder (or bundle file, .tar.gz,
	// loaded without signature verification, as a folder on the same disk
	// is) evaluated beside the active policy on every decision and never
	// enforced; ShadowStatus counts and lists where it disagrees. It is
	// loaded once, at New (restart or a new Engine to change it).
	// ShadowFS is the same for tests, ignored when ShadowDir is set.
	ShadowDir string
	ShadowFS  fs.FS
	// ShadowOPAConfig makes the candidate an OPA bundle instead: OPA's
	// configuration (services, keys, bundles with signing, polling and
	// persist; a bundle's resource may be a file:// URL) for the bundle
	// plugin of a plugin manager of its own, which keeps it current as
	// the active bundle source does. A candidate bundle that fails
	// verification or compilation is refused, the last good candidate (or
	// none) stays, and ShadowStatus shows the refusal. Decision logs and
	// status are the active policy's: the section is refused here.
	ShadowOPAConfig []byte
}

// Status is what GET /v1/policy shows.
type Status struct {
	Revision string    `json:"revision"`
	Source   string    `json:"source"`
	Files    []string  `json:"files"`
	LoadedAt time.Time `json:"loaded_at"`
	// LastError is the error of the most recent failed reload, kept until a
	// reload succeeds, so an administrator sees why an edit is not in force.
	LastError    string    `json:"last_error,omitempty"`
	LastErrorAt  time.Time `json:"last_error_at,omitzero"`
	Reloads      uint64    `json:"reloads"`
	ReloadErrors uint64    `json:"reload_errors"`
	// Bundles is OPA's report of every configured bundle (source bundle):
	// the active revision, the last request, download and activation, and
	// the error of the last refused bundle (code bundle_error), as OPA's
	// status API shows them.
	Bundles map[string]BundleStatus `json:"bundles,omitempty"`
	// Plugins is the state of each OPA plugin that runs (bundle,
	// decision_logs, status, discovery): OK, NOT_READY, WARN or ERROR.
	Plugins map[string]string `json:"plugins,omitempty"`
	// DecisionLogs counts decisions handed to OPA's decision-log plugin
	// and those it could not take; absent when decision logs are off.
	DecisionLogs *DecisionLogStats `json:"decision_logs,omitempty"`
}

// Engine holds the prepared policy. Decide is safe for concurrent use;
// reloads swap the prepared query atomically, so in-flight evaluations finish
// on the revision they started with.
type Engine struct {
	fsys        fs.FS
	source      string
	sourceKind  string      // SourceFolder or SourceBundle
	opa         *opaRuntime // nil when OPAConfig is empty
	shadow      *shadow     // nil without a candidate policy
	dir         string      // set only for a disk directory, the one thing Watch can watch
	evalTimeout time.Duration
	log         *slog.Logger
	schemas     *ast.SchemaSet

	cur       atomic.Pointer[compiled]
	executors executorsValue // input.executors, converted once per map
	grantQ    grantQuery     // data.sandgate.exec.grant, prepared per revision (grants.go)

	mu           sync.Mutex // serialises reloads and guards the fields below
	onReload     []func(revision string)
	lastErr      error
	lastErrAt    time.Time
	lastFailRev  string
	reloads      uint64
	reloadErrors uint64
}

// New loads and prepares the policy. A policy that does not load is an error
// here: refusing to start is the visible, fail-closed choice.
func New(ctx context.Context, opts Options) (*Engine, error) {
	e := &Engine{evalTimeout: opts.EvalTimeout, log: opts.Logger, sourceKind: SourceFolder}
	switch {
	case opts.Source == SourceBundle:
		e.sourceKind, e.source = SourceBundle, "bundle"
	case opts.Source != "" && opts.Source != SourceFolder:
		return nil, fmt.Errorf("%w: unknown policy source %q", ErrConfig, opts.Source)
	case opts.Dir != "":
		if _, err := os.Stat(opts.Dir); err != nil {
			return nil, fmt.Errorf("policy dir: %w", err)
		}
		e.fsys, e.source, e.dir = os.DirFS(opts.Dir), opts.Dir, opts.Dir
	case opts.FS != nil:
		e.fsys, e.source = opts.FS, "fs"
	default:
		e.fsys, e.source = DefaultFS(), "embedded"
	}
	if e.evalTimeout <= 0 {
		e.evalTimeout = DefaultEvalTimeout
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	var err error
	if e.schemas, err = loadSchemas(); err != nil {
		return nil, fmt.Errorf("policy schemas: %w", err)
	}
	if opts.ShadowDir != "" || opts.ShadowFS != nil || len(opts.ShadowOPAConfig) > 0 {
		if err := e.loadShadow(ctx, opts); err != nil {
			return nil, err
		}
	}
	if e.sourceKind == SourceBundle {
		// No revision is in force until a bundle activates (a persisted
		// one activates inside startOPA): until then every decision is a
		// deny (policy.not_loaded) and Status has no revision, so /readyz
		// says not ready.
		if err := e.startOPA(ctx, opts); err != nil {
			return nil, err
		}
		return e, nil
	}
	c, err := compileTree(ctx, e.fsys, e.schemas)
	if err != nil {
		return nil, err
	}
	e.cur.Store(c)
	if len(opts.OPAConfig) > 0 {
		if err := e.startOPA(ctx, opts); err != nil {
			return nil, err
		}
		if err := e.opa.mirror(ctx, c, e.schemas); err != nil {
			e.opa.stop(ctx)
			return nil, err
		}
	}
	return e, nil
}

// Close stops OPA's plugins, if any run: decision logs still buffered and
// the last status report are uploaded first, within ctx (or ten seconds
// when ctx has no deadline). The engine still decides afterwards, without
// logging. Close is for shutdown, after the last request.
func (e *Engine) Close(ctx context.Context) error {
	if e.opa != nil {
		e.opa.stop(ctx)
	}
	if s := e.shadow; s != nil && s.opa != nil {
		s.opa.stop(ctx)
	}
	return nil
}

// Reload re-reads and re-prepares the policy tree. On failure the last good
// revision stays in force and the error is kept for Status.
func (e *Engine) Reload(ctx context.Context) (Status, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.reloadLocked(ctx)
}

func (e *Engine) reloadLocked(ctx context.Context) (Status, error) {
	if e.sourceKind == SourceBundle {
		return e.statusLocked(), ErrBundleReload
	}
	c, err := compileTree(ctx, e.fsys, e.schemas)
	if err == nil && e.opa != nil {
		err = e.opa.mirror(ctx, c, e.schemas)
	}
	if err != nil {
		e.reloadErrors++
		e.lastErr, e.lastErrAt = err, time.Now()
		e.log.Error("policy reload rejected; last good revision stays in force",
			"revision", e.revisionLocked(), "err", err)
		return e.statusLocked(), err
	}
	e.swapLocked(c)
	e.lastFailRev = ""
	return e.statusLocked(), nil
}

// ErrBundleReload is Reload's answer when the policy comes from bundles:
// OPA's bundle plugin polls the server, and a reload on demand would race
// it.
var ErrBundleReload = errors.New("policy: the policy comes from bundles; the bundle plugin polls for new revisions")

// swapLocked puts c in force and tells the OnReload listeners when the
// revision changed.
func (e *Engine) swapLocked(c *compiled) {
	prev := e.cur.Swap(c)
	e.reloads++
	e.lastErr, e.lastErrAt = nil, time.Time{}
	prevRev := ""
	if prev != nil {
		prevRev = prev.revision
	}
	if prevRev != c.revision {
		e.log.Info("policy reloaded", "revision", c.revision, "previous", prevRev, "files", len(c.files))
		for _, fn := range e.onReload {
			fn(c.revision)
		}
	}
}

// revisionLocked is the revision in force, "" before the first.
func (e *Engine) revisionLocked() string {
	if c := e.cur.Load(); c != nil {
		return c.revision
	}
	return ""
}

// OnReload registers fn to be called after every reload that changes the
// revision in force (through Reload or Watch), with the new revision. The
// egress proxy uses it to re-decide its open tunnels: a policy edit that
// forbids a host must close what is already open, not only refuse what
// comes next. fn runs with reloads serialised and must not call Reload.
func (e *Engine) OnReload(fn func(revision string)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.onReload = append(e.onReload, fn)
}

// Status reports the revision in force and the last reload error.
func (e *Engine) Status() Status {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.statusLocked()
}

func (e *Engine) statusLocked() Status {
	s := Status{Source: e.source, LastErrorAt: e.lastErrAt, Reloads: e.reloads, ReloadErrors: e.reloadErrors}
	if c := e.cur.Load(); c != nil {
		s.Revision, s.Files, s.LoadedAt = c.revision, append([]string(nil), c.files...), c.loadedAt
	}
	if e.lastErr != nil {
		s.LastError = e.lastErr.Error()
	}
	if e.opa != nil {
		s.Bundles = e.opa.bundleStatuses()
		s.Plugins = e.opa.pluginStates()
		if e.opa.logger != nil {
			st := e.opa.logger.stats()
			s.DecisionLogs = &st
		}
	}
	return s
}

// Revision is the content hash of the policy in force, "" while a bundle
// source has activated none.
func (e *Engine) Revision() string {
	if c := e.cur.Load(); c != nil {
		return c.revision
	}
	return ""
}

// Decide evaluates the decision for in. It never returns an error: every
// failure is a deny with a reason code naming it (fail closed). Every
// decision has a fresh DecisionID, and goes to the decision log when one
// is configured.
func (e *Engine) Decide(ctx context.Context, in Input) Decision {
	c := e.cur.Load()
	input, d := e.decide(ctx, c, in)
	d.DecisionID = newDecisionID()
	e.shadowExec(ctx, input, d)
	e.logDecision(logEvent{id: d.DecisionID, path: execLogPath, inputAST: input, result: d, c: c})
	return d
}

func (e *Engine) decide(ctx context.Context, c *compiled, in Input) (ast.Value, Decision) {
	if c == nil {
		return nil, deny("", ReasonNotLoaded, "no policy is loaded")
	}
	input, err := in.value(&e.executors)
	if err != nil {
		e.log.Error("policy input", "err", err)
		return nil, deny(c.revision, ReasonEvalError, "policy evaluation failed")
	}
	return input, e.decideValue(ctx, c, input)
}

// decideValue evaluates c's exec decision for an input already in OPA's
// form (the shadow policy reuses the active policy's).
func (e *Engine) decideValue(ctx context.Context, c *compiled, input ast.Value) Decision {
	v, failed := e.eval(ctx, c, c.exec, rego.EvalParsedInput(input))
	if failed != nil {
		return *failed
	}
	d, err := parseDecision(v)
	if err != nil {
		e.log.Error("policy decision rejected", "revision", c.revision, "err", err)
		return deny(c.revision, ReasonInvalidDecision, "the policy produced an invalid decision")
	}
	d.PolicyRevision = c.revision
	return d
}

// noMetrics is OPA's no-op metrics, shared by every evaluation.
var noMetrics = metrics.NoOp()

// eval runs one prepared query under the evaluation bound. It returns the
// value, or the fail-closed deny that replaces it.
func (e *Engine) eval(ctx context.Context, c *compiled, pq rego.PreparedEvalQuery, input rego.EvalOption) (any, *Decision) {
	// OPA checks for cancellation only now and then, so a request that is
	// already gone is denied here rather than evaluated.
	if err := ctx.Err(); err != nil {
		d := deny(c.revision, ReasonTimeout, "the request ended before the policy was evaluated")
		return nil, &d
	}
	// The bound and the request's end cancel the evaluation through a
	// timer and an AfterFunc on ctx, which start nothing unless they fire:
	// given a context to watch, OPA would start a goroutine per evaluation
	// (and a deadline context, a timer of its own).
	cancel := topdown.NewCancel()
	var timedOut atomic.Bool
	timer := time.AfterFunc(e.evalTimeout, func() {
		timedOut.Store(true)
		cancel.Cancel()
	})
	stop := context.AfterFunc(ctx, cancel.Cancel)
	// OPA's metrics (timers per evaluation) are read by nobody here, and a
	// fresh set per evaluation is a few dozen allocations.
	rs, err := pq.Eval(ctx, input, rego.EvalMetrics(noMetrics), rego.EvalExternalCancel(cancel))
	timer.Stop()
	stop()
	if err != nil {
		if timedOut.Load() || errors.Is(ctx.Err(), context.DeadlineExceeded) {
			e.log.Error("policy evaluation timed out", "revision", c.revision, "timeout", e.evalTimeout)
			d := deny(c.revision, ReasonTimeout, "policy evaluation timed out")
			return nil, &d
		}
		e.log.Error("policy evaluation failed", "revision", c.revision, "err", err)
		d := deny(c.revision, ReasonEvalError, "policy evaluation failed")
		return nil, &d
	}
	if len(rs) == 0 || len(rs[0].Expressions) == 0 {
		d := deny(c.revision, ReasonUndefined, "the policy produced no decision")
		return nil, &d
	}
	return rs[0].Expressions[0].Value, nil
}
