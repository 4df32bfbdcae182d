package manager

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/executors"
)

// Named snapshots (issue 30): POST /v1/sessions/{id}/snapshots {name}
// keeps a session's state under a name, GET /v1/snapshots lists the
// tenant's, DELETE /v1/snapshots/{id} deletes one, and POST /v1/sessions
// {from_snapshot} starts a new session from one. A snapshot is a copy of
// the workspace and, where an executor keeps memory (gVisor), a
// checkpoint of the session's kernel taken while it goes on running.
//
// Each snapshot is one directory under Config.Snapshots.Dir, the
// gateway's data directory, which every replica of a fleet shares: its
// tenant's directory, then its id, holding meta.json (written last: a
// directory without it is a snapshot being written or one a crash cut
// short, and is collected after an hour), workspace/ and exec/<kind>/.
// The directory is the record: there is no second copy of a snapshot's
// existence to disagree with its files. Quotas are checked under a
// per-tenant lock of this process; two replicas taking a tenant's last
// snapshot at the same instant can exceed its count by one.
//
// A session started from a snapshot is a new session, as a fork's child
// is: its runs are decided afresh and no grant or approval of the
// snapshot's session applies to it; its kernel's random generators are
// reseeded, since every session started from one snapshot would
// otherwise draw the same numbers.

// Audit kinds of snapshots.
const (
	KindSnapshotCreate      = "snapshot.create"
	KindSnapshotDelete      = "snapshot.delete"
	KindSessionFromSnapshot = "session.from_snapshot"
)

// SnapshotConfig is where named snapshots live and how long they are kept.
type SnapshotConfig struct {
	// Dir holds them; "" turns named snapshots off (503).
	Dir string
	// Retention deletes a snapshot this long after it was taken;
	// default 7 days.
	Retention time.Duration
	// Compress writes kernel images compressed (executors.SnapshotOptions).
	Compress bool
}

const defaultSnapshotRetention = 7 * 24 * time.Hour

// SnapshotInfo is one named snapshot as the API shows it.
type SnapshotInfo struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Tenant string `json:"tenant"`
	// Session is the session it was taken of.
	Session string `json:"session"`
	// Memory: sessions started from it get its kernel with its
	// variables; false: its workspace only.
	Memory bool `json:"memory"`
	// Bytes is its size on disk, workspace included; MemoryBytes the
	// kernel images' part.
	Bytes       int64     `json:"bytes"`
	MemoryBytes int64     `json:"memory_bytes"`
	Compressed  bool      `json:"compressed"`
	CreatedAt   time.Time `json:"created_at"`
	ExpiresAt   time.Time `json:"expires_at"`
}

// SnapshotPage is GET /v1/snapshots.
type SnapshotPage struct {
	Snapshots []SnapshotInfo `json:"snapshots"`
}

var snapshotNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
var snapshotIDRe = regexp.MustCompile(`^snap-[0-9a-f]{16}$`)

var (
	errSnapshotNotFound = errcode.New(errcode.NotFound, "no snapshot of that id in this tenant")
	errSnapshotExists   = errcode.New(errcode.Conflict, "the tenant has a snapshot of that name; delete it or choose another name")
	errSnapshotsOff     = errcode.New(errcode.ExecutorUnavailable, "named snapshots are not configured on this gateway")
	// ErrSnapshotCountQuota and ErrSnapshotByteQuota refuse a snapshot
	// over the tenant's quota (quota_exceeded, 429).
	ErrSnapshotCountQuota = errcode.New(errcode.QuotaExceeded, "the tenant has its maximum number of snapshots; delete one first")
	ErrSnapshotByteQuota  = errcode.New(errcode.QuotaExceeded, "the tenant's snapshots are at their byte quota; delete one first")
)

// snapshotLocks holds, per tenant, the process half of the quota lock
// (lockTenantSnapshots in snapshot_quota.go adds the fleet's flock).
type snapshotLocks struct {
	mu      sync.Mutex
	tenants map[string]*sync.Mutex
	sweptAt time.Time
}

func (l *snapshotLocks) tenant(t string) *sync.Mutex {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tenants == nil {
		l.tenants = map[string]*sync.Mutex{}
	}
	if l.tenants[t] == nil {
		l.tenants[t] = &sync.Mutex{}
	}
	return l.tenants[t]
}

// tenantSnapshotDir is tenant's directory; a session without a tenant
// (made before tenants) has "_", which no tenant name can be.
func (m *Manager) tenantSnapshotDir(tenant string) string {
	if tenant == "" {
		tenant = "_"
	}
	return filepath.Join(m.cfg.Snapshots.Dir, tenant)
}

