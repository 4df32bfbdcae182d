// Package manager is the one pipeline every run_code and execute request goes
// through, in the order DESIGN.md §2 fixes: validate, assess, decide,
// confirm, route, execute, record. Handlers never call risk, policy or an
// executor directly, so no request can skip a step.
package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/go-playground/validator/v10"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/confirm"
	"github.com/sandgate/sandgate/egress"
	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/risk"
	"github.com/sandgate/sandgate/workspace"
)

// Request kinds.
const (
	KindRunCode = "run_code"
	KindExecute = "execute"
)

// Config holds the pipeline's limits. Zero values take the defaults below.
type Config struct {
	// Mode is STRICT or PERMISSIVE; it is policy input, not enforced here.
	Mode string
	// MaxCodeBytes caps code (and commands); default 256 KiB.
	MaxCodeBytes int
	// DefaultTimeout applies when a request names none; default 30 s.
	DefaultTimeout time.Duration
	// ApprovalTimeout bounds the wait for a human; default 120 s.
	ApprovalTimeout time.Duration
	// AvailabilityTTL caches executor probes between requests; default 1 s.
	AvailabilityTTL time.Duration
	// Quotas are the tenants' limits; the zero value limits nothing.
	Quotas QuotaConfig
	// UnavailableHold is how long an executor whose runs keep failing as
	// unavailable, although its probe passes, is held unavailable before
	// it is probed again; default 10 s.
	UnavailableHold time.Duration
	// Replica names this process in session records when no Placement is
	// wired; default "local", as the audit log names it.
	Replica string
	// ReapInterval is how often sessions are checked for expiry; default
	// 1 s.
	ReapInterval time.Duration
	// PauseIdleAfter pauses a session served here that has had no request
	// for this long (pause.go): its containers and memory are freed, and
	// its next request resumes it. 0 never pauses one.
	PauseIdleAfter time.Duration
	// Snapshots are the named snapshots' directory and retention
	// (snapshot.go).
	Snapshots SnapshotConfig
}

func (c *Config) applyDefaults() {
	if c.MaxCodeBytes <= 0 {
		c.MaxCodeBytes = 256 << 10
	}
	if c.DefaultTimeout <= 0 {
		c.DefaultTimeout = 30 * time.Second
	}
	if c.ApprovalTimeout <= 0 {
		c.ApprovalTimeout = 120 * time.Second
	}
	if c.AvailabilityTTL <= 0 {
		c.AvailabilityTTL = time.Second
	}
	if c.UnavailableHold <= 0 {
		c.UnavailableHold = 10 * time.Second
	}
	if c.Replica == "" {
		c.Replica = audit.DefaultReplica
	}
	if c.ReapInterval <= 0 {
		c.ReapInterval = time.Second
	}
}

// Decider is the policy engine as the manager uses it.
type Decider interface {
	Decide(ctx context.Context, in policy.Input) policy.Decision
}

// Deps are the manager's collaborators, wired explicitly in main.
type Deps struct {
	Assessor   *risk.Assessor
	Policy     Decider
	Confirm    confirm.Service // nil: require_approval is denied (approval_unavailable)
	Executors  []executors.Executor
	Workspaces *workspace.Workspaces
	Audit      audit.Store
	Metrics    *Metrics // nil: no metrics
	Logger     *slog.Logger
	// Egress is the egress proxy (DESIGN.md §9). A run whose decision
	// grants network gets its Handle as Spec.Egress; without it such a run
	// is denied (egress_unavailable), never run without the proxy.
	Egress EgressService
	// Resources are other per-session state (a browser, a pool instance)
	// that DELETE /v1/sessions/{id} releases and GET shows.
	Resources []SessionResource
	// Sessions is the database session records live in (Start opens it);
	// nil keeps them in memory.
	Sessions SessionDB
	// Placement is the fleet's session registry; nil serves every
	// session here.
	Placement Placement
	// Events keeps and delivers lifecycle events; nil drops them.
	Events EventSink
	// Layouts are the front ends' path layouts, by front end name
	// (layout.go); a front end without one gets /workspace alone.
	Layouts map[string]Layout
	// Activity is told runs' output and file changes for the approval
	// page's timeline (ActivitySink); nil tells nobody.
	Activity ActivitySink
}

