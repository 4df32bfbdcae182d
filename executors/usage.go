package executors

import "context"

// SessionMeter is implemented by backends that can read what a session's
// sandboxes use right now from their cgroups (E2B's getMetrics, issue 28).
type SessionMeter interface {
	// SessionUsage sums the cgroup readings of every live sandbox of the
	// session (runs, detached runs, kernel, network holder); a session
	// with none is the zero Usage.
	SessionUsage(ctx context.Context, sessionID string) (Usage, error)
}

// Usage is a session's cgroup readings at one moment.
type Usage struct {
	// Sandboxes is how many live sandboxes were read.
	Sandboxes int
	// CPUNanos is the CPU time they have used, summed (cumulative: a
	// rate needs two readings).
	CPUNanos uint64
	// CPUs is the CPU quota of one sandbox, in cores.
	CPUs float64
	// MemUsed is their memory in use, page cache excluded; MemCache the
	// page cache; MemLimit one sandbox's memory limit.
	MemUsed, MemCache, MemLimit int64
}