// tenantSnapshots reads tenant's complete, unexpired snapshots.
func (m *Manager) tenantSnapshots(tenant string, now time.Time) []SnapshotInfo {
	entries, _ := os.ReadDir(m.tenantSnapshotDir(tenant))
	var out []SnapshotInfo
	for _, en := range entries {
		if !snapshotIDRe.MatchString(en.Name()) {
			continue
		}
		info, ok := readSnapshotMeta(filepath.Join(m.tenantSnapshotDir(tenant), en.Name()))
		if ok && now.Before(info.ExpiresAt) {
			out = append(out, info)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out
}

func readSnapshotMeta(dir string) (SnapshotInfo, bool) {
	raw, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	var info SnapshotInfo
	if err != nil || json.Unmarshal(raw, &info) != nil || info.ID != filepath.Base(dir) {
		return SnapshotInfo{}, false
	}
	return info, true
}

func writeSnapshotMeta(dir string, info SnapshotInfo) error {
	raw, err := json.Marshal(info)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, "meta.json.tmp")
	if err := os.WriteFile(tmp, raw, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, "meta.json"))
}

// findSnapshot is id's snapshot in tenant; another tenant's is not
// found, as one that does not exist.
func (m *Manager) findSnapshot(tenant, id string) (SnapshotInfo, string, error) {
	if m.cfg.Snapshots.Dir == "" {
		return SnapshotInfo{}, "", errSnapshotsOff
	}
	if !snapshotIDRe.MatchString(id) {
		return SnapshotInfo{}, "", fmt.Errorf("%w: %.80q", errSnapshotNotFound, id)
	}
	dir := filepath.Join(m.tenantSnapshotDir(tenant), id)
	info, ok := readSnapshotMeta(dir)
	if !ok || !time.Now().Before(info.ExpiresAt) {
		return SnapshotInfo{}, "", fmt.Errorf("%w: %s", errSnapshotNotFound, id)
	}
	return info, dir, nil
}

// CreateSnapshot keeps one of the caller's sessions under name.
func (m *Manager) CreateSnapshot(ctx context.Context, p Principal, id, name string) (info SnapshotInfo, err error) {
	start := time.Now()
	rec := &audit.Record{RequestID: requestIDFrom(ctx), Kind: KindSnapshotCreate, Tenant: p.Tenant, SessionID: id,
		Principal: p.Role + ":" + p.Name}
	defer func() { m.record(ctx, rec, fileOutcome(err), err, start) }()
	if m.cfg.Snapshots.Dir == "" {
		return SnapshotInfo{}, errSnapshotsOff
	}
	if !snapshotNameRe.MatchString(name) {
		return SnapshotInfo{}, invalidFields(FieldError{Field: "name", Code: "format",
			Message: "1 to 64 of [A-Za-z0-9._-], starting with a letter or digit"})
	}
	ref, err := m.ResolveSession(p, id)
	if err != nil {
		return SnapshotInfo{}, err
	}
	rec.Tenant, rec.SessionID = ref.Tenant, ref.ID
	err = m.withPeekedSession(ctx, p, ref, func(s *Session) error {
		if err := m.autoResume(ctx, s); err != nil {
			return err
		}
		info, err = m.snapshot(ctx, s, name)
		return err
	})
	if err != nil {
		return SnapshotInfo{}, err
	}
	setDetail(rec, "snapshot", info.ID)
	setDetail(rec, "name", info.Name)
	setDetail(rec, "memory", strconv.FormatBool(info.Memory))
	setDetail(rec, "bytes", strconv.FormatInt(info.Bytes, 10))
	m.emit(ctx, "snapshot.created", ref, map[string]any{"snapshot": info.ID, "name": info.Name,
		"memory": info.Memory, "bytes": info.Bytes, "duration_ms": time.Since(start).Milliseconds()})
	return info, nil
}

// snapshot writes s's snapshot, within the tenant's quota.
func (m *Manager) snapshot(ctx context.Context, s *Session, name string) (SnapshotInfo, error) {
	s.pauseMu.Lock()
	defer s.pauseMu.Unlock()
	s.mu.Lock()
	busy, srec := s.running > 0, s.rec
	s.mu.Unlock()
	if busy {
		return SnapshotInfo{}, errSessionBusy
	}
	now := time.Now()
	info := SnapshotInfo{ID: "snap-" + randomHex(8), Name: name, Tenant: srec.Tenant, Session: srec.Name,
		Compressed: m.cfg.Snapshots.Compress, CreatedAt: now.UTC(), ExpiresAt: now.Add(m.snapshotRetention()).UTC()}
	dir, err := m.reserveSnapshot(srec.Tenant, name, info.ID, now)
	if err != nil {
		return SnapshotInfo{}, err
	}
	if err := m.writeSnapshot(ctx, srec.Key, dir, &info); err != nil {
		m.removeSnapshotDir(dir, info.ID)
		return SnapshotInfo{}, err
	}
	if err := m.commitSnapshot(dir, info, time.Now()); err != nil {
		m.removeSnapshotDir(dir, info.ID)
		return SnapshotInfo{}, err
	}
	return info, nil
}

