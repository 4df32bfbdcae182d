package manager

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/executors"
)

// Event is one lifecycle event (DESIGN.md §13): session.*, run.*,
// approval.*, egress.denied. Data carries digests and outcomes, never
// code.
type Event struct {
	Type      string
	Tenant    string
	SessionID string
	Data      map[string]any
}

// EventSink keeps and delivers lifecycle events (package events, wired in
// main); nil drops them. Publish keeps several events in order and, where
// it can, in one commit.
type EventSink interface {
	Publish(ctx context.Context, es ...Event) error
}

// eventQueue bounds the events waiting for the sink. Events are handed
// to the sink by one goroutine, in order, off the request's path: a run
// does not wait for the event log's commit. A full queue blocks the
// emitter for at most eventWait before the event is dropped and logged.
const (
	eventQueue = 4096
	eventWait  = time.Second
	// eventBatch bounds the events handed to the sink at once: what
	// queued while the sink's last commit ran.
	eventBatch = 64
)

// emit hands an event to the sink.
func (m *Manager) emit(ctx context.Context, typ string, ref SessionRef, data map[string]any) {
	if m.deps.Events == nil {
		return
	}
	e := Event{Type: typ, Tenant: ref.Tenant, SessionID: ref.ID, Data: data}
	select {
	case m.events <- e:
		return
	default:
	}
	t := time.NewTimer(eventWait)
	defer t.Stop()
	select {
	case m.events <- e:
	case <-t.C:
		m.log.ErrorContext(ctx, "lifecycle event dropped: the event log is not keeping up", "type", typ, "session_id", ref.ID)
	}
}

// publish hands queued events to the sink until Close, and then what is
// still queued. An event emitted after Close waits eventWait and is
// dropped, logged.
func (m *Manager) publish() {
	defer close(m.eventsDone)
	batch := make([]Event, 0, eventBatch)
	for {
		select {
		case e := <-m.events:
			batch = m.publishQueued(append(batch[:0], e))
		case <-m.stopEvents:
			for {
				select {
				case e := <-m.events:
					batch = m.publishQueued(append(batch[:0], e))
				default:
					return
				}
			}
		}
	}
}

// publishQueued adds to batch what is queued, up to eventBatch, and
// hands it to the sink.
func (m *Manager) publishQueued(batch []Event) []Event {
queued:
	for len(batch) < eventBatch {
		select {
		case e := <-m.events:
			batch = append(batch, e)
		default:
			break queued
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), auditWriteTimeout)
	defer cancel()
	if err := m.deps.Events.Publish(ctx, batch...); err != nil {
		m.log.Error("lifecycle events not kept", "type", batch[0].Type, "session_id", batch[0].SessionID, "events", len(batch), "err", err)
	}
	return batch
}

// runEventData is what run.* events say of a run: its request, digest,
// decision and outcome.
func runEventData(rec *audit.Record, outcome string) map[string]any {
	d := map[string]any{"request_id": rec.RequestID, "kind": rec.Kind, "language": rec.Language,
		"code_sha256": rec.CodeSHA256, "action": rec.Action, "executor": rec.Executor}
	if outcome != "" {
		d["outcome"] = outcome
		if rec.ExitCode != nil {
			d["exit_code"] = *rec.ExitCode
		}
		d["duration_ms"] = rec.DurationMS
	}
	return d
}

// held records what a run left holding state for its session: its
// kernel, or its executor's per-session state. A stateful run whose
// kernel started afresh although the session had one on a process that
// is gone says so (kernel_restarted), once.
func (m *Manager) held(ctx context.Context, s *Session, exec executors.Executor, res executors.Result) {
	if res.Cell != nil {
		if !res.Cell.KernelRestarted && m.tell(ctx, s, HeldKernel) {
			res.Cell.KernelRestarted = true
		}
		m.hold(ctx, s, HeldKernel)
	}
	if _, ok := exec.(executors.SessionReleaser); ok {
		m.hold(ctx, s, heldExecutor(string(exec.Kind())))
	}
}

