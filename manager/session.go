package manager

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/sandgate/sandgate/errcode"
)

// Sessions (DESIGN.md §13). A session is one object the manager owns:
// its key (tenant, name), a state, labels and metadata, timeouts, and its
// placement: the replica that serves it and what holds its state there.
// Every front end reaches a session through Open, which resolves it for
// the caller, finds or claims the replica that serves it, and loads or
// creates its record, once per request. A session another live replica
// serves is that replica's: Open says where, and the front end forwards
// the request there (fleet.Router), so no replica ever starts a second
// copy of a session's state.

// Session states.
const (
	StateActive  = "active"
	StateIdle    = "idle"
	StatePaused  = "paused"
	StateExpired = "expired"
	StateDeleted = "deleted"
)

// What holds a session's state on the replica that serves it (Held,
// Lost): its kernel, its browser, and each executor that keeps warm
// state per session ("executor:docker", ...).
const (
	HeldKernel  = "kernel"
	HeldBrowser = "browser"
)

// heldExecutor names an executor's per-session state in Held.
func heldExecutor(kind string) string { return "executor:" + kind }

// idleAfter is how long a session with no request in flight stays
// "active" before it shows as "idle": a display state only, which no
// timeout depends on.
const idleAfter = time.Minute

// sessionRecord is a session's durable part (session_records).
type sessionRecord struct {
	Key, Tenant, Name string
	State             string
	Labels, Metadata  map[string]string
	FrontEnd, Client  string
	CreatedAt         time.Time
	// ExpiresAt is the session's TTL as a deadline; zero is none. PATCH
	// moves it, as E2B's setTimeout does.
	ExpiresAt   time.Time
	IdleTimeout time.Duration
	Replica     string
	// Held is what this replica's processes hold for the session; Lost
	// what a process that is gone held (set when the session moved, or
	// its replica restarted), and Told which of those a client has been
	// told about (a stateful run's kernel_restarted).
	Held, Lost, Told []string
	MovedFrom        string
	MovedAt          time.Time
	// Snapshot is what a pause must keep (OpenOptions.Snapshot).
	Snapshot string
}

// Session is one session: its record and its activity since this
// replica took it.
type Session struct {
	// saveMu serialises the writes of the record (save).
	saveMu sync.Mutex
	// pauseMu serialises pause and resume (pause.go).
	pauseMu      sync.Mutex
	mu           sync.Mutex
	rec          sessionRecord
	lastActive   time.Time
	runs         int
	running      int
	lastExecutor string
}

// Ref is the session's key, as SessionRef.
func (s *Session) Ref() SessionRef {
	return SessionRef{Tenant: s.rec.Tenant, ID: s.rec.Name, Key: s.rec.Key}
}

func (s *Session) snapshot() sessionRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rec
	r.Labels, r.Metadata = maps.Clone(r.Labels), maps.Clone(r.Metadata)
	r.Held, r.Lost, r.Told = slices.Clone(r.Held), slices.Clone(r.Lost), slices.Clone(r.Told)
	return r
}

// OpenOptions describe the session Open creates when there is none. They
// are ignored for a session that exists.
type OpenOptions struct {
	// FrontEnd names the front end ("rest", "mcp", "deerflow", "e2b",
	// "daytona"); Client the client as it introduced itself.
	FrontEnd, Client string
	Labels, Metadata map[string]string
	// TTL ends the session that long after its creation (PATCH moves
	// it); IdleTimeout ends it after that long without a request. Zero is
	// none: a session a first run created lives until it is deleted, as
	// it always has.
	TTL, IdleTimeout time.Duration
	// Create refuses to open a session that exists (POST /v1/sessions):
	// ErrSessionExists.
	Create bool
	// FromSnapshot starts a created session from a named snapshot of its
	// tenant (snapshot.go).
	FromSnapshot string
	// Snapshot is what a pause must keep of the session ("memory",
	// "filesystem", "none" or empty: no requirement); a requirement no
	// executor its cells go to meets refuses the session
	// (snapshot_route.go).
	Snapshot string
	// peek opens a session without creating its record when it has none
	// (a read: probing a name creates nothing); the session returned is
	// then not kept.
	peek bool
}

