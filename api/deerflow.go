package api

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// The DeerFlow provisioner API (issue 20). DeerFlow's AioSandboxProvider,
// given `sandbox.provisioner_url: http://<gateway>/deerflow`, asks a
// provisioner for one sandbox per (user, thread) and then talks to the AIO
// sandbox HTTP API at the sandbox_url it gets back. sandgate answers both:
//
//   - /deerflow/api/sandboxes is the provisioner, authenticated by an agent
//     token in DeerFlow's X-API-Key header (its provisioner_api_key) or as
//     a bearer token. A sandbox is the session "df.<user_id>.<thread_id>"
//     of the token's tenant: the dots cannot occur in either id, so two
//     users' equal thread ids are two sessions.
//   - /deerflow/sandboxes/{sandbox_id}/{capability}/v1/... is the sandbox:
//     the AIO subset DeerFlow calls, served through the manager like the
//     rest of the API (shell/exec is an execute, the file calls are the
//     workspace API), each call audited under the sandbox's session.
//
// DeerFlow's AIO client sends no credentials, so the sandbox_url itself
// carries one: a random 256-bit capability bound to one sandbox, and so to
// one session (its creation is audited as deerflow.sandbox.create, naming
// the token that minted it). It authorises that session's AIO calls and
// nothing else (it
// is no bearer token anywhere), it is kept only as a SHA-256 digest for
// lookup, it dies when the sandbox is deleted or its session is deleted
// through any API, and it is never logged: the gateway has no access log,
// and its error log names request ids, never paths. Capabilities live in
// the gateway's memory: after a restart DeerFlow's GET finds no sandbox and
// its provider creates it again, on the same session and workspace.

// DeerFlowConfig tunes the provisioner.
type DeerFlowConfig struct {
	// PublicURL is the gateway's base URL as DeerFlow reaches it (behind a
	// proxy); empty derives it from each create request's Host.
	PublicURL string
}

// deerflowPrefix is where the provisioner API and the sandboxes live.
const deerflowPrefix = "/deerflow"

// capPrefix marks sandgate's DeerFlow capabilities, so that one found in a
// log or a leak report is recognisable (as GitHub's token prefixes are).
const capPrefix = "sgdf_"

// DeerFlow holds the sandboxes DeerFlow created: one registry per gateway,
// wired in main (api.Deps.DeerFlow, and its Release as a manager session
// resource, so that deleting a session revokes its capabilities).
type DeerFlow struct {
	cfg DeerFlowConfig

	mu    sync.Mutex
	byID  map[sandboxKey]*dfSandbox
	byCap map[[sha256.Size]byte]*dfSandbox
}

// sandboxKey names a sandbox: sandbox ids are per tenant, like sessions.
type sandboxKey struct{ tenant, id string }

// dfSandbox is one provisioned sandbox.
type dfSandbox struct {
	key      sandboxKey
	threadID string
	userID   string
	// session is the session's name in the tenant; sessionKey its
	// workspace key (what Release is called with).
	session    string
	sessionKey string
	// owner created the sandbox; AIO calls run as it.
	owner   Identity
	cap     string
	capHash [sha256.Size]byte
	created time.Time
}

// NewDeerFlow returns an empty registry.
func NewDeerFlow(cfg DeerFlowConfig) *DeerFlow {
	cfg.PublicURL = strings.TrimRight(cfg.PublicURL, "/")
	return &DeerFlow{cfg: cfg, byID: map[sandboxKey]*dfSandbox{}, byCap: map[[sha256.Size]byte]*dfSandbox{}}
}

// DeerFlow's id formats (its provisioner's pydantic patterns). User ids are
// also bounded here, so that the session name fits its 128 bytes.
var (
	dfThreadID  = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	dfSandboxID = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	dfUserID    = regexp.MustCompile(`^[A-Za-z0-9_-]{1,60}$`)
)

// dfSession is the session of a (user, thread).
func dfSession(userID, threadID string) string { return "df." + userID + "." + threadID }

// newCapability returns a fresh capability and its digest.
func newCapability() (string, [sha256.Size]byte) {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	c := capPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	return c, sha256.Sum256([]byte(c))
}

// create returns the tenant's sandbox id, made now or before. An existing
// sandbox is returned as it is when it has the same thread and user (the
// provisioner's create is idempotent), and is a conflict otherwise.
func (d *DeerFlow) create(owner Identity, id, threadID, userID, session, sessionKey string) (*dfSandbox, bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := sandboxKey{owner.Tenant, id}
	if sb, ok := d.byID[k]; ok {
		if sb.threadID != threadID || sb.userID != userID {
			return nil, false, errSandboxConflict
		}
		return sb, false, nil
	}
	c, h := newCapability()
	sb := &dfSandbox{key: k, threadID: threadID, userID: userID, session: session, sessionKey: sessionKey,
		owner: owner, cap: c, capHash: h, created: time.Now()}
	d.byID[k] = sb
	d.byCap[h] = sb
	return sb, true, nil
}

// get returns the tenant's sandbox id.
func (d *DeerFlow) get(tenant, id string) (*dfSandbox, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	sb, ok := d.byID[sandboxKey{tenant, id}]
	return sb, ok
}

// list returns the tenant's sandboxes, oldest first.
func (d *DeerFlow) list(tenant string) []*dfSandbox {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []*dfSandbox
	for k, sb := range d.byID {
		if k.tenant == tenant {
			out = append(out, sb)
		}
	}
	slices.SortFunc(out, func(a, b *dfSandbox) int {
		if c := a.created.Compare(b.created); c != 0 {
			return c
		}
		return strings.Compare(a.key.id, b.key.id)
	})
	return out
}

// byCapability returns the sandbox a capability belongs to.
func (d *DeerFlow) byCapability(c string) (*dfSandbox, bool) {
	if !strings.HasPrefix(c, capPrefix) {
		return nil, false
	}
	h := sha256.Sum256([]byte(c))
	d.mu.Lock()
	defer d.mu.Unlock()
	sb, ok := d.byCap[h]
	return sb, ok
}

// remove forgets a sandbox and kills its capability.
func (d *DeerFlow) remove(sb *dfSandbox) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.removeLocked(sb)
}

func (d *DeerFlow) removeLocked(sb *dfSandbox) {
	if d.byID[sb.key] == sb {
		delete(d.byID, sb.key)
	}
	if d.byCap[sb.capHash] == sb {
		delete(d.byCap, sb.capHash)
	}
}

// Release revokes the capabilities of every sandbox on the session whose
// workspace key is sessionKey. It is a manager.SessionResource's Release:
// a session deleted through any API takes its sandboxes with it.
func (d *DeerFlow) Release(_ context.Context, sessionKey string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, sb := range d.byID {
		if sb.sessionKey == sessionKey {
			d.removeLocked(sb)
		}
	}
	return nil
}
