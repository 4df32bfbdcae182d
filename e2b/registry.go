package e2b

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"strings"
	"sync"

	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/workspace"
)

// Registry is the E2B sandboxes: for each sandbox id, a record in the
// store (its session's tenant and key, the principal its envd calls run
// as, its template and SDK, its envs and its two tokens' SHA-256), shared
// by every replica of a fleet and kept across restarts; and, on the
// replica serving its session, its live state (processes, code contexts,
// the tokens as minted). Every sandbox call is served by the replica that
// serves the session (Server.route forwards it there), so a sandbox has
// one set of processes fleet-wide, never a second copy. A replica that
// did not mint a sandbox's tokens checks them against the record; its
// connect mints new ones, which replace the old everywhere at once.
type Registry struct {
	records records

	mu   sync.Mutex
	byID map[string]*sandbox
}

// NewRegistry returns a registry whose records live in this process's
// memory only (one process, and the unit tests).
func NewRegistry() *Registry {
	return &Registry{records: &memRecords{byID: map[string]record{}}, byID: map[string]*sandbox{}}
}

// OpenRegistry returns a registry whose records live in db (the audit
// database), bringing its table up to date.
func OpenRegistry(ctx context.Context, db Store) (*Registry, error) {
	if err := db.Migrate(ctx, storeComponent, storeMigrations); err != nil {
		return nil, fmt.Errorf("e2b: sandbox registry: %w", err)
	}
	return &Registry{records: sqlRecords{db: db}, byID: map[string]*sandbox{}}, nil
}

// sandbox is one sandbox as the replica serving it knows it: its record,
// and its live state here.
type sandbox struct {
	record
	// The tokens as minted here (envd's X-Access-Token and the code
	// interpreter's E2B-Traffic-Access-Token), to answer connect and
	// getInfo again; empty when another replica, or an earlier run of
	// this one, minted them. tokMu guards them and the record's digests,
	// which a connect may replace in place (rotate).
	tokMu                   sync.RWMutex
	envdToken, trafficToken string

	mu       sync.Mutex
	nextPID  uint32
	procs    map[uint32]*process
	contexts map[string]codeContext
	cells    int // executions of /execute, for execution_count
}

// codeContext is a name the code interpreter's client uses for the
// session's one kernel (see interpreter.go). Contexts are live state: they
// name the kernel of the replica serving the session, and go with it.
type codeContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// defaultContext names the session's kernel when the client names none.
const defaultContext = "default"

// newSandbox is a new sandbox of p's tenant with fresh tokens.
func newSandbox(id, template string, p manager.Principal, client string, envs map[string]string) *sandbox {
	sb := liveOf(record{id: id, tenant: p.Tenant, sessionKey: workspace.Key(p.Tenant, id), template: template,
		client: client, principal: p, envs: envs})
	sb.mint()
	return sb
}

// liveOf is a record's sandbox with no live state yet.
func liveOf(rec record) *sandbox {
	sb := &sandbox{record: rec, nextPID: 100, procs: map[uint32]*process{}, contexts: map[string]codeContext{}}
	sb.contexts[defaultContext] = codeContext{ID: defaultContext, Language: "python", Cwd: homeDir}
	return sb
}

// mint gives sb fresh tokens.
func (sb *sandbox) mint() {
	sb.envdToken, sb.trafficToken = newToken("ea_"), newToken("ta_")
	sb.envdSum, sb.trafficSum = sha256.Sum256([]byte(sb.envdToken)), sha256.Sum256([]byte(sb.trafficToken))
}

// newToken is a fresh 260-bit random credential.
func newToken(prefix string) string { return prefix + strings.ToLower(rand.Text()+rand.Text()) }

// newSandboxID is a fresh sandbox id, also the session's id: lower-case
// letters and digits, as E2B's ids are (the SDK builds host names from
// them).
func newSandboxID() string { return "sbx" + strings.ToLower(rand.Text()[:20]) }

// tokens are the sandbox's tokens as minted here ("" when they were not).
func (sb *sandbox) tokens() (envd, traffic string) {
	sb.tokMu.RLock()
	defer sb.tokMu.RUnlock()
	return sb.envdToken, sb.trafficToken
}

// sums are the digests of the sandbox's tokens now.
func (sb *sandbox) sums() [2][sha256.Size]byte {
	sb.tokMu.RLock()
	defer sb.tokMu.RUnlock()
	return [2][sha256.Size]byte{sb.envdSum, sb.trafficSum}
}

// accepts reports whether token is the sandbox's envd token (or, for the
// code interpreter, traffic is its traffic token), in constant time.
func (sb *sandbox) accepts(envd, traffic string) bool {
	e := sha256.Sum256([]byte(envd))
	t := sha256.Sum256([]byte(traffic))
	sums := sb.sums()
	okE := subtle.ConstantTimeCompare(e[:], sums[0][:])
	okT := subtle.ConstantTimeCompare(t[:], sums[1][:])
	return (envd != "" && okE == 1) || (traffic != "" && okT == 1)
}

