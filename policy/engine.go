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
	"github.com/open-policy-agent/opa/v1/rego"
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
}

// Engine holds the prepared policy. Decide is safe for concurrent use;
// reloads swap the prepared query atomically, so in-flight evaluations finish
// on the revision they started with.
type Engine struct {
	fsys        fs.FS
	source      string
	dir         string // set only for a disk directory, the one thing Watch can watch
	evalTimeout time.Duration
	log         *slog.Logger
	schemas     *ast.SchemaSet

	cur       atomic.Pointer[compiled]
	executors executorsValue // input.executors, converted once per map

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
	e := &Engine{evalTimeout: opts.EvalTimeout, log: opts.Logger}
	switch {
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
	c, err := compileTree(ctx, e.fsys, e.schemas)
	if err != nil {
		return nil, err
	}
	e.cur.Store(c)
	return e, nil
}

// Reload re-reads and re-prepares the policy tree. On failure the last good
// revision stays in force and the error is kept for Status.
func (e *Engine) Reload(ctx context.Context) (Status, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.reloadLocked(ctx)
}

func (e *Engine) reloadLocked(ctx context.Context) (Status, error) {
	c, err := compileTree(ctx, e.fsys, e.schemas)
	if err != nil {
		e.reloadErrors++
		e.lastErr, e.lastErrAt = err, time.Now()
		e.log.Error("policy reload rejected; last good revision stays in force",
			"revision", e.cur.Load().revision, "err", err)
		return e.statusLocked(), err
	}
	prev := e.cur.Swap(c)
	e.reloads++
	e.lastErr, e.lastErrAt, e.lastFailRev = nil, time.Time{}, ""
	if prev.revision != c.revision {
		e.log.Info("policy reloaded", "revision", c.revision, "previous", prev.revision, "files", len(c.files))
		for _, fn := range e.onReload {
			fn(c.revision)
		}
	}
	return e.statusLocked(), nil
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
	c := e.cur.Load()
	s := Status{
		Revision: c.revision, Source: e.source, Files: append([]string(nil), c.files...),
		LoadedAt: c.loadedAt, LastErrorAt: e.lastErrAt, Reloads: e.reloads, ReloadErrors: e.reloadErrors,
	}
	if e.lastErr != nil {
		s.LastError = e.lastErr.Error()
	}
	return s
}

// Revision is the content hash of the policy in force.
func (e *Engine) Revision() string { return e.cur.Load().revision }

// Decide evaluates the decision for in. It never returns an error: every
// failure is a deny with a reason code naming it (fail closed).
func (e *Engine) Decide(ctx context.Context, in Input) Decision {
	c := e.cur.Load()
	if c == nil {
		return deny("", ReasonNotLoaded, "no policy is loaded")
	}
	input, err := in.value(&e.executors)
	if err != nil {
		e.log.Error("policy input", "err", err)
		return deny(c.revision, ReasonEvalError, "policy evaluation failed")
	}
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

// eval runs one prepared query under the evaluation bound. It returns the
// value, or the fail-closed deny that replaces it.
func (e *Engine) eval(ctx context.Context, c *compiled, pq rego.PreparedEvalQuery, input rego.EvalOption) (any, *Decision) {
	// OPA checks for cancellation only now and then, so a request that is
	// already gone is denied here rather than evaluated.
	if err := ctx.Err(); err != nil {
		d := deny(c.revision, ReasonTimeout, "the request ended before the policy was evaluated")
		return nil, &d
	}
	ctx, cancel := context.WithTimeout(ctx, e.evalTimeout)
	defer cancel()
	rs, err := pq.Eval(ctx, input)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
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
