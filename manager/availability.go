package manager

import (
	"context"
	"errors"
	"maps"
	"sync"
	"time"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/policy"
)

// ExecutorStatus is one executor as the policy sees it: whether it can run
// work now, why not, and what it can enforce. /readyz and GET /v1/policy
// show exactly this, so what an operator reads is what the policy decided
// on.
type ExecutorStatus struct {
	Available bool `json:"available"`
	// Reason is the executor's own short explanation (UnavailableError's
	// Reason), never a wrapped internal error.
	Reason       string                 `json:"reason,omitempty"`
	Capabilities executors.Capabilities `json:"capabilities"`
	// Pool is the executor's pool of pre-started sandboxes, when it has
	// one (executors.Pooler).
	Pool *executors.PoolStatus `json:"pool,omitempty"`
}

// availability caches executor probes for a short TTL: probing a Docker
// engine on every request would put a round trip on the hot path, while a
// stale answer costs at most one 503 that the executor itself reports.
//
// It also breaks the loop of an executor whose probe passes while its runs
// fail as unavailable (the probe and Execute disagree): after
// heldAfterStrikes such runs in a row, the executor is held unavailable,
// with the reason its runs gave, for the hold period, and the policy
// denies runs to it instead of sending each one to fail.
type availability struct {
	execs []executors.Executor
	ttl   time.Duration
	hold  time.Duration

	mu      sync.Mutex
	checked time.Time
	status  map[string]ExecutorStatus
	input   map[string]policy.ExecutorState // status in the policy's form; rebuilt with it
	strikes map[string]int                  // runs failed as unavailable in a row, by kind
	held    map[string]heldDown
	probing bool   // a background probe is running
	gen     uint64 // bumped by RunFailed: a probe begun before it is stale
	bg      sync.WaitGroup
	// probes numbers the installed probes; passed is, by kind, the number
	// of the last probe that found the executor available, and struckAt
	// the passed value its last strike counted. Runs that fail together
	// (every run in flight when an engine stops) are one strike, and so
	// is a failure with no passing probe since the last: the strikes are
	// for a probe that passes while runs fail, not for an outage the
	// probe sees too.
	probes   uint64
	passed   map[string]uint64
	struckAt map[string]uint64
}

// heldDown is an executor held unavailable after its runs kept failing.
type heldDown struct {
	until  time.Time
	reason string
}

// heldAfterStrikes is how many runs in a row must fail as unavailable,
// with a passing probe in between, before the executor is held down. One
// failure may be a broken instance or a passing outage; the probe that
// follows it decides.
const heldAfterStrikes = 2

// probeTimeout bounds one round of executor probes.
const probeTimeout = 2 * time.Second

func newAvailability(execs []executors.Executor, ttl, hold time.Duration) *availability {
	return &availability{execs: execs, ttl: ttl, hold: hold, strikes: map[string]int{}, held: map[string]heldDown{},
		passed: map[string]uint64{}, struckAt: map[string]uint64{}}
}

// PolicyInput returns the executors as input.executors. The map is shared
// by every request until the next refresh and must not be modified.
func (a *availability) PolicyInput(ctx context.Context) map[string]policy.ExecutorState {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.refreshLocked(ctx)
	return a.input
}

// Status returns every wired executor's status, by kind.
func (a *availability) Status(ctx context.Context) map[string]ExecutorStatus {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.refreshLocked(ctx)
	return maps.Clone(a.status)
}

// refreshLocked brings the cached answer up to date. The first answer, one
// a failed run invalidated (RunFailed) and one whose hold just ended are
// probed before the caller goes on: the caller's decision depends on
// them. An answer that merely aged past the TTL is served once more while
// one background probe renews it, so no request waits for an engine round
// trip (or for a slow engine's probe timeout) on the hot path.
func (a *availability) refreshLocked(ctx context.Context) {
	now := time.Now()
	switch {
	case a.status == nil || a.checked.IsZero() || a.holdExpiredLocked(now):
		a.installLocked(a.probe(ctx), time.Now())
	case now.Sub(a.checked) >= a.ttl && !a.probing:
		a.probing = true
		gen := a.gen
		a.bg.Add(1)
		go func() {
			defer a.bg.Done()
			probes := a.probe(ctx)
			a.mu.Lock()
			defer a.mu.Unlock()
			a.probing = false
			if a.gen == gen { // else a failed run asked for a fresh probe meanwhile
				a.installLocked(probes, time.Now())
			}
		}()
	}
}