// EgressService gives one run its way to the egress proxy, bound to the
// run (egress.Service).
type EgressService interface {
	ForRun(b egress.Binding) executors.Egress
}

// SessionResource is per-session state outside the executors, wired
// explicitly in main. Either function may be nil.
type SessionResource struct {
	Name string
	// Durable resources outlive this process (a DeerFlow sandbox's
	// registration in the store): a shutdown leaves them, and only
	// delete or expiry releases them.
	Durable  bool
	Release  func(ctx context.Context, sessionID string) error
	Describe func(sessionID string) (any, bool)
}

// Manager runs the pipeline.
type Manager struct {
	cfg       Config
	deps      Deps
	log       *slog.Logger
	validator *validator.Validate
	execs     map[string]executors.Executor
	avail     *availability
	table     *sessionTable
	store     *sessionStore // nil before Start
	started   time.Time     // when Start ran
	quotas    *quotas
	// events feeds the EventSink (publish) until Close closes
	// stopEvents; eventsDone closes once what was queued is handed on.
	events     chan Event
	stopEvents chan struct{}
	eventsDone chan struct{}
	// stopReap ends the expiry loop Start began; reapDone closes after.
	stopReap context.CancelFunc
	reapDone chan struct{}
	// closeOnce makes Close idempotent.
	closeOnce sync.Once
	// usage keeps each session's previous CPU reading (usage.go).
	usage usageSamples
	// snaps serialises each tenant's snapshot writes (snapshot.go).
	snaps snapshotLocks
}

// New checks the wiring and builds a Manager.
func New(cfg Config, deps Deps) (*Manager, error) {
	cfg.applyDefaults()
	var errs []error
	if deps.Assessor == nil {
		errs = append(errs, errors.New("manager: no risk assessor"))
	}
	if deps.Policy == nil {
		errs = append(errs, errors.New("manager: no policy engine"))
	}
	if deps.Workspaces == nil {
		errs = append(errs, errors.New("manager: no workspaces"))
	}
	if deps.Audit == nil {
		errs = append(errs, errors.New("manager: no audit store"))
	}
	execs := make(map[string]executors.Executor)
	for _, e := range deps.Executors {
		if e == nil {
			errs = append(errs, errors.New("manager: nil executor"))
			continue
		}
		if _, dup := execs[string(e.Kind())]; dup {
			errs = append(errs, fmt.Errorf("manager: executor %s wired twice", e.Kind()))
		}
		execs[string(e.Kind())] = e
	}
	errs = append(errs, validateLayouts(deps.Layouts))
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Manager{
		cfg: cfg, deps: deps, log: log, validator: newValidator(), execs: execs,
		avail:  newAvailability(deps.Executors, cfg.AvailabilityTTL, cfg.UnavailableHold),
		table:  newSessionTable(),
		quotas: newQuotas(cfg.Quotas),
	}
	if deps.Events != nil {
		m.events, m.stopEvents, m.eventsDone = make(chan Event, eventQueue), make(chan struct{}), make(chan struct{})
		go m.publish()
	}
	return m, nil
}

// Mode is the security mode the manager reports to the policy.
func (m *Manager) Mode() string { return m.cfg.Mode }

// Executors returns the wired executors, for readiness probes.
func (m *Manager) Executors() []executors.Executor { return m.deps.Executors }

// Close releases executor resources (warm containers, pools).
func (m *Manager) Close(ctx context.Context) (err error) {
	m.closeOnce.Do(func() { err = m.close(ctx) })
	return err
}

// close is Close, once: a failed start-up and a shutdown may both call
// Close.
func (m *Manager) close(ctx context.Context) error {
	m.avail.wait()
	if m.stopReap != nil {
		m.stopReap()
		<-m.reapDone
	}
	errs := []error{m.shutdownSessions(ctx), closeAll(ctx, m.deps.Executors)}
	if m.events != nil {
		close(m.stopEvents)
		<-m.eventsDone
	}
	return errors.Join(errs...)
}

// closeAll closes the executors that hold resources side by side: each
// waits on its own containers or pods, and none should be left only what
// the ones before it did not use of ctx's deadline.
func closeAll(ctx context.Context, execs []executors.Executor) error {
	errs := make([]error, len(execs))
	var wg sync.WaitGroup
	for i, e := range execs {
		if c, ok := e.(executors.Closer); ok {
			wg.Go(func() { errs[i] = c.Close(ctx) })
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}
