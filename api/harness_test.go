package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/browser"
	"github.com/sandgate/sandgate/confirm"
	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/subprocess"
	"github.com/sandgate/sandgate/internal/policytest"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/risk"
	"github.com/sandgate/sandgate/workspace"
)

const (
	agentTok    = "agent-token-0123456789"
	approverTok = "approver-token-0123456789"
	adminTok    = "admin-token-0123456789"
)

// env is a gateway assembled from real parts (OPA, SQLite, the subprocess
// executor) behind a real listener.
type env struct {
	t       *testing.T
	srv     *httptest.Server
	dataDir string
	audit   *audit.SQLite
	ws      *workspace.Workspaces
}

type envOpts struct {
	mode     string
	policyFS fs.FS
	confirm  confirm.Service
	maxBody  int64
	dataDir  string
	// extra executors wired next to the subprocess one (docker, aio).
	executors []executors.Executor
	// subprocess replaces the real subprocess executor (a fake).
	subprocess executors.Executor
	// browser builds the browser router on the env's policy engine, audit
	// store and workspaces; nil leaves the browser endpoint off.
	browser func(eng *policy.Engine, st audit.Store, ws *workspace.Workspaces) *browser.Manager
	// tokens are accepted besides agentTok, approverTok and adminTok.
	tokens []Token
	// quotas are the tenants' limits (none by default).
	quotas manager.QuotaConfig
	// jwt, when set, also accepts the JWTs it verifies.
	jwt *JWTVerifier
	// api tunes the HTTP layer (its MaxBodyBytes is maxBody's).
	api Config
	// writeTimeout is the listener's http.Server WriteTimeout (0: none).
	writeTimeout time.Duration
	// snapshots configures named snapshots; its Dir defaults to
	// <dataDir>/snapshots/named, as the gateway's does.
	snapshots manager.SnapshotConfig
}

// errorLog is the test servers' log: errors only, to stderr, so a failed
// test's output says why a request answered 500 (internal error text
// never reaches the client).
var errorLog = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))

func newEnv(t *testing.T, o envOpts) *env {
	t.Helper()
	if o.mode == "" {
		o.mode = "STRICT"
	}
	if o.dataDir == "" {
		o.dataDir = t.TempDir()
	}
	traversable(t, o.dataDir)
	ctx := context.Background()
	st, err := audit.Open(ctx, filepath.Join(o.dataDir, "audit.db"), audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ws, err := workspace.New(filepath.Join(o.dataDir, "workspaces"), workspace.Options{
		TenantQuotaBytes: func(tenant string) int64 { return o.quotas.For(tenant).MaxWorkspaceBytes },
	})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := policy.New(ctx, policy.Options{EvalTimeout: testEvalTimeout, FS: o.policyFS})
	if err != nil {
		t.Fatal(err)
	}
	var sp executors.Executor = o.subprocess
	if sp == nil {
		if sp, err = subprocess.New(ctx, subprocess.Config{}); err != nil {
			t.Fatal(err)
		}
	}
	var authOpts []AuthOption
	if o.jwt != nil {
		authOpts = append(authOpts, WithJWT(o.jwt))
	}
	auth, err := NewAuth(append([]Token{
		NewToken("a", RoleAgent, agentTok), NewToken("p", RoleApprover, approverTok), NewToken("root", RoleAdmin, adminTok),
	}, o.tokens...), authOpts...)
	if err != nil {
		t.Fatal(err)
	}
	var bm *browser.Manager
	var resources []manager.SessionResource
	if o.browser != nil {
		bm = o.browser(eng, st, ws)
		resources = append(resources, manager.SessionResource{Name: "browser", Release: bm.ReleaseSession,
			Describe: func(key string) (any, bool) { b, ok := bm.Live()[key]; return b, ok }})
	}
	reg := prometheus.NewRegistry()
	if o.snapshots.Dir == "" {
		o.snapshots.Dir = filepath.Join(o.dataDir, "snapshots", "named")
	}
	mgr, err := manager.New(manager.Config{Mode: o.mode, Quotas: o.quotas, Snapshots: o.snapshots}, manager.Deps{
		Assessor: risk.NewAssessor(nil, nil), Policy: eng, Confirm: o.confirm,
		Executors: append([]executors.Executor{sp}, o.executors...), Workspaces: ws, Audit: st, Metrics: manager.NewMetrics(reg),
		Resources: resources,
	})
	if err != nil {
		t.Fatal(err)
	}
	o.api.MaxBodyBytes = o.maxBody
	h := New(o.api, Deps{Manager: mgr, Policy: eng, Audit: st, AuditChain: st, Auth: auth, Gatherer: reg, Browser: bm, Logger: errorLog})
	srv := httptest.NewUnstartedServer(h)
	srv.Config.WriteTimeout = o.writeTimeout
	srv.Start()
	e := &env{t: t, srv: srv, dataDir: o.dataDir, audit: st, ws: ws}
	t.Cleanup(func() {
		e.srv.Close()
		_ = st.Close()
	})
	return e
}

// agentKey is the workspace key of agentTok's session id: the token's
// name, "a", is its tenant.
func agentKey(id string) string { return workspace.Key("a", id) }

// resp is a decoded response.
type resp struct {
	status int
	header http.Header
	raw    []byte
	body   map[string]any
}

// errCode returns error.code of an error body.
func (r resp) errCode() string {
	e, _ := r.body["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}

func (r resp) errField(i int) string {
	e, _ := r.body["error"].(map[string]any)
	fields, _ := e["fields"].([]any)
	if i >= len(fields) {
		return ""
	}
	f, _ := fields[i].(map[string]any)
	s, _ := f["field"].(string)
	return s
}

func (e *env) do(method, path, token string, body any) resp {
	e.t.Helper()
	return e.doWith(method, path, token, body, nil)
}

// doWith is do with extra request headers.
func (e *env) doWith(method, path, token string, body any, header map[string]string) resp {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	r := resp{status: res.StatusCode, header: res.Header, raw: raw}
	if strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(raw, &r.body); err != nil {
			e.t.Fatalf("%s %s: bad JSON %q: %v", method, path, raw, err)
		}
	}
	if !strings.HasPrefix(res.Header.Get("X-Request-Id"), "req_") {
		e.t.Fatalf("%s %s: no request id header", method, path)
	}
	if r.status >= 400 && r.body != nil {
		if eb, _ := r.body["error"].(map[string]any); eb == nil || eb["request_id"] != res.Header.Get("X-Request-Id") {
			e.t.Fatalf("%s %s: error body without the request id: %s", method, path, raw)
		}
	}
	return r
}

func (e *env) auditRecords(session string) []audit.Record {
	e.t.Helper()
	page, err := e.audit.Query(context.Background(), audit.Query{SessionID: session, Limit: 1000})
	if err != nil {
		e.t.Fatal(err)
	}
	return page.Records
}

// copyTree writes the embedded default policy into dir.
func copyTree(t *testing.T, dir string) {
	t.Helper()
	err := fsWalk(policy.DefaultFS(), func(p string, b []byte) {
		dst := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
}

func newEnvWithPolicyDir(t *testing.T, dir string) *env {
	return newEnv(t, envOpts{policyFS: os.DirFS(dir)})
}

// traversable makes a test data dir (and the per-test directory that
// t.TempDir nests it in) 0711, as the gateway makes its data dir: sandboxed
// uids must reach their workspace through it but cannot list it.
func traversable(t testing.TB, dir string) {
	t.Helper()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
}

const testEvalTimeout = policytest.EvalTimeout // see there