// probe asks every executor whether it can run work and what it enforces.
// The answer is shared by every request, so it must not depend on one
// client's context: a client that went away would otherwise make a
// healthy executor look unavailable to everyone.
func (a *availability) probe(ctx context.Context) map[string]ExecutorStatus {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), probeTimeout)
	defer cancel()
	status := make(map[string]ExecutorStatus, len(a.execs))
	for _, e := range a.execs {
		st := ExecutorStatus{Available: true}
		if err := e.Available(pctx); err != nil {
			st.Available, st.Reason = false, unavailableReason(err)
		}
		// Capabilities are read after the probe: a probe may learn what
		// they report (the image id of the root filesystem).
		st.Capabilities = e.Capabilities()
		if p, ok := e.(executors.Pooler); ok {
			ps := p.PoolStatus()
			st.Pool = &ps
		}
		status[string(e.Kind())] = st
	}
	return status
}

// installLocked makes probes (as of now) the cached answer, with the
// executors that are held down marked unavailable with their hold's
// reason, and forgets holds that ended.
func (a *availability) installLocked(probes map[string]ExecutorStatus, now time.Time) {
	a.probes++
	for kind, st := range probes {
		if st.Available {
			a.passed[kind] = a.probes
		}
	}
	for kind, h := range a.held {
		if !now.Before(h.until) {
			delete(a.held, kind)
			continue
		}
		if st, ok := probes[kind]; ok && !st.Available {
			// The probe sees the failure itself now: the hold, there for
			// a probe blind to it, has nothing left to add, and kept on
			// it would outlast the outage. An engine restart held the
			// executor this way: runs failed while the stopping engine
			// still answered the probe, and the hold kept it unavailable
			// for seconds after the engine was back (issue 21's soak,
			// recovery 5.9–7.2 s).
			delete(a.held, kind)
			delete(a.strikes, kind)
			continue
		}
		if st, ok := probes[kind]; ok {
			st.Available, st.Reason = false, h.reason
			probes[kind] = st
		}
	}
	a.status, a.input, a.checked = probes, policyInput(probes), now
}

// wait returns once no background probe is running; Manager.Close calls
// it before closing the executors.
func (a *availability) wait() { a.bg.Wait() }

// holdExpiredLocked reports whether a hold ended since the last refresh,
// so the executor is probed again at once rather than a TTL later.
func (a *availability) holdExpiredLocked(now time.Time) bool {
	for _, h := range a.held {
		if !now.Before(h.until) {
			return true
		}
	}
	return false
}

func policyInput(status map[string]ExecutorStatus) map[string]policy.ExecutorState {
	in := make(map[string]policy.ExecutorState, len(status))
	for kind, st := range status {
		in[kind] = policy.ExecutorState{Available: st.Available, Reason: st.Reason, Capabilities: st.Capabilities.Map()}
	}
	return in
}

// unavailableReason is the operator text of a failed probe: the
// executor's own reason, never the wrapped error (which may carry paths
// or addresses and is logged instead).
func unavailableReason(err error) string {
	var ue *executors.UnavailableError
	if errors.As(err, &ue) && ue.Reason != "" {
		return ue.Reason
	}
	return "availability probe failed"
}

// RunFailed records a run the executor refused as unavailable. The cached
// answer is dropped so the next request probes again; after
// heldAfterStrikes failures in a row the executor is held unavailable for
// the hold period with the run's reason.
func (a *availability) RunFailed(kind executors.Kind, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	k := string(kind)
	a.checked = time.Time{}
	a.gen++
	if p := a.passed[k]; p == 0 || p == a.struckAt[k] {
		return // no passing probe since the last strike: the same failure
	}
	a.struckAt[k] = a.passed[k]
	a.strikes[k]++
	if a.strikes[k] >= heldAfterStrikes {
		a.held[k] = heldDown{until: time.Now().Add(a.hold),
			reason: unavailableReason(err) + " (runs keep failing although the probe passes)"}
		a.strikes[k] = heldAfterStrikes - 1 // one more failure after the hold holds it again
	}
}

// RunSucceeded clears the executor's failure count.
func (a *availability) RunSucceeded(kind executors.Kind) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.strikes, string(kind))
}
