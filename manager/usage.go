package manager

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/sandgate/sandgate/executors"
)

// SessionUsage is what a session's sandboxes use now, from their cgroups
// (E2B's getMetrics): the executors that hold its sandboxes
// (executors.SessionMeter) and its workspace, the session's disk.
type SessionUsage struct {
	Timestamp time.Time
	// Sandboxes counts the live sandboxes read (runs, detached runs,
	// kernel, network holder); none is a session at rest.
	Sandboxes int
	// CPUCount is one sandbox's CPU quota, rounded up; CPUUsedPct the
	// CPU they used since the previous reading (or in the last
	// usageWindow for the first), in percent of CPUCount.
	CPUCount   int
	CPUUsedPct float64
	// MemUsed excludes the page cache (MemCache); MemTotal is one
	// sandbox's memory limit (the policy's memory_mb).
	MemUsed, MemCache, MemTotal int64
	// DiskUsed is the workspace's regular files; DiskTotal its quota.
	DiskUsed, DiskTotal int64
}

// usageWindow is the interval of a session's first CPU reading.
const usageWindow = 200 * time.Millisecond

// usageSample is the previous CPU reading of a session.
type usageSample struct {
	at   time.Time
	nano uint64
}

// usageSamples keeps each session's previous reading, so that a rate
// needs one reading per call after the first.
type usageSamples struct {
	mu sync.Mutex
	m  map[string]usageSample
}

func (s *usageSamples) get(key string) (usageSample, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[key]
	return v, ok
}

// usageSamplesMax bounds the sessions remembered; past it they are
// forgotten all at once (their next reading takes usageWindow).
const usageSamplesMax = 4096

func (s *usageSamples) set(key string, v usageSample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil || len(s.m) >= usageSamplesMax {
		s.m = map[string]usageSample{}
	}
	s.m[key] = v
}

// SessionUsage reads one of the caller's sessions. It runs no code: it
// is rate-limited like a read and not audited, as GET /v1/sessions/{id}.
func (m *Manager) SessionUsage(ctx context.Context, p Principal, id string) (SessionUsage, error) {
	ref, err := m.ResolveSession(p, id)
	if err != nil {
		return SessionUsage{}, err
	}
	var u SessionUsage
	err = m.admitted(ctx, m.rateRef(p, ref), opRead, func() error {
		if _, err := m.local(WithSessionPeek(ctx), ref); err != nil {
			return err
		}
		if _, kept := m.table.cached(ref.Key); !kept {
			return errSessionNotFound
		}
		var err error
		u, err = m.readUsage(ctx, ref)
		return err
	})
	return u, err
}

func (m *Manager) readUsage(ctx context.Context, ref SessionRef) (SessionUsage, error) {
	first, err := m.cgroups(ctx, ref.Key)
	if err != nil {
		return SessionUsage{}, err
	}
	now := time.Now()
	prev, had := m.usage.get(ref.Key)
	if !had {
		prev = usageSample{at: now, nano: first.CPUNanos}
		select {
		case <-time.After(usageWindow):
		case <-ctx.Done():
			return SessionUsage{}, ctx.Err()
		}
		if first, err = m.cgroups(ctx, ref.Key); err != nil {
			return SessionUsage{}, err
		}
		now = time.Now()
	}
	m.usage.set(ref.Key, usageSample{at: now, nano: first.CPUNanos})
	cpus := int(first.CPUs + 0.999)
	if cpus <= 0 {
		cpus = runtime.NumCPU()
	}
	u := SessionUsage{Timestamp: now, Sandboxes: first.Sandboxes, CPUCount: cpus, MemUsed: first.MemUsed,
		MemCache: first.MemCache, MemTotal: first.MemLimit, DiskTotal: m.deps.Workspaces.Limits().QuotaBytes}
	if dt := now.Sub(prev.at); dt > 0 && first.CPUNanos >= prev.nano {
		u.CPUUsedPct = 100 * float64(first.CPUNanos-prev.nano) / float64(dt.Nanoseconds()) / float64(cpus)
	}
	u.DiskUsed = m.workspaceBytes(ctx, ref.Key)
	return u, nil
}

// cgroups sums every metering executor's reading of the session.
func (m *Manager) cgroups(ctx context.Context, key string) (executors.Usage, error) {
	var sum executors.Usage
	var errs []error
	for _, e := range m.deps.Executors {
		sm, ok := e.(executors.SessionMeter)
		if !ok {
			continue
		}
		u, err := sm.SessionUsage(ctx, key)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		sum.Sandboxes += u.Sandboxes
		sum.CPUNanos += u.CPUNanos
		sum.MemUsed += u.MemUsed
		sum.MemCache += u.MemCache
		sum.CPUs = max(sum.CPUs, u.CPUs)
		sum.MemLimit = max(sum.MemLimit, u.MemLimit)
	}
	if len(errs) > 0 && sum.Sandboxes == 0 {
		m.log.WarnContext(ctx, "session usage: executors could not be read", "err", errors.Join(errs...))
	}
	return sum, nil
}

// usageWalkMax bounds the files a workspace reading counts.
const usageWalkMax = 100_000

// workspaceBytes sums the regular files of the session's workspace.
func (m *Manager) workspaceBytes(ctx context.Context, key string) int64 {
	info, err := m.deps.Workspaces.Get(ctx, key)
	if err != nil {
		return 0
	}
	var total int64
	n := 0
	_ = filepath.WalkDir(info.Dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || ctx.Err() != nil {
			return nil
		}
		if n++; n > usageWalkMax {
			return filepath.SkipAll
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				total += fi.Size()
			}
		}
		return nil
	})
	return total
}