// register records sb in the store and serves it here, replacing what
// was registered under its id.
func (r *Registry) register(ctx context.Context, sb *sandbox) error {
	if err := r.records.put(ctx, sb.record); err != nil {
		return err
	}
	r.keep(sb)
	return nil
}

// keep serves sb here; an older sandbox of the id has its processes killed.
func (r *Registry) keep(sb *sandbox) {
	r.mu.Lock()
	old := r.byID[sb.id]
	r.byID[sb.id] = sb
	r.mu.Unlock()
	if old != nil && old != sb {
		old.killAll()
	}
}

// lookup returns the sandbox id as its record stands now, with its live
// state here when this replica has some for the same record (same
// tenant and tokens). A sandbox with no record is gone (killed, expired,
// or released on another replica): what this replica held of it is
// dropped.
func (r *Registry) lookup(ctx context.Context, id string) (*sandbox, bool, error) {
	rec, ok, err := r.records.get(ctx, id)
	if err != nil {
		return nil, false, err
	}
	if !ok {
		r.drop(id)
		return nil, false, nil
	}
	r.mu.Lock()
	sb := r.byID[id]
	r.mu.Unlock()
	if sb != nil && sb.tenant == rec.tenant && sb.sums() == [2][sha256.Size]byte{rec.envdSum, rec.trafficSum} {
		return sb, true, nil
	}
	return liveOf(rec), true, nil
}

// served returns the live sandbox id for work here: lookup's, kept here
// so that its processes and contexts are found by the next call.
func (r *Registry) served(ctx context.Context, id string) (*sandbox, bool, error) {
	sb, ok, err := r.lookup(ctx, id)
	if err != nil || !ok {
		return nil, ok, err
	}
	return r.serve(sb), true, nil
}

// serve keeps sb, a sandbox lookup just returned, as served here, and
// returns the live sandbox to work in: one kept meanwhile for the same
// record wins.
func (r *Registry) serve(sb *sandbox) *sandbox {
	r.mu.Lock()
	if cur := r.byID[sb.id]; cur != nil && cur != sb && cur.tenant == sb.tenant && cur.sums() == sb.sums() {
		sb = cur // another call kept it first
	}
	old := r.byID[sb.id]
	r.byID[sb.id] = sb
	r.mu.Unlock()
	if old != nil && old != sb {
		old.killAll()
	}
	return sb
}

// rotate gives sb, served here, new tokens, recorded for every replica:
// the old ones stop working everywhere, and its live processes and
// contexts stay as they are.
func (r *Registry) rotate(ctx context.Context, sb *sandbox) error {
	sb.tokMu.RLock()
	fresh := &sandbox{record: sb.record}
	sb.tokMu.RUnlock()
	fresh.mint()
	if err := r.records.put(ctx, fresh.record); err != nil {
		return err
	}
	sb.tokMu.Lock()
	sb.envdToken, sb.trafficToken = fresh.envdToken, fresh.trafficToken
	sb.envdSum, sb.trafficSum = fresh.envdSum, fresh.trafficSum
	sb.tokMu.Unlock()
	return nil
}

// forget ends the sandbox id everywhere: its record, and what this
// replica held of it.
func (r *Registry) forget(ctx context.Context, id string) error {
	err := r.records.remove(ctx, id)
	r.drop(id)
	return err
}

// drop forgets this replica's live state of id and kills its processes.
func (r *Registry) drop(id string) {
	r.mu.Lock()
	sb := r.byID[id]
	delete(r.byID, id)
	r.mu.Unlock()
	if sb != nil {
		sb.killAll()
	}
}

// Release is the manager's SessionResource hook: a session deleted or
// expired through any front end, on any replica, takes its sandbox's
// record with it, so its tokens stop working everywhere at once, and its
// processes here are killed. key is the session's key (tenant~name).
func (r *Registry) Release(ctx context.Context, key string) error {
	err := r.records.removeSession(ctx, key)
	tenant, name := workspace.SplitKey(key)
	r.mu.Lock()
	sb, ok := r.byID[name]
	if ok && sb.tenant == tenant {
		delete(r.byID, name)
	} else {
		sb = nil
	}
	r.mu.Unlock()
	if sb != nil {
		sb.killAll()
	}
	return err
}

// pauseLocal kills the processes of sandbox id here, as a pause frees
// the session's processes; its record and tokens stay.
func (r *Registry) pauseLocal(id string) {
	r.mu.Lock()
	sb := r.byID[id]
	r.mu.Unlock()
	if sb == nil {
		return
	}
	sb.killAll() // each process leaves the table as its run ends
}

// killAll cancels the sandbox's running processes.
func (sb *sandbox) killAll() {
	sb.mu.Lock()
	procs := make([]*process, 0, len(sb.procs))
	for _, p := range sb.procs {
		procs = append(procs, p)
	}
	sb.mu.Unlock()
	for _, p := range procs {
		p.cancel()
	}
}
