package manager

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/executors"
)

// Pause and resume (issue 30). A pause frees everything the session's
// processes hold on this replica: each executor's containers, kernels and
// warm processes, and its browser. What is kept depends on the executor
// (Capabilities.Snapshot): a gVisor session's kernel is checkpointed with
// its memory and restored on resume; elsewhere the workspace stays (it
// always outlives processes) and the next stateful run answers
// kernel_restarted: true. Any request that opens a paused session resumes
// it first (auto-resume), so a client sees only the added latency.

// Audit kinds of pause and resume.
const (
	KindSessionPause  = "session.pause"
	KindSessionResume = "session.resume"
)

// errSessionBusy refuses to pause a session with a run in flight: the
// run's processes would be frozen or killed under it.
var errSessionBusy = errcode.New(errcode.Conflict,
	"the session has a run in flight; pause it when the run has ended")

// PauseSession pauses one of the caller's sessions (any, for an admin).
// Pausing a paused session changes nothing.
func (m *Manager) PauseSession(ctx context.Context, p Principal, id string) (info SessionInfo, err error) {
	return m.pauseOrResume(ctx, p, id, KindSessionPause, m.pause)
}

// ResumeSession brings a paused session back. Resuming a session that
// is not paused changes nothing.
func (m *Manager) ResumeSession(ctx context.Context, p Principal, id string) (info SessionInfo, err error) {
	return m.pauseOrResume(ctx, p, id, KindSessionResume, func(ctx context.Context, s *Session, rec *audit.Record) error {
		return m.resume(ctx, s, rec)
	})
}

func (m *Manager) pauseOrResume(ctx context.Context, p Principal, id, kind string,
	do func(context.Context, *Session, *audit.Record) error) (info SessionInfo, err error) {
	start := time.Now()
	rec := &audit.Record{RequestID: requestIDFrom(ctx), Kind: kind, Tenant: p.Tenant, SessionID: id,
		Principal: p.Role + ":" + p.Name}
	defer func() { m.record(ctx, rec, fileOutcome(err), err, start) }()
	ref, err := m.ResolveSession(p, id)
	if err != nil {
		return SessionInfo{}, err
	}
	rec.Tenant, rec.SessionID = ref.Tenant, ref.ID
	err = m.withPeekedSession(ctx, p, ref, func(s *Session) error {
		return do(ctx, s, rec)
	})
	if err != nil {
		return SessionInfo{}, err
	}
	return m.describe(ctx, ref)
}

// pause frees what s holds and marks it paused.
func (m *Manager) pause(ctx context.Context, s *Session, rec *audit.Record) error {
	s.pauseMu.Lock()
	defer s.pauseMu.Unlock()
	s.mu.Lock()
	state, running := s.rec.State, s.running
	s.mu.Unlock()
	if state == StatePaused {
		setDetail(rec, "already", "true")
		return nil
	}
	if running > 0 {
		return errSessionBusy
	}
	began := time.Now()
	key := s.rec.Key
	for _, r := range m.deps.Resources {
		if r.Release != nil {
			if err := r.Release(ctx, key); err != nil {
				m.log.WarnContext(ctx, "pause: release a session resource", "session_id", s.rec.Name, "resource", r.Name, "err", err)
			}
		}
	}
	var memory bool
	var bytes int64
	for _, e := range m.deps.Executors {
		if pz, ok := e.(executors.SessionPauser); ok {
			pd, err := pz.PauseSession(ctx, key)
			if err != nil {
				// The workspace is kept whatever happens: the kernel's
				// memory is lost and the next stateful run says so.
				m.log.WarnContext(ctx, "pause: checkpoint failed; the kernel restarts on resume",
					"session_id", s.rec.Name, "executor", e.Kind(), "err", err)
			}
			memory = memory || pd.Memory
			bytes += pd.Bytes
		} else if r, ok := e.(executors.SessionReleaser); ok {
			_ = r.ReleaseSession(ctx, key)
		}
	}
	s.mu.Lock()
	s.rec.State = StatePaused
	var kept, lost []string
	for _, h := range s.rec.Held {
		if h == HeldKernel && memory {
			kept = append(kept, h) // in the checkpoint, on this replica
			continue
		}
		lost = append(lost, h)
	}
	markLost(&s.rec, lost)
	s.rec.Held = kept
	s.mu.Unlock()
	if err := m.save(ctx, s); err != nil {
		return err
	}
	setDetail(rec, "memory", strconv.FormatBool(memory))
	setDetail(rec, "snapshot_bytes", strconv.FormatInt(bytes, 10))
	m.emit(ctx, "session.paused", s.Ref(), map[string]any{"memory": memory, "snapshot_bytes": bytes,
		"lost": nonNilSlice(lost), "duration_ms": time.Since(began).Milliseconds()})
	return nil
}

// markLost adds what to r's lost state and forgets that a client was
// told of it, so the next stateful run says kernel_restarted again.
func markLost(r *sessionRecord, what []string) {
	for _, w := range what {
		if !slices.Contains(r.Lost, w) {
			r.Lost = append(r.Lost, w)
		}
		r.Told = slices.DeleteFunc(r.Told, func(t string) bool { return t == w })
	}
}

