package manager

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/workspace"
)

// SessionInfo is what GET /v1/sessions shows. Existence comes from the
// workspace on disk (so sessions survive a restart); activity counters are
// kept in memory since the last start.
type SessionInfo struct {
	// ID is the session's name within its tenant; QualifiedID
	// (tenant~name) names it across tenants, as admins need to.
	ID          string    `json:"id"`
	Tenant      string    `json:"tenant"`
	QualifiedID string    `json:"qualified_id"`
	CreatedAt   time.Time `json:"created_at"`
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

func infoOf(w workspace.Info) SessionInfo {
	// A workspace from before tenants has no tenant: "~name" names it.
	return SessionInfo{ID: w.Name, Tenant: w.Tenant, QualifiedID: w.Tenant + workspace.KeySep + w.Name, CreatedAt: w.Created}
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
	key := info.ID // a workspace from before tenants
	if info.Tenant != "" {
		key = workspace.Key(info.Tenant, info.ID)
	}
	if st, ok := s.stats[key]; ok {
		info.LastActiveAt, info.Runs, info.Running, info.LastExecutor = st.lastActive, st.runs, st.running, st.lastExecutor
	}
}

func (s *sessions) forget(id string) {
	s.mu.Lock()
	delete(s.stats, id)
	s.mu.Unlock()
}

// SessionPage is one page of sessions, ordered by tenant and name.
// NextCursor is the cursor of the next page; empty when this is the last.
type SessionPage struct {
	Sessions   []SessionInfo `json:"sessions"`
	NextCursor string        `json:"next_cursor,omitempty"`
}

// SessionQuery selects sessions for ListSessions.
type SessionQuery struct {
	// Tenant keeps one tenant's sessions. A non-admin caller only ever
	// sees its own tenant's; naming another is not_found. An admin sees
	// every tenant's when it is empty.
	Tenant string
	// Cursor is a previous page's NextCursor: the qualified id of the last
	// session it held.
	Cursor string
	Limit  int
}

// ListSessions pages through the sessions the caller may see, like
// deepagents' SandboxProvider.list: its own tenant's, or, for an admin,
// every tenant's (or q.Tenant's).
func (m *Manager) ListSessions(ctx context.Context, p Principal, q SessionQuery) (SessionPage, error) {
	switch {
	case q.Limit <= 0:
		q.Limit = 100
	case q.Limit > 1000:
		q.Limit = 1000
	}
	if p.Tenant == "" {
		return SessionPage{}, errNoTenant
	}
	own := SessionRef{Tenant: p.Tenant}
	if err := m.admitted(ctx, own, opRead, func() error { return nil }); err != nil {
		m.refused(ctx, KindSessionList, p, own, err)
		return SessionPage{}, err
	}
	all, err := m.visibleSessions(ctx, p, q.Tenant)
	if err != nil {
		return SessionPage{}, err
	}
	after := workspace.Info{}
	if q.Cursor != "" {
		after.Tenant, after.Name = workspace.SplitKey(q.Cursor)
		if after.Tenant == "" {
			// A bare name, as cursors were before tenants: in the
			// tenant being listed, like a bare session id.
			after.Tenant = q.Tenant
			if p.Role != RoleAdmin {
				after.Tenant = p.Tenant
			}
		}
	}
	start := sort.Search(len(all), func(i int) bool { return q.Cursor == "" || after.Less(all[i]) })
	page := SessionPage{Sessions: []SessionInfo{}}
	for _, w := range all[start:] {
		if len(page.Sessions) == q.Limit {
			page.NextCursor = page.Sessions[q.Limit-1].QualifiedID
			break
		}
		info := infoOf(w)
		m.sessions.fill(&info)
		page.Sessions = append(page.Sessions, info)
	}
	return page, nil
}

// visibleSessions is every workspace p may list, in List's order.
func (m *Manager) visibleSessions(ctx context.Context, p Principal, tenant string) ([]workspace.Info, error) {
	if p.Tenant == "" {
		return nil, errNoTenant
	}
	switch {
	case p.Role == RoleAdmin && tenant == "":
		return m.deps.Workspaces.List(ctx)
	case p.Role == RoleAdmin:
		return m.deps.Workspaces.ListTenant(ctx, tenant)
	case tenant == "" || tenant == p.Tenant:
		return m.deps.Workspaces.ListTenant(ctx, p.Tenant)
	}
	return nil, fmt.Errorf("%w: tenant %s", ErrNotFound, tenant)
}

// Session describes one of the caller's sessions (any session, for an
// admin).
func (m *Manager) Session(ctx context.Context, p Principal, id string) (SessionInfo, error) {
	ref, err := m.ResolveSession(p, id)
	if err != nil {
		return SessionInfo{}, err
	}
	if err := m.admitted(ctx, m.rateRef(p, ref), opRead, func() error { return nil }); err != nil {
		m.refused(ctx, KindSessionGet, p, ref, err)
		return SessionInfo{}, err
	}
	w, err := m.deps.Workspaces.Get(ctx, ref.Key)
	if err != nil {
		return SessionInfo{}, err
	}
	info := infoOf(w)
	m.sessions.fill(&info)
	for _, r := range m.deps.Resources {
		if r.Describe == nil {
			continue
		}
		if v, ok := r.Describe(ref.Key); ok {
			if info.Resources == nil {
				info.Resources = map[string]any{}
			}
			info.Resources[r.Name] = v
		}
	}
	return info, nil
}

// DeleteSession releases what executors hold for one of the caller's
// sessions (any session, for an admin) and, with purge, deletes its
// workspace. Deleting an unknown session of one's own tenant succeeds:
// DELETE is idempotent. Another tenant's is not_found.
func (m *Manager) DeleteSession(ctx context.Context, p Principal, id string, purge bool) (err error) {
	start := time.Now()
	rec := &audit.Record{RequestID: requestIDFrom(ctx), Kind: KindSessionDelete, Tenant: p.Tenant, SessionID: id,
		Principal: p.Role + ":" + p.Name}
	if purge {
		setDetail(rec, "purge", "true")
	}
	defer func() { m.record(ctx, rec, fileOutcome(err), err, start) }()
	ref, err := m.ResolveSession(p, id)
	if err != nil {
		return err
	}
	rec.Tenant, rec.SessionID = ref.Tenant, ref.ID
	return m.admitted(ctx, m.rateRef(p, ref), opRead, func() error { return m.deleteSession(ctx, ref, purge) })
}

func (m *Manager) deleteSession(ctx context.Context, ref SessionRef, purge bool) error {
	var errs []error
	// Resources first: a browser attached to the session's sandbox must let
	// go before the sandbox itself is released.
	for _, r := range m.deps.Resources {
		if r.Release != nil {
			errs = append(errs, r.Release(ctx, ref.Key))
		}
	}
	for _, e := range m.deps.Executors {
		if r, ok := e.(executors.SessionReleaser); ok {
			errs = append(errs, r.ReleaseSession(ctx, ref.Key))
		}
	}
	m.sessions.forget(ref.Key)
	if purge {
		errs = append(errs, m.deps.Workspaces.Remove(ctx, ref.Key))
	}
	return errors.Join(errs...)
}

// ExecutorStatus reports every wired executor's availability, reason and
// capabilities, by kind: the answer the policy decides on (cached for
// Config.AvailabilityTTL), for /readyz and GET /v1/policy.
func (m *Manager) ExecutorStatus(ctx context.Context) map[string]ExecutorStatus {
	return m.avail.Status(ctx)
}
