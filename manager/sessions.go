package manager

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/workspace"
)

// SessionInfo is what GET /v1/sessions shows. Existence comes from the
// workspace on disk (so sessions survive a restart) or the session's
// record; activity counters are kept in memory by the replica that serves
// it, since it took the session.
type SessionInfo struct {
	// ID is the session's name within its tenant; QualifiedID
	// (tenant~name) names it across tenants, as admins need to.
	ID          string    `json:"id"`
	Tenant      string    `json:"tenant"`
	QualifiedID string    `json:"qualified_id"`
	State       string    `json:"state"`
	CreatedAt   time.Time `json:"created_at"`
	// LastActiveAt is the last run's start or end, or the last successful
	// file operation, whichever is later.
	LastActiveAt time.Time         `json:"last_active_at,omitzero"`
	ExpiresAt    time.Time         `json:"expires_at,omitzero"`
	IdleTimeoutS int64             `json:"idle_timeout_s,omitempty"`
	Labels       map[string]string `json:"labels"`
	Metadata     map[string]string `json:"metadata,omitempty"`
	FrontEnd     string            `json:"front_end,omitempty"`
	Client       string            `json:"client,omitempty"`
	Runs         int               `json:"runs"`
	Running      int               `json:"running"`
	LastExecutor string            `json:"last_executor,omitempty"`
	// Placement is where the session's state lives.
	Placement *SessionPlacement `json:"placement,omitempty"`
	// Moved says the session moved to this replica (its replica died, or
	// restarted) and what was lost with the old one.
	Moved *SessionMove `json:"moved,omitempty"`
	// Resources describes live per-session state (e.g. "aio": the pool
	// instance, "browser": the live backend).
	Resources map[string]any `json:"resources,omitempty"`
}

// SessionPlacement is a session's placement as GET shows it.
type SessionPlacement struct {
	Replica string `json:"replica"`
	// Held is what holds state for the session there: "kernel",
	// "browser", "executor:<kind>".
	Held []string `json:"held"`
}

// SessionMove describes a session's last move.
type SessionMove struct {
	From string    `json:"from"`
	At   time.Time `json:"at"`
	// Lost is what held state on the replica it left: a kernel's
	// variables, a browser's pages, warm processes. Workspace files are
	// never lost.
	Lost []string `json:"lost"`
}

func infoOf(w workspace.Info) SessionInfo {
	// A workspace from before tenants has no tenant: "~name" names it.
	return SessionInfo{ID: w.Name, Tenant: w.Tenant, QualifiedID: w.Tenant + workspace.KeySep + w.Name,
		CreatedAt: w.Created, State: StateActive, Labels: map[string]string{}}
}

// fillRecord adds what a session's record says to info.
func fillRecord(info *SessionInfo, r sessionRecord) {
	info.State, info.Labels, info.Metadata = r.State, nonNilMap(r.Labels), r.Metadata
	info.FrontEnd, info.Client, info.ExpiresAt = r.FrontEnd, r.Client, r.ExpiresAt
	info.IdleTimeoutS = int64(r.IdleTimeout / time.Second)
	if !r.CreatedAt.IsZero() {
		info.CreatedAt = r.CreatedAt
	}
	if r.Replica != "" {
		info.Placement = &SessionPlacement{Replica: r.Replica, Held: nonNilSlice(r.Held)}
	}
	if r.MovedFrom != "" {
		info.Moved = &SessionMove{From: r.MovedFrom, At: r.MovedAt, Lost: nonNilSlice(r.Lost)}
	}
}

