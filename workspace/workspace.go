// Package workspace owns the per-session directory tree that every executor
// runs in and that the file API reads and writes.
//
// Each session gets one directory under a configured root. The session id is
// the directory name, so ids are validated strictly before they ever touch a
// path: [A-Za-z0-9._-]{1,128}, and never "." or "..".
//
// The file operations (files.go, walk.go) treat the session directory as
// hostile ground: the session's code owns it and may plant symlinks, hard
// links, FIFOs, or swap a directory for a symlink at any moment. Every
// access goes through an os.Root opened on the session directory, after a
// lexical check of the client's path (path.go) that gives a clear
// path_traversal error. See files.go for the rest of the contract.
package workspace

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/sandgate/sandgate/errcode"
)

// ErrInvalidSessionID is returned for ids that could not safely name a
// directory.
var ErrInvalidSessionID = errcode.New(errcode.InvalidRequest, "invalid session id")

// ErrNotFound is returned when a session has no workspace.
var ErrNotFound = errcode.New(errcode.NotFound, "session not found")

var sessionIDRe = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// ValidateSessionID reports whether id may name a session within its
// tenant (what clients send). The functions of Workspaces take keys (see
// ValidateKey).
func ValidateSessionID(id string) error {
	if !sessionIDRe.MatchString(id) || id == "." || id == ".." {
		return fmt.Errorf("%w: must match [A-Za-z0-9._-]{1,128}, dot and dot-dot excluded", ErrInvalidSessionID)
	}
	return nil
}

// Default range of per-session sandbox uids. It sits far above the ids
// distributions hand to users (1000+) and to subordinate-id ranges
// (100000-165535 by default), so a session never runs as a real account.
const (
	DefaultUIDBase  = 2_000_000
	DefaultUIDCount = 1_000_000
)

// Defaults of the file API's limits (Options).
const (
	DefaultMaxFileBytes   = 32 << 20 // one file written through the API
	DefaultQuotaBytes     = 1 << 30  // all regular files of a session
	DefaultQuotaFiles     = 100_000  // entries (files, directories, links) of a session
	DefaultMaxListEntries = 200      // list and glob results
	DefaultMaxGrepMatches = 100
	DefaultMaxReadChars   = 50_000 // numbered read, line-number prefixes included
	DefaultMaxWalkEntries = 100_000
	DefaultMaxGrepBytes   = 256 << 20
	DefaultUsageMaxAge    = 2 * time.Second
)

// Options tune a Workspaces. Zero fields take the defaults; no limit can be
// switched off.
type Options struct {
	// UIDBase and UIDCount bound the per-session uids.
	UIDBase, UIDCount int

	// MaxFileBytes caps one file written, appended to or edited through
	// the API, and the files an edit loads (file_too_large).
	MaxFileBytes int64
	// QuotaBytes and QuotaFiles cap a session's workspace as seen by API
	// writes (quota_exceeded): the sum of regular file sizes, and the
	// number of entries. Code running in the session is not stopped by
	// them (the executors' RLIMIT_FSIZE bounds each file it writes); an
	// API write that would grow a workspace already over quota is refused.
	QuotaBytes int64
	QuotaFiles int64
	// MaxListEntries caps list and glob results; MaxGrepMatches caps grep
	// matches; MaxReadChars caps one numbered read. Results cut by a cap
	// say truncated.
	MaxListEntries int
	MaxGrepMatches int
	MaxReadChars   int
	// MaxWalkEntries bounds the directory entries one list, glob or grep
	// visits, and MaxGrepBytes the file bytes one grep scans; past either
	// the result is truncated.
	MaxWalkEntries int
	MaxGrepBytes   int64
	// UsageMaxAge is how old the measured usage of a workspace may be
	// before a write measures it again (a walk of the tree). Between walks
	// the API's own writes are added to it; files the code wrote meanwhile
	// count from the next walk.
	UsageMaxAge time.Duration
	// TenantQuotaBytes, when set, caps the regular-file bytes of all of a
	// tenant's sessions together (quota_exceeded), for API writes the way
	// QuotaBytes caps one session's; 0 or less for a tenant means no cap.
	// Sessions without a tenant (bare keys) have none. The tenant's usage
	// is measured by walking its workspaces at most every UsageMaxAge.
	TenantQuotaBytes func(tenant string) int64
	// SyncWrites fsyncs each file before it is renamed into place, so an
	// API write survives a host crash, not only a failed request. Off by
	// default: the workspace is scratch space, and the code writing next
	// to the API does not fsync either.
	SyncWrites bool
}

