package manager

import (
	"context"
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/workspace"
)

// SessionInfo is what GET /v1/sessions shows. Existence comes from the
// workspace on disk (so sessions survive a restart); activity counters are
// kept in memory since the last start.
type SessionInfo struct {
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"created_at"`
	// LastActiveAt is the last run's start or end, or the last successful
	// file operation, whichever is later.
	LastActiveAt time.Time `json:"last_active_at,omitzero"`
	Runs         int       `json:"runs"`
	Running      int       `json:"running"`
	LastExecutor string    `json:"last_executor,omitempty"`
	// Resources describes live per-session state (e.g. "aio": the pool
	// instance, "browser": the live backend).
	Resources map[string]any `json:"resources,omitempty"`
}

type sessionStats struct {
	lastActive   time.Time
	runs         int
	running      int
	lastExecutor string
}

// sessions holds per-session activity counters.
type sessions struct {
	mu    sync.Mutex
	stats map[string]*sessionStats
}

func newSessions() *sessions { return &sessions{stats: make(map[string]*sessionStats)} }

// statsLocked returns id's counters, creating them. Called with mu held.
func (s *sessions) statsLocked(id string) *sessionStats {
	st, ok := s.stats[id]
	if !ok {
		st = &sessionStats{}
		s.stats[id] = st
	}
	return st
}

func (s *sessions) begin(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.statsLocked(id)
	st.running++
	st.lastActive = time.Now()
}

func (s *sessions) end(id, executor string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.stats[id]; ok {
		st.running--
		st.runs++
		st.lastExecutor = executor
		st.lastActive = time.Now()
	}
}

// touch records activity other than a run (a file operation): it moves
// LastActiveAt and counts nothing, so an agent that only edits files keeps
// its session looking alive to whoever reaps idle sessions.
func (s *sessions) touch(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.statsLocked(id).lastActive = time.Now()
}

func (s *sessions) fill(info *SessionInfo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.stats[info.ID]; ok {
		info.LastActiveAt, info.Runs, info.Running, info.LastExecutor = st.lastActive, st.runs, st.running, st.lastExecutor
	}
}

func (s *sessions) forget(id string) {
	s.mu.Lock()
	delete(s.stats, id)
	s.mu.Unlock()
}

// SessionPage is one page of sessions, ordered by id. NextCursor is the id
// to pass as the next cursor; empty when this is the last page.
type SessionPage struct {
	Sessions   []SessionInfo `json:"sessions"`
	NextCursor string        `json:"next_cursor,omitempty"`
}

// ListSessions pages through sessions with ids greater than cursor, like
// deepagents' SandboxProvider.list.
func (m *Manager) ListSessions(ctx context.Context, cursor string, limit int) (SessionPage, error) {
	switch {
	case limit <= 0:
		limit = 100
	case limit > 1000:
		limit = 1000
	}
	all, err := m.deps.Workspaces.List(ctx)
	if err != nil {
		return SessionPage{}, err
	}
	start := sort.Search(len(all), func(i int) bool { return all[i].SessionID > cursor })
	page := SessionPage{Sessions: []SessionInfo{}}
	for _, w := range all[start:] {
		if len(page.Sessions) == limit {
			page.NextCursor = page.Sessions[limit-1].ID
			break
		}
		info := SessionInfo{ID: w.SessionID, CreatedAt: w.Created}
		m.sessions.fill(&info)
		page.Sessions = append(page.Sessions, info)
	}
	return page, nil
}

// Session describes one session.
func (m *Manager) Session(ctx context.Context, id string) (SessionInfo, error) {
	w, err := m.deps.Workspaces.Get(ctx, id)
	if err != nil {
		return SessionInfo{}, err
	}
	info := SessionInfo{ID: w.SessionID, CreatedAt: w.Created}
	m.sessions.fill(&info)
	for _, r := range m.deps.Resources {
		if r.Describe == nil {
			continue
		}
		if v, ok := r.Describe(id); ok {
			if info.Resources == nil {
				info.Resources = map[string]any{}
			}
			info.Resources[r.Name] = v
		}
	}
	return info, nil
}

// DeleteSession releases what executors hold for the session and, with
// purge, deletes its workspace. Deleting an unknown session succeeds:
// DELETE is idempotent.
func (m *Manager) DeleteSession(ctx context.Context, id string, purge bool) error {
	if err := workspace.ValidateSessionID(id); err != nil {
		return err
	}
	var errs []error
	// Resources first: a browser attached to the session's sandbox must let
	// go before the sandbox itself is released.
	for _, r := range m.deps.Resources {
		if r.Release != nil {
			errs = append(errs, r.Release(ctx, id))
		}
	}
	for _, e := range m.deps.Executors {
		if r, ok := e.(executors.SessionReleaser); ok {
			errs = append(errs, r.ReleaseSession(ctx, id))
		}
	}
	m.sessions.forget(id)
	if purge {
		errs = append(errs, m.deps.Workspaces.Remove(ctx, id))
	}
	return errors.Join(errs...)
}

// ExecutorStatus reports every wired executor's availability, reason and
// capabilities, by kind: the answer the policy decides on (cached for
// Config.AvailabilityTTL), for /readyz and GET /v1/policy.
func (m *Manager) ExecutorStatus(ctx context.Context) map[string]ExecutorStatus {
	return m.avail.Status(ctx)
}