// writeSnapshot copies the workspace and has each executor that keeps
// memory write its kernel into dir.
func (m *Manager) writeSnapshot(ctx context.Context, key, dir string, info *SnapshotInfo) error {
	if _, err := m.deps.Workspaces.Ensure(ctx, key); err != nil {
		return err
	}
	if _, err := m.deps.Workspaces.SaveCopy(ctx, key, filepath.Join(dir, "workspace"), info.ID); err != nil {
		return err
	}
	for _, e := range m.deps.Executors {
		sn, ok := e.(executors.SessionSnapshotter)
		if !ok {
			continue
		}
		edir := filepath.Join(dir, "exec", string(e.Kind()))
		pd, err := sn.SaveSnapshot(ctx, key, edir, executors.SnapshotOptions{Compress: m.cfg.Snapshots.Compress})
		if err != nil {
			// The session goes on; a snapshot without the memory it
			// was asked for would surprise whoever starts from it.
			return fmt.Errorf("manager: snapshot the %s kernel: %w", e.Kind(), err)
		}
		info.Memory = info.Memory || pd.Memory
		info.MemoryBytes += pd.Bytes
	}
	info.Bytes = treeSize(dir)
	return nil
}

func (m *Manager) snapshotRetention() time.Duration {
	if m.cfg.Snapshots.Retention > 0 {
		return m.cfg.Snapshots.Retention
	}
	return defaultSnapshotRetention
}

// removeSnapshotDir deletes a snapshot's files and the uid hold its
// workspace copy took.
func (m *Manager) removeSnapshotDir(dir, id string) {
	// meta.json first: a half-deleted snapshot is never listed.
	_ = os.Remove(filepath.Join(dir, "meta.json"))
	_ = os.RemoveAll(dir)
	m.deps.Workspaces.DropHold(id)
}

// ListSnapshots lists the caller's tenant's snapshots.
func (m *Manager) ListSnapshots(ctx context.Context, p Principal) (SnapshotPage, error) {
	if p.Tenant == "" {
		return SnapshotPage{}, errNoTenant
	}
	if m.cfg.Snapshots.Dir == "" {
		return SnapshotPage{}, errSnapshotsOff
	}
	err := m.admitted(ctx, SessionRef{Tenant: p.Tenant}, opRead, func() error { return nil })
	if err != nil {
		return SnapshotPage{}, err
	}
	// The reaper collects expired snapshots; a listing does too, so a
	// manager not Started (a library use) still collects them.
	m.sweepSnapshots(ctx, time.Now())
	list := m.tenantSnapshots(p.Tenant, time.Now())
	if list == nil {
		list = []SnapshotInfo{}
	}
	return SnapshotPage{Snapshots: list}, nil
}

// DeleteSnapshot deletes one of the caller's tenant's snapshots.
func (m *Manager) DeleteSnapshot(ctx context.Context, p Principal, id string) (err error) {
	start := time.Now()
	rec := &audit.Record{RequestID: requestIDFrom(ctx), Kind: KindSnapshotDelete, Tenant: p.Tenant,
		Principal: p.Role + ":" + p.Name}
	setDetail(rec, "snapshot", id)
	defer func() { m.record(ctx, rec, fileOutcome(err), err, start) }()
	if p.Tenant == "" {
		return errNoTenant
	}
	if err := m.admitted(ctx, SessionRef{Tenant: p.Tenant}, opRead, func() error { return nil }); err != nil {
		return err
	}
	info, dir, err := m.findSnapshot(p.Tenant, id)
	if err != nil {
		return err
	}
	rec.SessionID = info.Session
	m.removeSnapshotDir(dir, info.ID)
	m.emit(ctx, "snapshot.deleted", SessionRef{Tenant: info.Tenant, ID: info.Session},
		map[string]any{"snapshot": info.ID, "name": info.Name, "bytes": info.Bytes, "why": "deleted"})
	return nil
}