func (o *Options) applyDefaults() {
	if o.UIDBase <= 0 {
		o.UIDBase = DefaultUIDBase
	}
	if o.UIDCount <= 0 {
		o.UIDCount = DefaultUIDCount
	}
	if o.MaxFileBytes <= 0 {
		o.MaxFileBytes = DefaultMaxFileBytes
	}
	if o.QuotaBytes <= 0 {
		o.QuotaBytes = DefaultQuotaBytes
	}
	if o.QuotaFiles <= 0 {
		o.QuotaFiles = DefaultQuotaFiles
	}
	if o.MaxListEntries <= 0 {
		o.MaxListEntries = DefaultMaxListEntries
	}
	if o.MaxGrepMatches <= 0 {
		o.MaxGrepMatches = DefaultMaxGrepMatches
	}
	if o.MaxReadChars <= 0 {
		o.MaxReadChars = DefaultMaxReadChars
	}
	if o.MaxWalkEntries <= 0 {
		o.MaxWalkEntries = DefaultMaxWalkEntries
	}
	if o.MaxGrepBytes <= 0 {
		o.MaxGrepBytes = DefaultMaxGrepBytes
	}
	if o.UsageMaxAge <= 0 {
		o.UsageMaxAge = DefaultUsageMaxAge
	}
}

// Workspaces is the set of session directories under one root.
//
// When the gateway runs as root, every session directory is owned by a uid
// (and gid) of its own, allocated when the session is created. Executors
// run the session's code as that identity: concurrent sessions then neither
// share a process budget nor can open each other's files, whatever paths
// their code guesses. Without root, ownership stays with the gateway's uid.
type Workspaces struct {
	root     string
	uidBase  int
	uidCount int
	mu       sync.Mutex // serialises uid allocation

	opts    Options
	locks   keyedMutex   // per-file locks of mutating file operations
	usage   usageCache   // measured size of each workspace, for quotas
	tenants tenantUsages // measured size of each tenant's workspaces
}

// Dir is a session's workspace and the identity that owns it.
type Dir struct {
	Path string
	// UID and GID own Path; zero when the gateway is not root.
	UID, GID int
}

// Info describes one session's workspace.
type Info struct {
	// SessionID is the session's key; Tenant and Name are its parts (see
	// SplitKey).
	SessionID string
	Tenant    string
	Name      string
	Dir       string
	Created   time.Time
}

func newInfo(key, dir string, created time.Time) Info {
	tenant, name := SplitKey(key)
	return Info{SessionID: key, Tenant: tenant, Name: name, Dir: dir, Created: created}
}

// New creates root if needed. The root is 0711: the sandbox user may enter a
// session directory it is given, but cannot list the root to discover other
// sessions.
func New(root string, opts Options) (*Workspaces, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("workspace root: %w", err)
	}
	if err := os.MkdirAll(abs, 0o711); err != nil {
		return nil, fmt.Errorf("workspace root: %w", err)
	}
	if err := os.Chmod(abs, 0o711); err != nil {
		return nil, fmt.Errorf("workspace root: %w", err)
	}
	opts.applyDefaults()
	return &Workspaces{root: abs, uidBase: opts.UIDBase, uidCount: opts.UIDCount, opts: opts}, nil
}

// Limits returns the options in force, defaults applied.
func (w *Workspaces) Limits() Options { return w.opts }

// ErrUnreachable is returned by CheckReachable when a directory above the
// root is closed to other users.
var ErrUnreachable = errors.New("workspace root is not reachable by sandbox uids")

// CheckReachable verifies that every directory above the root can be
// traversed by any uid. Session code runs as its own unprivileged uid, and a
// 0700 ancestor (a home directory, a private temp dir) would break every run;
// the gateway checks this at start and refuses to run, rather than failing
// each request later.
func (w *Workspaces) CheckReachable() error {
	for p := filepath.Dir(w.root); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrUnreachable, err)
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%w: %s has mode %#o; make it 0711 or choose a data dir under a traversable path such as /var/lib/sandgate",
				ErrUnreachable, p, fi.Mode().Perm())
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// Root is the directory holding all session workspaces.
func (w *Workspaces) Root() string { return w.root }