// Owner is where a session is served.
type Owner struct {
	// Local: this replica serves it.
	Local bool
	// Replica and URL name the live replica that serves it otherwise.
	Replica, URL string
	// AdoptedFrom names the replica whose lease lapsed and from which
	// this one just took the session.
	AdoptedFrom string
}

// Placement is the fleet's session registry (package fleet, wired in
// main); nil serves every session here (one process).
type Placement interface {
	// Claim returns where key is served, taking it for this replica when
	// no live replica serves it.
	Claim(ctx context.Context, key string) (Owner, error)
	// Release forgets this replica's ownership of key.
	Release(ctx context.Context, key string) error
	// Name is this replica's name.
	Name() string
}

// Errors of Open.
var (
	ErrSessionExists = errcode.New(errcode.Conflict, "a session with this id exists")
	ErrSessionGone   = errcode.New(errcode.NotFound, "the session expired")
	// ErrSessionElsewhere is a session another live replica serves,
	// reached by a caller that cannot forward (the front end should have).
	ErrSessionElsewhere = errcode.New(errcode.SessionUnavailable,
		"the session is served by another replica that could not be reached; retry shortly")
	errPlacement = errcode.New(errcode.SessionUnavailable, "the session registry is unreachable; retry shortly")
)

type sessionCtxKey struct{}

// WithSession gives ctx the session a front end opened, so that the
// manager's methods for the same session use it instead of opening it
// again.
func WithSession(ctx context.Context, s *Session) context.Context {
	return context.WithValue(ctx, sessionCtxKey{}, s)
}

// Open resolves id for p and returns the session, served here, or, when
// another live replica serves it, nil and that replica (the caller
// forwards the request there). A session that does not exist is created
// with o.
func (m *Manager) Open(ctx context.Context, p Principal, id string, o OpenOptions) (*Session, Owner, error) {
	ref, err := m.ResolveSession(p, id)
	if err != nil {
		return nil, Owner{}, err
	}
	return m.open(ctx, ref, o)
}

func (m *Manager) open(ctx context.Context, ref SessionRef, o OpenOptions) (*Session, Owner, error) {
	if s, ok := ctx.Value(sessionCtxKey{}).(*Session); ok && s.rec.Key == ref.Key && !o.Create {
		return s, Owner{Local: true}, nil
	}
	owner := Owner{Local: true}
	if here, _ := ctx.Value(servedHereKey{}).(string); m.deps.Placement != nil && here != ref.Key {
		var err error
		if owner, err = m.deps.Placement.Claim(ctx, ref.Key); err != nil {
			m.log.WarnContext(ctx, "session registry unreachable", "err", err)
			return nil, Owner{}, fmt.Errorf("%w: %w", errPlacement, err)
		}
		if !owner.Local {
			if o.Create {
				return nil, owner, ErrSessionExists
			}
			return nil, owner, nil
		}
	}
	s, err := m.table.get(ctx, m, ref, o, owner)
	if err == nil && !o.peek {
		err = m.autoResume(ctx, s) // pause.go
	}
	return s, owner, err
}

// local is the session a request of the manager's own works in: the one
// its front end opened, or, for a caller that did not (a test, the
// browser router), one Open finds served here. A session served
// elsewhere is ErrSessionElsewhere, never a second copy.
func (m *Manager) local(ctx context.Context, ref SessionRef) (*Session, error) {
	_, peek := ctx.Value(peekKey{}).(bool)
	s, owner, err := m.open(ctx, ref, OpenOptions{FrontEnd: frontEndOf(ctx), peek: peek})
	if err != nil {
		return nil, err
	}
	if !owner.Local {
		return nil, ErrSessionElsewhere
	}
	return s, nil
}

type servedHereKey struct{}

// WithServedHere tells the manager that the front end found session key
// served by this replica for this request (it asked the registry before
// it chose not to forward): Open does not ask again.
func WithServedHere(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, servedHereKey{}, key)
}

