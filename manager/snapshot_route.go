package manager

import (
	"context"
	"fmt"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/policy"
)

// A session created with "snapshot": "memory" (issue 30) must be served
// where a pause keeps its kernel's memory. The requirement is kept in
// its record and given to the policy with every run
// (context.needs_memory_snapshot): the default policy sends its stateful
// cells to config.snapshot_memory.executor (gVisor) and denies them,
// naming the capability, on an executor that does not keep memory. At
// creation the manager asks the policy where such a cell would go (a
// cell that reads nothing, by the session's own principal, with the
// executors as they are now) and refuses the session the same way
// unless that executor is available and keeps memory. "filesystem" is
// kept by every executor (the workspace outlives processes) and "none"
// asks for nothing.

// probeCell is the stateful cell the policy is asked about.
const probeCell = "pass"

// requireSnapshotMode refuses a session whose snapshot mode the executor
// its stateful cells would go to cannot keep.
// needsMemory reports whether ref's session was created with
// "snapshot": "memory".
func (m *Manager) needsMemory(ref SessionRef) bool {
	s, ok := m.table.cached(ref.Key)
	if !ok {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rec.Snapshot == executors.SnapshotMemory
}

func (m *Manager) requireSnapshotMode(ctx context.Context, p Principal, ref SessionRef, mode string) error {
	if mode != executors.SnapshotMemory {
		return nil
	}
	req := RunRequest{Kind: KindRunCode, Code: probeCell, Language: "python", Stateful: true, Principal: p, ref: ref,
		memorySnapshot: true}
	a, err := m.deps.Assessor.Assess(probeCell, "python")
	if err != nil {
		return err
	}
	d := m.decide(ctx, req, a)
	e, ok := m.execs[d.Executor]
	if !ok {
		return denied(ErrPolicyDenied, d, policy.Reason{Code: policy.ReasonCapabilityMissing,
			Message: fmt.Sprintf("snapshot: memory: the policy routes this session's stateful cells to %q, which is not wired", d.Executor)})
	}
	if got := e.Capabilities().SnapshotMode(); got != executors.SnapshotMemory {
		return denied(ErrPolicyDenied, d, policy.Reason{Code: policy.ReasonCapabilityMissing,
			Message: fmt.Sprintf("snapshot: memory: the policy routes this session's stateful cells to %s, which keeps %s, not memory (gvisor keeps memory: route stateful cells there, config.stateful.executor)",
				d.Executor, got)})
	}
	if d.Action == policy.ActionDeny { // the executor keeps memory but cannot serve the cell now
		if d.OnlyReason(policy.ReasonExecutorUnavailable) {
			return denied(ErrExecutorUnavailable, d)
		}
		return denied(ErrPolicyDenied, d)
	}
	return nil
}