// Ensure returns the session's directory, creating it and allocating its
// identity on first use.
func (w *Workspaces) Ensure(_ context.Context, sessionID string) (Dir, error) {
	if err := ValidateKey(sessionID); err != nil {
		return Dir{}, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	dir := filepath.Join(w.root, sessionID)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return Dir{}, fmt.Errorf("create workspace: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return Dir{}, fmt.Errorf("stat workspace: %w", err)
	}
	if !fi.IsDir() {
		return Dir{}, fmt.Errorf("workspace %s is not a directory", sessionID)
	}
	uid, gid := owner(fi)
	if os.Geteuid() != 0 || uid != 0 {
		return Dir{Path: dir, UID: uid, GID: gid}, nil
	}
	// A new (or pre-identity) session: give it its own uid. The directory
	// is the root-owned one just created or found under the 0711 root, not
	// something sandboxed code could have planted, and the chown is not
	// recursive.
	if uid, err = w.allocateUID(sessionID); err != nil {
		_ = os.Remove(dir) // never leave a session without an identity behind
		return Dir{}, err
	}
	if err := os.Lchown(dir, uid, uid); err != nil {
		return Dir{}, fmt.Errorf("chown workspace: %w", err)
	}
	return Dir{Path: dir, UID: uid, GID: uid}, nil
}

// allocateUID picks a uid no other session owns, starting from a hash of
// the id so that allocation is stable and cheap in the common case.
func (w *Workspaces) allocateUID(sessionID string) (int, error) {
	entries, err := os.ReadDir(w.root)
	if err != nil {
		return 0, fmt.Errorf("allocate uid: %w", err)
	}
	used := make(map[int]bool, len(entries))
	for _, e := range entries {
		if fi, err := e.Info(); err == nil {
			uid, _ := owner(fi)
			used[uid] = true
		}
	}
	h := fnv.New32a()
	h.Write([]byte(sessionID))
	start := int(h.Sum32() % uint32(w.uidCount))
	for i := range w.uidCount {
		if uid := w.uidBase + (start+i)%w.uidCount; !used[uid] {
			return uid, nil
		}
	}
	return 0, fmt.Errorf("allocate uid: all %d session uids are in use", w.uidCount)
}

func owner(fi fs.FileInfo) (uid, gid int) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid), int(st.Gid)
	}
	return 0, 0
}

// Get returns the session's workspace without creating it.
func (w *Workspaces) Get(_ context.Context, sessionID string) (Info, error) {
	if err := ValidateKey(sessionID); err != nil {
		return Info{}, err
	}
	dir := filepath.Join(w.root, sessionID)
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && !fi.IsDir()) {
		return Info{}, fmt.Errorf("%w: %s", ErrNotFound, sessionID)
	}
	if err != nil {
		return Info{}, fmt.Errorf("stat workspace: %w", err)
	}
	return newInfo(sessionID, dir, fi.ModTime()), nil
}

// List returns the sessions with a workspace, sorted by tenant and name.
func (w *Workspaces) List(_ context.Context) ([]Info, error) {
	entries, err := os.ReadDir(w.root)
	if err != nil {
		return nil, fmt.Errorf("list workspaces: %w", err)
	}
	out := make([]Info, 0, len(entries))
	for _, e := range entries {
		if !e.IsDir() || ValidateKey(e.Name()) != nil {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue // removed while listing
		}
		out = append(out, newInfo(e.Name(), filepath.Join(w.root, e.Name()), fi.ModTime()))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	return out, nil
}

// Less orders workspaces by tenant, then by name: the order List returns.
func (i Info) Less(j Info) bool {
	if i.Tenant != j.Tenant {
		return i.Tenant < j.Tenant
	}
	return i.Name < j.Name
}

// ListTenant returns the workspaces of tenant's sessions, sorted by name.
func (w *Workspaces) ListTenant(ctx context.Context, tenant string) ([]Info, error) {
	all, err := w.List(ctx)
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for _, i := range all {
		if i.Tenant == tenant {
			out = append(out, i)
		}
	}
	return out, nil
}

// Exists reports whether the session with this key has a workspace. It is
// one lstat: cheap enough for every request.
func (w *Workspaces) Exists(key string) bool {
	if ValidateKey(key) != nil {
		return false
	}
	fi, err := os.Lstat(filepath.Join(w.root, key))
	return err == nil && fi.IsDir()
}

// Remove deletes the session's workspace. Removing one that does not exist
// is not an error: DELETE is idempotent.
func (w *Workspaces) Remove(_ context.Context, sessionID string) error {
	if err := ValidateKey(sessionID); err != nil {
		return err
	}
	if err := os.RemoveAll(filepath.Join(w.root, sessionID)); err != nil {
		return fmt.Errorf("remove workspace: %w", err)
	}
	w.usage.forget(sessionID)
	w.tenants.invalidate(sessionID)
	return nil
}