// fill adds what this replica knows of a session it serves to info.
func (t *sessionTable) fill(info *SessionInfo, now time.Time) {
	key := info.ID // a workspace from before tenants
	if info.Tenant != "" {
		key = workspace.Key(info.Tenant, info.ID)
	}
	s, ok := t.cached(key)
	if !ok {
		return
	}
	fillRecord(info, s.snapshot())
	s.mu.Lock()
	defer s.mu.Unlock()
	info.LastActiveAt, info.Runs, info.Running, info.LastExecutor = s.lastActive, s.runs, s.running, s.lastExecutor
	info.State = s.state(now)
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
	// Labels keeps the sessions that carry every one of these labels
	// (GET /v1/sessions?label=k=v).
	Labels map[string]string
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
	all, recs, err := m.visibleSessions(ctx, p, q.Tenant)
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
	now := time.Now()
	for _, w := range all[start:] {
		info := infoOf(w)
		if r, ok := recs[workspace.Key(w.Tenant, w.Name)]; ok {
			fillRecord(&info, r)
		}
		m.table.fill(&info, now)
		if !hasLabels(info.Labels, q.Labels) {
			continue
		}
		if len(page.Sessions) == q.Limit {
			page.NextCursor = page.Sessions[q.Limit-1].QualifiedID
			break
		}
		page.Sessions = append(page.Sessions, info)
	}
	return page, nil
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// visibleSessions is every session p may list, in List's order: each
// workspace, and each record without one yet (created, nothing written),
// with the records by key.
func (m *Manager) visibleSessions(ctx context.Context, p Principal, tenant string) ([]workspace.Info, map[string]sessionRecord, error) {
	if p.Tenant == "" {
		return nil, nil, errNoTenant
	}
	var ws []workspace.Info
	var err error
	switch {
	case p.Role == RoleAdmin && tenant == "":
		ws, err = m.deps.Workspaces.List(ctx)
	case p.Role == RoleAdmin:
		ws, err = m.deps.Workspaces.ListTenant(ctx, tenant)
	case tenant == "" || tenant == p.Tenant:
		tenant = p.Tenant
		ws, err = m.deps.Workspaces.ListTenant(ctx, p.Tenant)
	default:
		return nil, nil, fmt.Errorf("%w: tenant %s", ErrNotFound, tenant)
	}
	if err != nil {
		return nil, nil, err
	}
	recs, err := m.store.list(ctx, tenant)
	if err != nil {
		return nil, nil, err
	}
	seen := map[string]bool{}
	for _, w := range ws {
		seen[workspace.Key(w.Tenant, w.Name)] = true
	}
	for key, r := range recs {
		if !seen[key] && r.Tenant != "" {
			ws = append(ws, workspace.Info{Tenant: r.Tenant, Name: r.Name, Created: r.CreatedAt})
		}
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i].Less(ws[j]) })
	return ws, recs, nil
}