type frontEndKey struct{}

// WithFrontEnd names the front end of the requests made with ctx ("mcp",
// "deerflow", "e2b"; "rest" when none is named): the sessions they create
// implicitly and their audit records (detail front_end) say so.
func WithFrontEnd(ctx context.Context, frontEnd string) context.Context {
	return context.WithValue(ctx, frontEndKey{}, frontEnd)
}

func frontEndOf(ctx context.Context) string {
	if f, ok := ctx.Value(frontEndKey{}).(string); ok {
		return f
	}
	return "rest"
}

// sessionTable is the sessions this replica serves, by key.
type sessionTable struct {
	mu   sync.Mutex
	byID map[string]*Session
	// loading serialises the first open of one key, so two requests
	// never create two records.
	loading sync.Mutex
}

func newSessionTable() *sessionTable { return &sessionTable{byID: map[string]*Session{}} }

func (t *sessionTable) cached(key string) (*Session, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.byID[key]
	return s, ok
}

func (t *sessionTable) drop(key string) {
	t.mu.Lock()
	delete(t.byID, key)
	t.mu.Unlock()
}

func (t *sessionTable) all() []*Session {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Collect(maps.Values(t.byID))
}

// get returns ref's session, loading its record or creating one. A
// session just adopted (owner.AdoptedFrom), or whose record names another
// replica, moved here: what its old replica held is lost.
func (t *sessionTable) get(ctx context.Context, m *Manager, ref SessionRef, o OpenOptions, owner Owner) (*Session, error) {
	if s, ok := t.cached(ref.Key); ok && owner.AdoptedFrom == "" {
		if o.Create {
			return nil, ErrSessionExists
		}
		return s, m.checkLive(s)
	}
	t.loading.Lock()
	defer t.loading.Unlock()
	if s, ok := t.cached(ref.Key); ok && owner.AdoptedFrom == "" {
		return s, m.checkLive(s)
	}
	rec, found, err := m.store.load(ctx, ref.Key)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errPlacement, err)
	}
	if found && o.Create && rec.State != StateExpired {
		return nil, ErrSessionExists
	}
	now := time.Now()
	fresh := !found || (o.Create && rec.State == StateExpired)
	if !found && o.peek {
		return &Session{rec: newRecord2(ref, o, now), lastActive: now}, nil
	}
	if fresh {
		rec = newRecord2(ref, o, now)
	}
	me := m.replica()
	moved := !fresh && (owner.AdoptedFrom != "" || (rec.Replica != "" && rec.Replica != me))
	if moved {
		rec.MovedFrom, rec.MovedAt = rec.Replica, now
		if owner.AdoptedFrom != "" {
			rec.MovedFrom = owner.AdoptedFrom
		}
		rec.Lost, rec.Told, rec.Held = movedHolds(rec)
	}
	rec.Replica = me
	if fresh || moved {
		save := m.store.save
		if fresh {
			save = m.store.create
		}
		if err := save(ctx, rec); err != nil {
			return nil, fmt.Errorf("%w: %w", errPlacement, err)
		}
	}
	s := &Session{rec: rec, lastActive: now}
	t.mu.Lock()
	t.byID[ref.Key] = s
	t.mu.Unlock()
	switch {
	case fresh:
		m.emit(ctx, "session.created", s.Ref(), map[string]any{"front_end": rec.FrontEnd, "labels": nonNilMap(rec.Labels)})
	case moved:
		m.emit(ctx, "session.adopted", s.Ref(), map[string]any{"from": rec.MovedFrom, "lost": nonNilSlice(rec.Lost)})
	}
	return s, m.checkLive(s)
}

// checkLive refuses a session that expired: it stays listed, with its
// state, until it is deleted or created again.
func (m *Manager) checkLive(s *Session) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rec.State == StateExpired {
		return ErrSessionGone
	}
	return nil
}

