package manager

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/workspace"
)

// Fork (issue 30): count new sessions start from one session's state.
// Each child gets a copy of the parent's workspace, and, where the
// executor keeps memory (gVisor), a restore of the parent's kernel with
// its random generators reseeded. Policy does not follow the parent's
// history: a child is a new session, so every run in it is decided
// afresh, and the parent's session grants, egress grants and one-time
// approvals (all keyed by session or request) do not apply to it. Each
// child's audit record names its parent and the snapshot it came from.

// KindSessionFork is the audit kind of a fork's child.
const KindSessionFork = "session.fork"

// MaxForkCount bounds one fork's children.
const MaxForkCount = 10

// ForkResult is what POST /v1/sessions/{id}/fork answers.
type ForkResult struct {
	Parent string `json:"parent"`
	// Snapshot names the checkpoint the children's kernels came from;
	// empty when no memory was carried.
	Snapshot string `json:"snapshot,omitempty"`
	// Memory: the children's kernels hold the parent's variables.
	Memory   bool          `json:"memory"`
	Sessions []SessionInfo `json:"sessions"`
}

// ForkSession starts count children of one of the caller's sessions.
func (m *Manager) ForkSession(ctx context.Context, p Principal, id string, count int) (ForkResult, error) {
	if count < 1 || count > MaxForkCount {
		return ForkResult{}, invalidFields(FieldError{Field: "count", Code: "range",
			Message: "count must be 1 to " + strconv.Itoa(MaxForkCount)})
	}
	ref, err := m.ResolveSession(p, id)
	if err != nil {
		return ForkResult{}, err
	}
	var res ForkResult
	err = m.withPeekedSession(ctx, p, ref, func(s *Session) error {
		if err := m.autoResume(ctx, s); err != nil {
			return err
		}
		res, err = m.fork(ctx, p, s, count)
		return err
	})
	return res, err
}

func (m *Manager) fork(ctx context.Context, p Principal, s *Session, count int) (ForkResult, error) {
	s.pauseMu.Lock()
	defer s.pauseMu.Unlock()
	s.mu.Lock()
	busy, parent := s.running > 0, s.rec
	s.mu.Unlock()
	if busy {
		return ForkResult{}, errSessionBusy
	}
	if _, err := m.deps.Workspaces.Ensure(ctx, parent.Key); err != nil {
		return ForkResult{}, err
	}
	start := time.Now()
	// The children's sessions are opened side by side (each writes its
	// record); a failure releases every child that was made.
	children, refs, errs := make([]executors.ForkChild, count), make([]SessionRef, count), make([]error, count)
	var wg sync.WaitGroup
	for i := range count {
		wg.Go(func() { refs[i], children[i], errs[i] = m.forkOpen(ctx, parent) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for i, ref := range refs {
			if errs[i] == nil {
				_ = m.release(ctx, ref, releaseDelete, true)
			}
		}
		return ForkResult{}, err
	}
	opened := time.Since(start)
	res := ForkResult{Parent: parent.Name}
	for _, e := range m.deps.Executors {
		if f, ok := e.(executors.SessionForker); ok {
			fd, err := f.ForkSession(ctx, parent.Key, children)
			if err != nil {
				m.log.WarnContext(ctx, "fork: a child's kernel was not restored; it starts afresh",
					"session_id", parent.Name, "executor", e.Kind(), "err", err)
			}
			if fd.Memory {
				res.Memory, res.Snapshot = true, fd.Snapshot
			}
		}
	}
	for _, ref := range refs {
		if res.Memory {
			if c, ok := m.table.cached(ref.Key); ok {
				m.hold(ctx, c, HeldKernel)
			}
		}
		rec := &audit.Record{RequestID: requestIDFrom(ctx), Kind: KindSessionFork, Tenant: ref.Tenant, SessionID: ref.ID,
			Principal: p.Role + ":" + p.Name}
		setDetail(rec, "parent", parent.Name)
		setDetail(rec, "snapshot", res.Snapshot)
		setDetail(rec, "memory", strconv.FormatBool(res.Memory))
		m.record(ctx, rec, OutcomeOK, nil, start)
		info, err := m.describe(ctx, ref)
		if err != nil {
			return ForkResult{}, err
		}
		res.Sessions = append(res.Sessions, info)
	}
	// Where a fork's time goes: the children's sessions and workspace
	// copies, then the executors' checkpoint and restores.
	m.emit(ctx, "session.forked", SessionRef{Tenant: parent.Tenant, ID: parent.Name, Key: parent.Key},
		map[string]any{"children": len(refs), "snapshot": res.Snapshot, "memory": res.Memory,
			"open_ms": opened.Milliseconds(), "duration_ms": time.Since(start).Milliseconds()})
	return res, nil
}

// forkOpen opens one child of parent with a copy of its workspace.
func (m *Manager) forkOpen(ctx context.Context, parent sessionRecord) (SessionRef, executors.ForkChild, error) {
	ref := SessionRef{Tenant: parent.Tenant, ID: parent.Name + "-fork-" + forkSuffix()}
	ref.Key = workspace.Key(ref.Tenant, ref.ID)
	if _, _, err := m.open(ctx, ref, OpenOptions{Create: true, FrontEnd: parent.FrontEnd, Labels: maps.Clone(parent.Labels),
		Metadata: parent.Metadata, IdleTimeout: parent.IdleTimeout, Snapshot: parent.Snapshot}); err != nil {
		return ref, executors.ForkChild{}, err
	}
	dir, err := m.deps.Workspaces.Fork(ctx, parent.Key, ref.Key)
	if err != nil {
		_ = m.release(ctx, ref, releaseDelete, true)
		return ref, executors.ForkChild{}, err
	}
	return ref, executors.ForkChild{SessionID: ref.Key, WorkspaceDir: dir.Path}, nil
}

func forkSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