// Start loads what this replica served before it stopped, marks what its
// processes held as lost (none of them is alive: the session moved
// nowhere, but its kernel, browser and warm processes are gone), and
// starts the expiry of sessions whose TTL or idle timeout passes. Without
// Start, sessions live in memory only and never expire.
func (m *Manager) Start(ctx context.Context) error {
	if m.deps.Sessions == nil {
		return errors.New("manager: Start needs Deps.Sessions")
	}
	store, err := openSessionStore(ctx, m.deps.Sessions)
	if err != nil {
		return err
	}
	n, err := store.orphaned(ctx, m.replica())
	if err != nil {
		return err
	}
	if n > 0 {
		m.log.WarnContext(ctx, "sessions this replica served before it stopped lost their process state",
			"sessions", n, "replica", m.replica())
	}
	m.store, m.started = store, time.Now()
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	m.stopReap = cancel
	m.reapDone = make(chan struct{})
	go m.reap(rctx)
	return nil
}

// reap expires sessions every Config.ReapInterval.
func (m *Manager) reap(ctx context.Context) {
	defer close(m.reapDone)
	t := time.NewTicker(m.cfg.ReapInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			m.expireDue(ctx, now)
			m.pauseIdle(ctx, now)      // pause.go
			m.sweepSnapshots(ctx, now) // snapshot.go
		}
	}
}

// expireDue releases every session served here whose TTL passed, or that
// has had no request for its idle timeout, through the one release path.
func (m *Manager) expireDue(ctx context.Context, now time.Time) {
	recs, err := m.store.expirable(ctx, m.replica(), false)
	if err != nil {
		m.log.WarnContext(ctx, "session expiry: list sessions", "err", err)
		return
	}
	for _, r := range recs {
		m.expireIfDue(ctx, r, now, false)
	}
	if m.deps.Placement == nil {
		return
	}
	// Sessions of a replica that is gone (scaled down, renamed) expire
	// too: a due one is claimed (only a session whose replica's lease
	// lapsed is taken) and released here. A live replica's are its own.
	others, err := m.store.expirable(ctx, m.replica(), true)
	if err != nil {
		m.log.WarnContext(ctx, "session expiry: list other replicas' sessions", "err", err)
		return
	}
	for _, r := range others {
		m.expireIfDue(ctx, r, now, true)
	}
}

// expireIfDue releases r's session when its TTL passed or it has been
// idle past its idle timeout. adopt: r is another replica's, claimed
// first.
func (m *Manager) expireIfDue(ctx context.Context, r sessionRecord, now time.Time, adopt bool) {
	// Activity is kept in memory: a session this process has not served
	// yet counts as active since its creation or since this process
	// started, whichever is later.
	last := r.CreatedAt
	if last.Before(m.started) {
		last = m.started
	}
	if s, ok := m.table.cached(r.Key); ok {
		s.mu.Lock()
		busy := s.running > 0
		last = s.lastActive
		s.mu.Unlock()
		if busy {
			return // a run in flight ends first (its own timeout bounds it)
		}
	}
	ttl := !r.ExpiresAt.IsZero() && now.After(r.ExpiresAt)
	idle := r.IdleTimeout > 0 && now.Sub(last) > r.IdleTimeout
	if !ttl && !idle {
		return
	}
	if adopt {
		owner, err := m.deps.Placement.Claim(ctx, r.Key)
		if err != nil || !owner.Local {
			return
		}
	}
	ref := SessionRef{Tenant: r.Tenant, ID: r.Name, Key: r.Key}
	m.log.InfoContext(ctx, "session expired", "session_id", r.Name, "tenant", r.Tenant, "ttl", ttl, "idle", idle,
		"from", r.Replica)
	if err := m.release(ctx, ref, releaseExpired, false); err != nil {
		m.log.WarnContext(ctx, "session expiry: release", "session_id", r.Name, "err", err)
	}
	m.recordExpiry(ctx, ref, ttl)
}

// KindSessionExpire is the audit kind of a session's expiry.
const KindSessionExpire = "session.expire"

func (m *Manager) recordExpiry(ctx context.Context, ref SessionRef, ttl bool) {
	rec := &audit.Record{Kind: KindSessionExpire, Tenant: ref.Tenant, SessionID: ref.ID, Principal: "system:expiry"}
	setDetail(rec, "ttl", strconv.FormatBool(ttl))
	m.record(ctx, rec, audit.OutcomeOK, nil, time.Now())
}