// sweepSnapshots deletes expired snapshots and directories a crash left
// half written, at most once a minute, or once per retention when that
// is shorter (the reaper calls it).
func (m *Manager) sweepSnapshots(ctx context.Context, now time.Time) {
	if m.cfg.Snapshots.Dir == "" {
		return
	}
	m.snaps.mu.Lock()
	due := now.Sub(m.snaps.sweptAt) >= min(time.Minute, m.snapshotRetention())
	if due {
		m.snaps.sweptAt = now
	}
	m.snaps.mu.Unlock()
	if due {
		m.sweepSnapshotsNow(ctx, now)
	}
}

// halfWrittenAge is how old a snapshot directory without meta.json must
// be to be collected: no snapshot takes that long to write.
const halfWrittenAge = time.Hour

func (m *Manager) sweepSnapshotsNow(ctx context.Context, now time.Time) {
	tenants, _ := os.ReadDir(m.cfg.Snapshots.Dir)
	for _, t := range tenants {
		tdir := filepath.Join(m.cfg.Snapshots.Dir, t.Name())
		snaps, _ := os.ReadDir(tdir)
		for _, sn := range snaps {
			if !snapshotIDRe.MatchString(sn.Name()) {
				continue
			}
			dir := filepath.Join(tdir, sn.Name())
			info, ok := readSnapshotMeta(dir)
			switch {
			case ok && now.Before(info.ExpiresAt):
				continue
			case !ok:
				if st, err := os.Stat(dir); err != nil || now.Sub(st.ModTime()) < halfWrittenAge {
					continue
				}
				m.removeSnapshotDir(dir, sn.Name())
				continue
			}
			m.removeSnapshotDir(dir, info.ID)
			rec := &audit.Record{Kind: KindSnapshotDelete, Tenant: info.Tenant, SessionID: info.Session, Principal: "system:retention"}
			setDetail(rec, "snapshot", info.ID)
			setDetail(rec, "expired", "true")
			m.record(ctx, rec, OutcomeOK, nil, now)
			m.emit(ctx, "snapshot.deleted", SessionRef{Tenant: info.Tenant, ID: info.Session},
				map[string]any{"snapshot": info.ID, "name": info.Name, "bytes": info.Bytes, "why": "expired"})
		}
	}
}

// createFromSnapshot creates ref's session from a snapshot of its tenant
// (CreateSession with OpenOptions.FromSnapshot): the snapshot's
// workspace is copied and each executor restores the kernel it kept.
func (m *Manager) createFromSnapshot(ctx context.Context, p Principal, ref SessionRef, o OpenOptions) (SessionInfo, Owner, error) {
	start := time.Now()
	snap, dir, err := m.findSnapshot(ref.Tenant, o.FromSnapshot)
	if err != nil {
		return SessionInfo{}, Owner{}, err
	}
	if snap.Memory && o.Snapshot == "" {
		// Its kernel is restored where memory is kept: its cells must
		// go there too.
		o.Snapshot = executors.SnapshotMemory
	}
	_, owner, err := m.open(ctx, ref, o)
	if err != nil || !owner.Local {
		return SessionInfo{}, owner, err
	}
	ws, err := m.deps.Workspaces.FromCopy(ctx, filepath.Join(dir, "workspace"), ref.Key)
	if err != nil {
		_ = m.release(ctx, ref, releaseDelete, true)
		return SessionInfo{}, owner, err
	}
	restored := false
	for _, e := range m.deps.Executors {
		sn, ok := e.(executors.SessionSnapshotter)
		if !ok {
			continue
		}
		ok, err := sn.RestoreSnapshot(ctx, filepath.Join(dir, "exec", string(e.Kind())),
			executors.ForkChild{SessionID: ref.Key, WorkspaceDir: ws.Path})
		if err != nil {
			m.log.WarnContext(ctx, "from_snapshot: the kernel was not restored; it starts afresh",
				"session_id", ref.ID, "snapshot", snap.ID, "executor", e.Kind(), "err", err)
		}
		restored = restored || ok
	}
	if restored {
		if c, ok := m.table.cached(ref.Key); ok {
			m.hold(ctx, c, HeldKernel)
		}
	}
	rec := &audit.Record{RequestID: requestIDFrom(ctx), Kind: KindSessionFromSnapshot, Tenant: ref.Tenant, SessionID: ref.ID,
		Principal: p.Role + ":" + p.Name}
	setDetail(rec, "snapshot", snap.ID)
	setDetail(rec, "parent", snap.Session)
	setDetail(rec, "memory", strconv.FormatBool(restored))
	m.record(ctx, rec, OutcomeOK, nil, start)
	m.emit(ctx, "snapshot.restored", ref, map[string]any{"snapshot": snap.ID, "parent": snap.Session,
		"memory": restored, "duration_ms": time.Since(start).Milliseconds()})
	info, err := m.describe(ctx, ref)
	return info, owner, err
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func treeSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}
