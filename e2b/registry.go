package e2b

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"strings"
	"sync"

	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/workspace"
)

// Registry is what this process knows of the E2B sandboxes it serves: for
// each sandbox id, its session's tenant, the principal that created or
// last connected it (the one its envd calls run as), its two tokens, and
// its live processes and code contexts. It lives in memory: after a
// restart, a sandbox's session is still there (GET, list, kill work with
// the API key), and `Sandbox.connect(id)` registers it again with fresh
// tokens; envd calls made with the old tokens fail closed (401).
type Registry struct {
	mu   sync.Mutex
	byID map[string]*sandbox
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{byID: map[string]*sandbox{}} }

// sandbox is one registered sandbox.
type sandbox struct {
	id        string
	template  string
	principal manager.Principal
	// client is the SDK as its control-plane calls named it ("e2b-js
	// 2.51.0"), for the approver's "via".
	client string
	// envs are the sandbox's environment variables (create's envVars).
	envs map[string]string
	// The tokens' SHA-256: envd's X-Access-Token and the code
	// interpreter's E2B-Traffic-Access-Token. The tokens themselves are
	// kept to answer connect and getInfo again.
	envdToken, trafficToken string
	envdSum, trafficSum     [sha256.Size]byte

	mu       sync.Mutex
	nextPID  uint32
	procs    map[uint32]*process
	contexts map[string]codeContext
	cells    int // executions of /execute, for execution_count
}

// codeContext is a name the code interpreter's client uses for the
// session's one kernel (see interpreter.go).
type codeContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// defaultContext names the session's kernel when the client names none.
const defaultContext = "default"

func newSandbox(id, template string, p manager.Principal, client string, envs map[string]string) *sandbox {
	sb := &sandbox{id: id, template: template, principal: p, client: client, envs: envs,
		envdToken: newToken("ea_"), trafficToken: newToken("ta_"), nextPID: 100,
		procs: map[uint32]*process{}, contexts: map[string]codeContext{}}
	sb.envdSum, sb.trafficSum = sha256.Sum256([]byte(sb.envdToken)), sha256.Sum256([]byte(sb.trafficToken))
	sb.contexts[defaultContext] = codeContext{ID: defaultContext, Language: "python", Cwd: homeDir}
	return sb
}

// newToken is a fresh 260-bit random credential.
func newToken(prefix string) string { return prefix + strings.ToLower(rand.Text()+rand.Text()) }

// newSandboxID is a fresh sandbox id, also the session's id: lower-case
// letters and digits, as E2B's ids are (the SDK builds host names from
// them).
func newSandboxID() string { return "sbx" + strings.ToLower(rand.Text()[:20]) }

// accepts reports whether token is the sandbox's envd token (or, for the
// code interpreter, traffic is its traffic token), in constant time.
func (sb *sandbox) accepts(envd, traffic string) bool {
	e := sha256.Sum256([]byte(envd))
	t := sha256.Sum256([]byte(traffic))
	okE := subtle.ConstantTimeCompare(e[:], sb.envdSum[:])
	okT := subtle.ConstantTimeCompare(t[:], sb.trafficSum[:])
	return (envd != "" && okE == 1) || (traffic != "" && okT == 1)
}

// put registers sb, replacing what was registered under its id.
func (r *Registry) put(sb *sandbox) {
	r.mu.Lock()
	old := r.byID[sb.id]
	r.byID[sb.id] = sb
	r.mu.Unlock()
	if old != nil && old != sb {
		old.killAll()
	}
}

func (r *Registry) get(id string) (*sandbox, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sb, ok := r.byID[id]
	return sb, ok
}

// forget drops the sandbox id and kills its processes.
func (r *Registry) forget(id string) {
	r.mu.Lock()
	sb := r.byID[id]
	delete(r.byID, id)
	r.mu.Unlock()
	if sb != nil {
		sb.killAll()
	}
}

// Release is the manager's SessionResource hook: a session deleted or
// expired through any front end takes its sandbox registration with it,
// so its tokens stop working at once. key is the session's key
// (tenant~name).
func (r *Registry) Release(_ context.Context, key string) error {
	tenant, name := workspace.SplitKey(key)
	r.mu.Lock()
	sb, ok := r.byID[name]
	if ok && sb.principal.Tenant == tenant {
		delete(r.byID, name)
	} else {
		sb = nil
	}
	r.mu.Unlock()
	if sb != nil {
		sb.killAll()
	}
	return nil
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