func newRecord2(ref SessionRef, o OpenOptions, now time.Time) sessionRecord {
	rec := sessionRecord{Key: ref.Key, Tenant: ref.Tenant, Name: ref.ID, State: StateActive,
		Labels: maps.Clone(o.Labels), Metadata: maps.Clone(o.Metadata), FrontEnd: o.FrontEnd, Client: Printable(o.Client, clientMax),
		CreatedAt: now, IdleTimeout: o.IdleTimeout, Snapshot: o.Snapshot}
	if o.TTL > 0 {
		rec.ExpiresAt = now.Add(o.TTL)
	}
	return rec
}

func (m *Manager) replica() string {
	if m.deps.Placement != nil {
		return m.deps.Placement.Name()
	}
	return m.cfg.Replica
}

// hold records that what holds state for s now includes what; the
// record is written only when that changes.
func (m *Manager) hold(ctx context.Context, s *Session, what string) {
	s.mu.Lock()
	if slices.Contains(s.rec.Held, what) {
		s.mu.Unlock()
		return
	}
	s.rec.Held = append(s.rec.Held, what)
	s.mu.Unlock()
	if err := m.save(ctx, s); err != nil {
		m.log.WarnContext(ctx, "record what a session holds", "session_id", s.rec.Name, "err", err)
	}
}

// save writes s's record as it is now. Saves of one session are
// serialised and each writes the latest state, so two changes made
// together (a kernel held, a PATCHed TTL) never leave the older one in
// the database.
func (m *Manager) save(ctx context.Context, s *Session) error {
	s.saveMu.Lock()
	defer s.saveMu.Unlock()
	return m.store.save(ctx, s.snapshot())
}

// tell reports whether what was lost and no client was told yet, and
// marks it told.
func (m *Manager) tell(ctx context.Context, s *Session, what string) bool {
	s.mu.Lock()
	if !slices.Contains(s.rec.Lost, what) || slices.Contains(s.rec.Told, what) {
		s.mu.Unlock()
		return false
	}
	s.rec.Told = append(s.rec.Told, what)
	s.mu.Unlock()
	if err := m.save(ctx, s); err != nil {
		m.log.WarnContext(ctx, "record what a client was told of a session", "session_id", s.rec.Name, "err", err)
	}
	return true
}

func (s *Session) begin() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running++
	s.lastActive = time.Now()
}

// end ends a request begin counted; executor is the executor that ran
// it, "" when it did not run.
func (s *Session) end(executor string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running--
	if executor != "" { // it ran: a refused request is no run
		s.runs++
		s.lastExecutor = executor
	}
	s.lastActive = time.Now()
}

// errSessionEnded refuses a run whose session was deleted while the run
// waited (for a human, say): running it would start state for a session
// that no longer holds any.
var errSessionEnded = errcode.New(errcode.NotFound, "the session was deleted while this request waited")

// stillServed checks, just before a run starts, that s is still the
// session this replica serves: a delete while the request waited for
// approval ended it.
func (m *Manager) stillServed(s *Session) error {
	cur, ok := m.table.cached(s.rec.Key)
	if !ok || cur != s {
		return errSessionEnded
	}
	return m.checkLive(s)
}

func (s *Session) touch() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastActive = time.Now()
}

// state is the session's state as shown: "idle" is "active" without a
// request for idleAfter.
func (s *Session) state(now time.Time) string {
	if s.rec.State == StateActive && s.running == 0 && now.Sub(s.lastActive) > idleAfter {
		return StateIdle
	}
	return s.rec.State
}

// Where resolves id for p and returns the replica that serves it, taking
// it for this one when no live replica does: what a front end that
// forwards whole calls (MCP) asks before it runs one here.
func (m *Manager) Where(ctx context.Context, p Principal, id string) (Owner, error) {
	ref, err := m.ResolveSession(p, id)
	if err != nil {
		return Owner{}, err
	}
	if m.deps.Placement == nil {
		return Owner{Local: true}, nil
	}
	owner, err := m.deps.Placement.Claim(ctx, ref.Key)
	if err != nil {
		m.log.WarnContext(ctx, "session registry unreachable", "err", err)
		return Owner{}, fmt.Errorf("%w: %w", errPlacement, err)
	}
	return owner, nil
}
