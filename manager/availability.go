package manager

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/sandgate/sandgate/executors"
)

// availability caches executor probes for a short TTL: probing a Docker
// engine on every request would put a round trip on the hot path, while a
// stale answer costs at most one 503 that the executor itself reports.
type availability struct {
	execs []executors.Executor
	ttl   time.Duration

	mu      sync.Mutex
	checked time.Time
	kinds   []string
	errs    map[string]error
}

// probeTimeout bounds one round of executor probes.
const probeTimeout = 2 * time.Second

func newAvailability(execs []executors.Executor, ttl time.Duration) *availability {
	return &availability{execs: execs, ttl: ttl}
}

// Available lists the kinds whose probe succeeded, sorted.
func (a *availability) Available(ctx context.Context) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if time.Since(a.checked) < a.ttl && a.kinds != nil {
		return a.kinds
	}
	// The answer is shared by every request for the TTL, so it must not
	// depend on one client's context: a client that went away would
	// otherwise make a healthy executor look unavailable to everyone.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), probeTimeout)
	defer cancel()
	kinds, errs := make([]string, 0, len(a.execs)), make(map[string]error)
	for _, e := range a.execs {
		if err := e.Available(pctx); err != nil {
			errs[string(e.Kind())] = err
			continue
		}
		kinds = append(kinds, string(e.Kind()))
	}
	sort.Strings(kinds)
	a.kinds, a.errs, a.checked = kinds, errs, time.Now()
	return kinds
}

// Invalidate forgets the cached answer, after an executor reported itself
// unavailable mid-request.
func (a *availability) Invalidate() {
	a.mu.Lock()
	a.checked = time.Time{}
	a.mu.Unlock()
}

// Probe runs every executor's probe now, for /readyz.
func (a *availability) Probe(ctx context.Context) map[string]error {
	out := make(map[string]error, len(a.execs))
	for _, e := range a.execs {
		out[string(e.Kind())] = e.Available(ctx)
	}
	return out
}
