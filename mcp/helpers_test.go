package mcp

import (
	"context"
	"encoding/json"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

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

// Tokens of the test endpoint: it authenticates as api does (bearer token
// to principal) and calls ServeMCP.
const (
	agentTok = "agent-token-0123456789"
	otherTok = "other-token-0123456789"
)

var testPrincipals = map[string]manager.Principal{
	agentTok: {Role: "agent", Name: "agent-a", Tenant: "agent-a"},
	otherTok: {Role: "agent", Name: "agent-b", Tenant: "agent-b"},
}

// highRisk is HIGH-risk Python (approval in both modes); criticalBash is
// CRITICAL (denied in STRICT).
const (
	highRisk     = "import subprocess\nprint(subprocess.run(['echo','approved run'],capture_output=True).stdout.decode().strip())"
	criticalBash = "rm -rf /"
)

// env is the MCP server over a manager assembled from real parts (OPA,
// SQLite, workspaces, the subprocess executor, the approval hub), behind a
// real listener.
type env struct {
	t        *testing.T
	srv      *httptest.Server
	mcp      *Server
	hub      *confirm.Hub
	audit    *audit.SQLite
	mgr      *manager.Manager
	released *recorder
}

type envOpts struct {
	mode            string
	approvalTimeout time.Duration
	cfg             Config
	browser         func(eng *policy.Engine, st audit.Store, ws *workspace.Workspaces) *browser.Manager
	// placement and fleet make the env a replica of a fleet (forward_test.go).
	placement manager.Placement
	fleet     Fleet
}

// recorder collects strings from several goroutines.
type recorder struct {
	mu  sync.Mutex
	got []string
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	r.got = append(r.got, s)
	r.mu.Unlock()
}

func (r *recorder) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

func newEnv(t *testing.T, o envOpts) *env {
	t.Helper()
	if o.mode == "" {
		o.mode = "STRICT"
	}
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	st, err := audit.Open(ctx, filepath.Join(dir, "audit.db"), audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ws, err := workspace.New(filepath.Join(dir, "workspaces"), workspace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := policy.New(ctx, policy.Options{EvalTimeout: testEvalTimeout, FS: subprocessPolicy(t)})
	if err != nil {
		t.Fatal(err)
	}
	sp, err := subprocess.New(ctx, subprocess.Config{})
	if err != nil {
		t.Fatal(err)
	}
	hub, err := confirm.NewHub(ctx, confirm.HubOptions{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, hub: hub, audit: st, released: &recorder{}}
	var bm *browser.Manager
	if o.browser != nil {
		bm = o.browser(eng, st, ws)
	}
	e.mgr, err = manager.New(manager.Config{Mode: o.mode, ApprovalTimeout: o.approvalTimeout}, manager.Deps{
		Assessor: risk.NewAssessor(nil, nil), Policy: eng, Confirm: hub,
		Executors: []executors.Executor{sp}, Workspaces: ws, Audit: st,
		Resources: []manager.SessionResource{{Name: "probe", Release: func(_ context.Context, id string) error {
			e.released.add(id)
			return nil
		}}},
		Placement: o.placement,
	})
	if err != nil {
		t.Fatal(err)
	}
	o.cfg.ProgressInterval = max(o.cfg.ProgressInterval, 200*time.Millisecond)
	e.mcp, err = New(o.cfg, Deps{Manager: e.mgr, Browser: bm, Fleet: o.fleet})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc(Path, func(w http.ResponseWriter, r *http.Request) {
		p, ok := testPrincipals[bearer(r)]
		if !ok {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if err := e.mcp.ServeMCP(w, r, p); err != nil {
			w.WriteHeader(http.StatusForbidden)
		}
	})
	// What api serves to a replica with a verified hop.
	mux.HandleFunc("POST "+ForwardPath, func(w http.ResponseWriter, r *http.Request) {
		p, ok := testPrincipals[bearer(r)]
		if !ok {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if err := e.mcp.ServeForwarded(w, r, p, r.Header.Get("X-Test-Request-Id")); err != nil {
			w.WriteHeader(http.StatusBadRequest)
		}
	})
	e.srv = httptest.NewServer(mux)
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.mcp.Close(cctx)
		_ = hub.Close(cctx)
		e.srv.Close()
		if bm != nil {
			_ = bm.Close(cctx)
		}
		_ = e.mgr.Close(cctx)
		_ = st.Close()
	})
	return e
}

func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && h[:7] == "Bearer " {
		return h[7:]
	}
	return ""
}

// subprocessPolicy is the default policy with every executor of every
// mode set to subprocess, the only one wired here: the levels keep their
// actions (STRICT: HIGH needs approval, CRITICAL is denied).
func subprocessPolicy(t *testing.T) fstest.MapFS {
	t.Helper()
	m := fstest.MapFS{}
	err := fs.WalkDir(policy.DefaultFS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(policy.DefaultFS(), p)
		if err != nil {
			return err
		}
		if p == "sandgate/config/data.json" {
			var data map[string]any
			if err := json.Unmarshal(b, &data); err != nil {
				return err
			}
			for _, rows := range data["modes"].(map[string]any) {
				for _, row := range rows.(map[string]any) {
					row.(map[string]any)["executor"] = "subprocess"
				}
			}
			// No gVisor upgrade either: this harness has one executor.
			if up, ok := data["isolation_upgrade"].(map[string]any); ok {
				up["modes"] = []any{}
			}
			if b, err = json.Marshal(data); err != nil {
				return err
			}
		}
		m[p] = &fstest.MapFile{Data: b}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// tokenTransport adds a bearer token to every request.
type tokenTransport struct {
	token string
	base  http.RoundTripper
}

func (t tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+t.token)
	return t.base.RoundTrip(r)
}

// connect opens an MCP session as token's principal with the official Go
// SDK client.
func (e *env) connect(token string, opts *sdk.ClientOptions) *sdk.ClientSession {
	e.t.Helper()
	client := sdk.NewClient(&sdk.Implementation{Name: "sandgate-test", Version: "0.1"}, opts)
	cs, err := client.Connect(e.t.Context(), &sdk.StreamableClientTransport{
		Endpoint:   e.srv.URL + Path,
		HTTPClient: &http.Client{Transport: tokenTransport{token: token, base: http.DefaultTransport}},
		MaxRetries: -1,
	}, nil)
	if err != nil {
		e.t.Fatalf("connect: %v", err)
	}
	e.t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// callTool calls name with args and fails on a protocol error (a tool
// error is a result).
func callTool(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any) *sdk.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

// structured decodes a result's structuredContent into v, failing on an
// error result.
func structured(t *testing.T, res *sdk.CallToolResult, v any) {
	t.Helper()
	if res.IsError {
		t.Fatalf("tool error: %s", text(res))
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("structuredContent %s: %v", b, err)
	}
}

// text is a result's first text content.
func text(res *sdk.CallToolResult) string {
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			return tc.Text
		}
	}
	return ""
}

// errorOf is an isError result's code, from _meta.
func errorOf(t *testing.T, res *sdk.CallToolResult) errorBody {
	t.Helper()
	if !res.IsError {
		t.Fatalf("not an error result: %s", text(res))
	}
	b, err := json.Marshal(res.Meta[ErrorMetaKey])
	if err != nil {
		t.Fatal(err)
	}
	var body errorBody
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatalf("_meta %s: %v", b, err)
	}
	return body
}

func (e *env) records(session string) []audit.Record {
	e.t.Helper()
	page, err := e.audit.Query(context.Background(), audit.Query{SessionID: session, Limit: 100})
	if err != nil {
		e.t.Fatal(err)
	}
	return page.Records
}

// waitPending waits for one pending approval and returns it.
func (e *env) waitPending() confirm.View {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if p := e.hub.Pending(); len(p) > 0 {
			return p[0]
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.t.Fatal("no approval became pending")
	return confirm.View{}
}

const testEvalTimeout = policytest.EvalTimeout // see there