// resume brings s back when it is paused: each executor restores what
// it kept. A restore that fails leaves the session active with its
// workspace; its kernel is lost and the next stateful run says so.
func (m *Manager) resume(ctx context.Context, s *Session, rec *audit.Record) error {
	s.pauseMu.Lock()
	defer s.pauseMu.Unlock()
	s.mu.Lock()
	state := s.rec.State
	s.mu.Unlock()
	if state != StatePaused {
		setDetail(rec, "already", "true")
		return nil
	}
	began := time.Now()
	restored := false
	for _, e := range m.deps.Executors {
		if pz, ok := e.(executors.SessionPauser); ok {
			ok, err := pz.ResumeSession(ctx, s.rec.Key)
			if err != nil {
				m.log.WarnContext(ctx, "resume: restore failed; the kernel starts afresh",
					"session_id", s.rec.Name, "executor", e.Kind(), "err", err)
			}
			restored = restored || ok
		}
	}
	s.mu.Lock()
	s.rec.State = StateActive
	// A kernel the pause kept that no executor brought back (its
	// checkpoint failed to restore, or is gone with the disk it was on)
	// is lost: the next stateful run says so.
	failed := !restored && slices.Contains(s.rec.Held, HeldKernel)
	if failed {
		s.rec.Held = slices.DeleteFunc(s.rec.Held, func(h string) bool { return h == HeldKernel })
		markLost(&s.rec, []string{HeldKernel})
	}
	s.lastActive = time.Now()
	s.mu.Unlock()
	if err := m.save(ctx, s); err != nil {
		return err
	}
	ms := time.Since(began).Milliseconds()
	setDetail(rec, "restored", strconv.FormatBool(!failed))
	setDetail(rec, "duration_ms", strconv.FormatInt(ms, 10))
	m.emit(ctx, "session.resumed", s.Ref(), map[string]any{"restored": !failed, "duration_ms": ms,
		"auto": rec.Principal == autoResumer})
	return nil
}

// autoResumer is the audit principal of a resume a request caused.
const autoResumer = "system:auto-resume"

// autoResume resumes s when it is paused: the request that opened it
// goes on as if it had never been (Open calls it).
func (m *Manager) autoResume(ctx context.Context, s *Session) error {
	s.mu.Lock()
	paused := s.rec.State == StatePaused
	s.mu.Unlock()
	if !paused {
		return nil
	}
	start := time.Now()
	ref := s.Ref()
	rec := &audit.Record{RequestID: requestIDFrom(ctx), Kind: KindSessionResume, Tenant: ref.Tenant,
		SessionID: ref.ID, Principal: autoResumer}
	err := m.resume(ctx, s, rec)
	m.record(ctx, rec, fileOutcome(err), err, start)
	return err
}

// idlePauser is the audit principal of a pause for idleness.
const idlePauser = "system:idle-pause"

// pauseIdle pauses every active session served here that has had no
// request for Config.PauseIdleAfter (the reaper calls it).
func (m *Manager) pauseIdle(ctx context.Context, now time.Time) {
	if m.cfg.PauseIdleAfter <= 0 {
		return
	}
	for _, s := range m.table.all() {
		s.mu.Lock()
		due := s.rec.State == StateActive && s.running == 0 && now.Sub(s.lastActive) > m.cfg.PauseIdleAfter
		s.mu.Unlock()
		if !due {
			continue
		}
		start := time.Now()
		ref := s.Ref()
		rec := &audit.Record{Kind: KindSessionPause, Tenant: ref.Tenant, SessionID: ref.ID, Principal: idlePauser}
		setDetail(rec, "idle", "true")
		err := m.pause(ctx, s, rec)
		if errors.Is(err, errSessionBusy) {
			continue // a run began meanwhile: not idle
		}
		if err != nil {
			m.log.WarnContext(ctx, "idle pause", "session_id", ref.ID, "err", err)
		}
		m.record(ctx, rec, fileOutcome(err), err, start)
	}
}

// dropPaused deletes what executors kept for a paused session that is
// released (deleted, expired).
func (m *Manager) dropPaused(ctx context.Context, key string) {
	for _, e := range m.deps.Executors {
		if pz, ok := e.(executors.SessionPauser); ok {
			pz.DropPaused(ctx, key)
		}
	}
}

// movedHolds is what a session that moved to this replica still holds
// and what it lost: what its old replica's processes held is lost, but a
// paused session's kernel is its checkpoint on the snapshot storage a
// fleet shares, which this replica restores on resume (and marks lost
// then if it cannot reach it).
func movedHolds(r sessionRecord) (lost, told, held []string) {
	for _, h := range r.Held {
		if h == HeldKernel && r.State == StatePaused {
			held = append(held, h)
			continue
		}
		lost = append(lost, h)
	}
	return lost, nil, held
}