// SessionPatch changes a session's timeouts (PATCH /v1/sessions/{id}).
type SessionPatch struct {
	// TimeoutS sets the TTL to end that many seconds from now, as E2B's
	// setTimeout does; 0 removes it, as at creation; nil leaves it.
	TimeoutS *int
	// IdleTimeoutS sets the idle timeout; 0 removes it; nil leaves it.
	IdleTimeoutS *int
	// Labels replace the session's labels; nil leaves them.
	Labels map[string]string
}

// PatchSession changes one of the caller's sessions.
func (m *Manager) PatchSession(ctx context.Context, p Principal, id string, patch SessionPatch) (SessionInfo, error) {
	ref, err := m.ResolveSession(p, id)
	if err != nil {
		return SessionInfo{}, err
	}
	if err := m.admitted(ctx, m.rateRef(p, ref), opRead, func() error { return nil }); err != nil {
		return SessionInfo{}, err
	}
	s, err := m.local(WithSessionPeek(ctx), ref)
	if err != nil {
		return SessionInfo{}, err
	}
	if _, kept := m.table.cached(ref.Key); !kept {
		return SessionInfo{}, errSessionNotFound
	}
	s.mu.Lock()
	switch {
	case patch.TimeoutS == nil:
	case *patch.TimeoutS == 0: // as at creation: no TTL
		s.rec.ExpiresAt = time.Time{}
	default:
		s.rec.ExpiresAt = time.Now().Add(time.Duration(*patch.TimeoutS) * time.Second)
	}
	if patch.IdleTimeoutS != nil {
		s.rec.IdleTimeout = time.Duration(*patch.IdleTimeoutS) * time.Second
	}
	if patch.Labels != nil {
		s.rec.Labels = patch.Labels
	}
	expires := s.rec.ExpiresAt
	s.mu.Unlock()
	if err := m.save(ctx, s); err != nil {
		return SessionInfo{}, err
	}
	m.emit(ctx, "session.updated", ref, map[string]any{"expires_at": expires})
	return m.describe(ctx, ref)
}

// CreateSession creates a session explicitly (POST /v1/sessions): id must
// not name a live session of the caller's tenant.
func (m *Manager) CreateSession(ctx context.Context, p Principal, id string, o OpenOptions) (SessionInfo, Owner, error) {
	o.Create = true
	ref, err := m.ResolveSession(p, id)
	if err != nil {
		return SessionInfo{}, Owner{}, err
	}
	release, err := m.admit(ctx, ref, opCreate)
	defer release()
	if err != nil {
		return SessionInfo{}, Owner{}, err
	}
	if err := m.requireSnapshotMode(ctx, p, ref, o.Snapshot); err != nil {
		return SessionInfo{}, Owner{}, err
	}
	if o.FromSnapshot != "" {
		return m.createFromSnapshot(ctx, p, ref, o)
	}
	_, owner, err := m.open(ctx, ref, o)
	if err != nil || !owner.Local {
		return SessionInfo{}, owner, err
	}
	if _, err := m.deps.Workspaces.Ensure(ctx, ref.Key); err != nil {
		return SessionInfo{}, owner, err
	}
	info, err := m.describe(ctx, ref)
	return info, owner, err
}

type peekKey struct{}

// WithSessionPeek makes the manager open sessions without creating
// them.
func WithSessionPeek(ctx context.Context) context.Context {
	return context.WithValue(ctx, peekKey{}, true)
}

// shutdownSessions releases the state every session served here holds (the
// gateway is stopping), leaving their records to say what they held.
//
// The sessions are released shutdownParallel at a time: each release waits
// on the engine (a session sandbox or pool instance removed), and one after
// the other, a gateway holding a few dozen sessions on a busy engine spent
// the whole shutdown deadline here, leaving none for the executors' Close.
func (m *Manager) shutdownSessions(ctx context.Context) error {
	all := m.table.all()
	errs := make([]error, len(all))
	sem := make(chan struct{}, shutdownParallel)
	var wg sync.WaitGroup
	for i, s := range all {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = m.release(ctx, s.Ref(), releaseShutdown, false)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// shutdownParallel is how many sessions a shutdown releases at once.
const shutdownParallel = 8
