package manager

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/workspace"
)

// Quota is one tenant's limits (DESIGN.md §2 step 1). A zero field is no
// limit of that kind; the gateway's configuration gives every field a
// finite default (cmd/gateway).
type Quota struct {
	// MaxSessions bounds the tenant's live sessions: those with a
	// workspace, until DELETE ?purge=true removes it. A request that would
	// create one more is refused.
	MaxSessions int
	// MaxConcurrentRuns bounds the tenant's run_code and execute requests
	// in flight, from admission to response, an approval wait included:
	// each holds a request open and, once approved, a sandbox.
	MaxConcurrentRuns int
	// MaxWorkspaceBytes bounds the regular-file bytes of all the tenant's
	// workspaces together: a run is refused once they are at it, an API
	// write that would cross it is refused (workspace.TenantQuotaBytes).
	MaxWorkspaceBytes int64
	// RequestsPerSecond and Burst are the tenant's token bucket over every
	// session request (runs, files, browser, session reads and deletes,
	// listings, dry runs): refused with rate_limited and Retry-After.
	RequestsPerSecond float64
	Burst             int
	// MaxSnapshots and MaxSnapshotBytes bound the tenant's named
	// snapshots (snapshot.go): a snapshot that would pass either is
	// refused with quota_exceeded.
	MaxSnapshots     int
	MaxSnapshotBytes int64
}

// QuotaConfig is every tenant's quota: Default, or Tenants[name].
type QuotaConfig struct {
	Default Quota
	Tenants map[string]Quota
	// Labels are the tenant names metrics may carry as a label: the
	// configured ones, so the label's cardinality is bounded by the
	// configuration. Others (tenants from JWT claims) count as "other".
	Labels []string
}

// For is tenant's quota.
func (c QuotaConfig) For(tenant string) Quota {
	if q, ok := c.Tenants[tenant]; ok {
		return q
	}
	return c.Default
}

// Quota errors. Each names which limit refused the request; all but the
// rate are quota_exceeded (429).
var (
	ErrRateLimited        = errcode.New(errcode.RateLimited, "the tenant is over its request rate; retry after the time in Retry-After")
	ErrSessionQuota       = errcode.New(errcode.QuotaExceeded, "the tenant has its maximum number of live sessions; delete one with purge=true first")
	ErrConcurrencyQuota   = errcode.New(errcode.QuotaExceeded, "the tenant has its maximum number of runs in flight; retry when one has finished")
	ErrWorkspaceByteQuota = errcode.New(errcode.QuotaExceeded, "the tenant's workspaces are at their byte quota; delete files or sessions first")
)

// RateLimitedError is a refusal by the tenant's token bucket. RetryAfter
// is when the bucket will hold a token again.
type RateLimitedError struct {
	RetryAfter time.Duration
}

func (e *RateLimitedError) Error() string {
	return fmt.Sprintf("rate limited: retry after %s", e.RetryAfter)
}

// Unwrap gives the error its code.
func (e *RateLimitedError) Unwrap() error { return ErrRateLimited }

// RetryAfterSeconds is RetryAfter rounded up to whole seconds, at least 1:
// the Retry-After header's value.
func (e *RateLimitedError) RetryAfterSeconds() int {
	return max(1, int(math.Ceil(e.RetryAfter.Seconds())))
}

// quotaKind names the limit that refused a request, in its audit record
// (detail "quota") and the refusals metric; "" for any other error.
func quotaKind(err error) string {
	switch {
	case errors.Is(err, ErrRateLimited):
		return "rate"
	case errors.Is(err, ErrSessionQuota):
		return "sessions"
	case errors.Is(err, ErrConcurrencyQuota):
		return "concurrent_runs"
	case errors.Is(err, ErrWorkspaceByteQuota), errors.Is(err, workspace.ErrTenantQuotaExceeded):
		return "workspace_bytes"
	case errors.Is(err, workspace.ErrQuotaExceeded):
		return "session_workspace"
	}
	return ""
}

// admitOp is what a request may do, which decides the limits it is
// checked against.
type admitOp int

const (
	// opRead touches an existing session or none: the rate only.
	opRead admitOp = iota
	// opCreate may create the session (a file upload, a browser action):
	// the rate and the live-session limit.
	opCreate
	// opRun is run_code and execute: every limit.
	opRun
)

// tenantState is one tenant's live counters. Each is checked and taken
// without a lock shared with other tenants: one tenant's refusals never
// slow another's requests.
type tenantState struct {
	quota   Quota
	limiter *rate.Limiter // nil: no rate limit
	running atomic.Int64

	mu       sync.Mutex     // serialises live-session admission
	creating map[string]int // keys of sessions requests in flight may create
}

// quotas holds every tenant's state, created on first use.
type quotas struct {
	cfg    QuotaConfig
	states sync.Map // tenant -> *tenantState
}