// Session describes one of the caller's sessions (any session, for an
// admin). The front end forwards a request for a session another replica
// serves there, so this is the serving replica's view.
func (m *Manager) Session(ctx context.Context, p Principal, id string) (SessionInfo, error) {
	ref, err := m.ResolveSession(p, id)
	if err != nil {
		return SessionInfo{}, err
	}
	if err := m.admitted(ctx, m.rateRef(p, ref), opRead, func() error { return nil }); err != nil {
		m.refused(ctx, KindSessionGet, p, ref, err)
		return SessionInfo{}, err
	}
	info, err := m.describe(ctx, ref)
	if err != nil {
		return SessionInfo{}, err
	}
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

// describe is ref's SessionInfo: from its workspace, its record and this
// replica's counters. A session with neither workspace nor record is
// not_found.
func (m *Manager) describe(ctx context.Context, ref SessionRef) (SessionInfo, error) {
	w, werr := m.deps.Workspaces.Get(ctx, ref.Key)
	rec, found, err := m.store.load(ctx, ref.Key)
	if err != nil {
		return SessionInfo{}, err
	}
	_, cached := m.table.cached(ref.Key)
	if werr != nil && !found && !cached {
		return SessionInfo{}, werr
	}
	if werr != nil {
		w = workspace.Info{Tenant: ref.Tenant, Name: ref.ID, Created: rec.CreatedAt}
	}
	info := infoOf(w)
	if found {
		fillRecord(&info, rec)
	}
	m.table.fill(&info, time.Now())
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
	return m.admitted(ctx, m.rateRef(p, ref), opRead, func() error {
		// Its state is where it is served: a delete reaching another
		// replica is forwarded by its front end, never half-done here.
		if here, _ := ctx.Value(servedHereKey{}).(string); here != ref.Key {
			if owner, err := m.Where(ctx, p, id); err != nil {
				return err
			} else if !owner.Local {
				return ErrSessionElsewhere
			}
		}
		return m.release(ctx, ref, releaseDelete, purge)
	})
}

// Why a session's resources are released.
const (
	releaseDelete   = "deleted"
	releaseExpired  = "expired"
	releaseShutdown = "shutdown"
)

// release is the one path that lets go of what a session holds: its
// browser and other resources, each executor's state for it (warm
// processes, kernels, pool instances, egress sockets), and its place in
// the fleet. Delete, expiry and shutdown all come here. A deleted
// session's record goes; an expired one's stays, in state expired, so
// that its clients are told it expired; at shutdown the record stays as
// it is and says what was held (the next start marks it lost).
func (m *Manager) release(ctx context.Context, ref SessionRef, why string, purge bool) error {
	var errs []error
	// Resources first: a browser attached to the session's sandbox must let
	// go before the sandbox itself is released.
	for _, r := range m.deps.Resources {
		if r.Release != nil && !(r.Durable && why == releaseShutdown) {
			errs = append(errs, r.Release(ctx, ref.Key))
		}
	}
	for _, e := range m.deps.Executors {
		if r, ok := e.(executors.SessionReleaser); ok {
			errs = append(errs, r.ReleaseSession(ctx, ref.Key))
		}
	}
	if why == releaseShutdown {
		return errors.Join(errs...)
	}
	m.dropPaused(ctx, ref.Key) // pause.go
	existed := m.existed(ctx, ref)
	errs = append(errs, m.settle(ctx, ref, why))
	if purge {
		errs = append(errs, m.deps.Workspaces.Remove(ctx, ref.Key))
	}
	if existed { // an idempotent delete of an unknown name tells no one
		m.emit(ctx, "session."+why, ref, nil)
	}
	return errors.Join(errs...)
}

// existed reports whether ref is a session: one served here, with a
// record, or with a workspace.
func (m *Manager) existed(ctx context.Context, ref SessionRef) bool {
	if _, ok := m.table.cached(ref.Key); ok {
		return true
	}
	if _, ok, err := m.store.load(ctx, ref.Key); ok || err != nil {
		return true // an unreadable record: better an event too many
	}
	return m.deps.Workspaces.Exists(ref.Key)
}

// settle ends ref's record after its release: gone when deleted, marked
// expired (holding nothing) when it expired; and its fleet ownership.
func (m *Manager) settle(ctx context.Context, ref SessionRef, why string) error {
	var errs []error
	s, cached := m.table.cached(ref.Key)
	m.table.drop(ref.Key)
	switch why {
	case releaseDelete:
		errs = append(errs, m.store.remove(ctx, ref.Key))
	case releaseExpired:
		var r sessionRecord
		if cached {
			r = s.snapshot()
		} else if loaded, ok, err := m.store.load(ctx, ref.Key); err != nil || !ok {
			return err
		} else {
			r = loaded
		}
		r.State, r.Held = StateExpired, nil
		errs = append(errs, m.store.save(ctx, r))
		if cached {
			s.mu.Lock()
			s.rec.State, s.rec.Held = StateExpired, nil
			s.mu.Unlock()
		}
	}
	if m.deps.Placement != nil {
		errs = append(errs, m.deps.Placement.Release(ctx, ref.Key))
	}
	return errors.Join(errs...)
}

// ExecutorStatus reports every wired executor's availability, reason and
// capabilities, by kind: the answer the policy decides on (cached for
// Config.AvailabilityTTL), for /readyz and GET /v1/policy.
func (m *Manager) ExecutorStatus(ctx context.Context) map[string]ExecutorStatus {
	return m.avail.Status(ctx)
}