func newQuotas(cfg QuotaConfig) *quotas { return &quotas{cfg: cfg} }

func (q *quotas) state(tenant string) *tenantState {
	if st, ok := q.states.Load(tenant); ok {
		return st.(*tenantState)
	}
	quota := q.cfg.For(tenant)
	st := &tenantState{quota: quota, creating: map[string]int{}}
	if quota.RequestsPerSecond > 0 {
		st.limiter = rate.NewLimiter(rate.Limit(quota.RequestsPerSecond), max(1, quota.Burst))
	}
	actual, _ := q.states.LoadOrStore(tenant, st)
	return actual.(*tenantState)
}

// label is tenant as a metrics label: configured names as they are,
// anything else "other".
func (q *quotas) label(tenant string) string {
	if slices.Contains(q.cfg.Labels, tenant) {
		return tenant
	}
	if _, ok := q.cfg.Tenants[tenant]; ok {
		return tenant
	}
	return "other"
}

// admit checks ref's tenant's quotas for one request doing o, before
// anything of it runs, and takes what the request holds while it runs
// (a run slot, a pending session). The caller calls release when the
// request is over, refused or not.
func (m *Manager) admit(ctx context.Context, ref SessionRef, o admitOp) (release func(), err error) {
	st := m.quotas.state(ref.Tenant)
	release = func() {}
	if err := st.takeToken(); err != nil {
		return release, err
	}
	if o == opRead {
		return release, nil
	}
	releaseSession, err := m.admitSession(ctx, st, ref)
	if err != nil || o != opRun {
		return releaseSession, err
	}
	if err := st.takeRunSlot(); err != nil {
		releaseSession()
		return release, err
	}
	release = func() { st.running.Add(-1); releaseSession() }
	if limit := st.quota.MaxWorkspaceBytes; limit > 0 {
		used, err := m.deps.Workspaces.TenantUsage(ctx, ref.Tenant)
		if err != nil {
			release()
			return func() {}, err
		}
		if used >= limit {
			release()
			return func() {}, fmt.Errorf("%w: %d of %d bytes", ErrWorkspaceByteQuota, used, limit)
		}
	}
	return release, nil
}

// admitted runs fn once ref's request is admitted for o, and releases
// the admission after it.
func (m *Manager) admitted(ctx context.Context, ref SessionRef, o admitOp, fn func() error) error {
	release, err := m.admit(ctx, ref, o)
	defer release()
	if err != nil {
		return err
	}
	return fn()
}

// rateRef is whose bucket a request of p about ref draws from: the
// caller's own tenant's. An admin reading or deleting another tenant's
// session spends its own requests, not that tenant's.
func (m *Manager) rateRef(p Principal, ref SessionRef) SessionRef {
	return SessionRef{Tenant: p.Tenant, ID: ref.ID, Key: ref.Key}
}

// takeToken takes one token from the tenant's bucket, or says when the
// next one will be there. A refused request takes nothing.
func (st *tenantState) takeToken() error {
	if st.limiter == nil {
		return nil
	}
	now := time.Now()
	r := st.limiter.ReserveN(now, 1)
	if !r.OK() {
		return &RateLimitedError{RetryAfter: time.Second}
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return &RateLimitedError{RetryAfter: d}
	}
	return nil
}

func (st *tenantState) takeRunSlot() error {
	limit := int64(st.quota.MaxConcurrentRuns)
	if limit <= 0 {
		st.running.Add(1)
		return nil
	}
	if n := st.running.Add(1); n > limit {
		st.running.Add(-1)
		return fmt.Errorf("%w: %d in flight", ErrConcurrencyQuota, limit)
	}
	return nil
}

// admitSession admits a request that may create ref's session. An
// existing session is always admitted (one lstat); a new one only while
// the tenant's sessions on disk, plus those other requests in flight may
// create, are under the limit, and it then counts as one of those until
// the request ends.
func (m *Manager) admitSession(ctx context.Context, st *tenantState, ref SessionRef) (func(), error) {
	limit := st.quota.MaxSessions
	if limit <= 0 || m.deps.Workspaces.Exists(ref.Key) {
		return func() {}, nil
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	live, err := m.deps.Workspaces.ListTenant(ctx, ref.Tenant)
	if err != nil {
		return func() {}, err
	}
	n := len(live)
	for key := range st.creating {
		if key != ref.Key && !slices.ContainsFunc(live, func(i workspace.Info) bool { return i.SessionID == key }) {
			n++
		}
	}
	if n >= limit {
		return func() {}, fmt.Errorf("%w: %d live", ErrSessionQuota, n)
	}
	st.creating[ref.Key]++
	return func() {
		st.mu.Lock()
		defer st.mu.Unlock()
		if st.creating[ref.Key]--; st.creating[ref.Key] <= 0 {
			delete(st.creating, ref.Key)
		}
	}, nil
}
