package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/deerflow"
)

// dfProvisioner is a client of the provisioner written to DeerFlow's
// documented API (docker/provisioner/README.md, and RemoteSandboxBackend,
// its caller): X-API-Key on every /api call, JSON bodies, FastAPI's
// {"detail"} errors.
type dfProvisioner struct {
	t      *testing.T
	url    string // sandbox.provisioner_url
	apiKey string // sandbox.provisioner_api_key
}

// dfReply is a decoded answer.
type dfReply struct {
	status int
	raw    []byte
	body   map[string]any
}

func (r dfReply) str(keys ...string) string {
	var v any = r.body
	for _, k := range keys {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	s, _ := v.(string)
	return s
}

func dfDo(t *testing.T, method, url string, header map[string]string, body any) dfReply {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	r := dfReply{status: res.StatusCode, raw: raw}
	if strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(raw, &r.body); err != nil {
			t.Fatalf("%s: bad JSON %q", method, raw)
		}
	}
	return r
}

func (p dfProvisioner) headers() map[string]string { return map[string]string{"X-API-Key": p.apiKey} }

// create is RemoteSandboxBackend._provisioner_create's request.
func (p dfProvisioner) create(sandboxID, threadID, userID string) dfReply {
	return dfDo(p.t, "POST", p.url+"/api/sandboxes", p.headers(), map[string]any{
		"sandbox_id": sandboxID, "thread_id": threadID, "user_id": userID,
		"required_mount_contract_version": 0, "include_legacy_skills": false,
		"provision_lark_cli_runtime": false, "provision_lark_cli_broker": false,
	})
}

func (p dfProvisioner) get(id string) dfReply {
	return dfDo(p.t, "GET", p.url+"/api/sandboxes/"+id, p.headers(), nil)
}

func (p dfProvisioner) list() dfReply {
	return dfDo(p.t, "GET", p.url+"/api/sandboxes", p.headers(), nil)
}

func (p dfProvisioner) destroy(id string) dfReply {
	return dfDo(p.t, "DELETE", p.url+"/api/sandboxes/"+id, p.headers(), nil)
}

// dfSandboxAPI calls the AIO API at a sandbox_url as DeerFlow's AioSandbox
// does through the agent_sandbox SDK: no credentials, JSON bodies.
type dfSandboxAPI struct {
	t   *testing.T
	url string
}

func (a dfSandboxAPI) post(path string, body any) dfReply {
	return dfDo(a.t, "POST", a.url+path, nil, body)
}

// exec is AioSandbox._exec_shell: exec_command(command, no_change_timeout).
func (a dfSandboxAPI) exec(command string) dfReply {
	return a.post("/v1/shell/exec", map[string]any{"command": command, "no_change_timeout": 600})
}

// data returns the envelope's data after checking success.
func (a dfSandboxAPI) data(r dfReply) map[string]any {
	a.t.Helper()
	if r.status != 200 || r.body["success"] != true {
		a.t.Fatalf("AIO call: %d %s", r.status, r.raw)
	}
	d, _ := r.body["data"].(map[string]any)
	return d
}

// deerflowEnv is the gateway with the provisioner mounted, its log kept.
type deerflowEnv struct {
	*approvalEnv
	prov    dfProvisioner
	log     *syncBuffer
	capture *capture
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newDeerFlowEnv(t *testing.T) *deerflowEnv {
	buf := &syncBuffer{}
	log := slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c := &capture{}
	e := newApprovalEnv(t, approvalOpts{deerflow: &deerflow.Config{}, log: log, wrap: c.wrap})
	return &deerflowEnv{approvalEnv: e, log: buf, capture: c,
		prov: dfProvisioner{t: t, url: e.srv.URL + "/deerflow", apiKey: agentTok}}
}

// TestDeerFlowProvisionerFlow drives the provisioner and one sandbox's AIO
// API as DeerFlow's AioSandboxProvider does, from create to delete.
func TestDeerFlowProvisionerFlow(t *testing.T) {
	e := newDeerFlowEnv(t)
	const session = "df.u1.t1"

	created := e.prov.create("sbx-a", "t1", "u1")
	url := created.str("sandbox_url")
	if created.status != 200 || created.str("status") != "Running" || created.str("sandbox_id") != "sbx-a" ||
		!strings.HasPrefix(url, e.srv.URL+"/deerflow/sandboxes/sbx-a/sgdf_") || created.str("session_id") != session {
		t.Fatalf("create: %d %s", created.status, created.raw)
	}
	if again := e.prov.create("sbx-a", "t1", "u1"); again.status != 200 || again.str("sandbox_url") != url {
		t.Fatalf("create is not idempotent: %d %s", again.status, again.raw)
	}
	if got := e.prov.get("sbx-a"); got.status != 200 || got.str("sandbox_url") != url {
		t.Fatalf("get: %d %s", got.status, got.raw)
	}
	if l := e.prov.list(); l.status != 200 || l.body["count"] != float64(1) {
		t.Fatalf("list: %d %s", l.status, l.raw)
	}
	sb := dfSandboxAPI{t: t, url: url}

	t.Run("context", func(t *testing.T) {
		r := dfDo(t, "GET", url+"/v1/sandbox", nil, nil)
		if r.status != 200 || r.str("home_dir") != "/mnt/user-data/workspace" {
			t.Fatalf("GET /v1/sandbox: %d %s", r.status, r.raw)
		}
	})
	t.Run("files", func(t *testing.T) { dfFileCalls(t, sb) })
	t.Run("shell", func(t *testing.T) {
		d := sb.data(sb.exec("cat /workspace/workspace/notes.txt; echo oops >&2; exit 3"))
		if d["status"] != "completed" || d["exit_code"] != float64(3) ||
			d["output"] != "alpha\nBETA\ngamma\noops\n" {
			t.Fatalf("shell exec: %v", d)
		}
		x, _ := d["x_sandgate"].(map[string]any)
		if x["sandbox_type"] != "subprocess" || x["request_id"] == "" {
			t.Fatalf("x_sandgate: %v", x)
		}
	})
	t.Run("audit", func(t *testing.T) {
		kinds := map[string]bool{}
		for _, rec := range e.auditRecords(session) {
			if rec.Kind == deerflow.KindSandboxCreate {
				if rec.Principal != "agent:a" || rec.Detail["sandbox_id"] != "sbx-a" || rec.Detail["thread_id"] != "t1" {
					t.Errorf("creation record %+v", rec)
				}
				kinds[rec.Kind] = true
				continue
			}
			if rec.Tenant != "a" || rec.Principal != "agent:a@deerflow:sbx-a" {
				t.Fatalf("record %s: tenant %q principal %q", rec.Kind, rec.Tenant, rec.Principal)
			}
			kinds[rec.Kind] = true
		}
		for _, k := range []string{deerflow.KindSandboxCreate, "execute", "file.write", "file.get", "file.list", "file.glob", "file.grep", "file.edit"} {
			if !kinds[k] {
				t.Errorf("no %s record naming session %s (have %v)", k, session, kinds)
			}
		}
	})
	t.Run("high command waits for approval", func(t *testing.T) { dfApproved(t, e, sb, session) })
	t.Run("errors", func(t *testing.T) { dfErrors(t, e, sb) })
	t.Run("isolation", func(t *testing.T) { dfIsolation(t, e, url) })

	if d := e.prov.destroy("sbx-a"); d.status != 200 || d.body["ok"] != true {
		t.Fatalf("delete: %d %s", d.status, d.raw)
	}
	if r := sb.exec("echo hi"); r.status != 404 || r.str("error", "code") != "not_found" || r.body["success"] != false {
		t.Fatalf("exec after DELETE: %d %s", r.status, r.raw)
	}
	if r := sb.post("/v1/file/read", map[string]any{"file": "/mnt/user-data/workspace/notes.txt"}); r.status != 404 {
		t.Fatalf("read after DELETE: %d %s", r.status, r.raw)
	}
	if g := e.prov.get("sbx-a"); g.status != 404 || g.str("detail") == "" {
		t.Fatalf("get after DELETE: %d %s", g.status, g.raw)
	}
	if strings.Contains(e.log.String(), "sgdf_") {
		t.Fatalf("a capability reached the log:\n%s", e.log.String())
	}
	if !strings.Contains(e.log.String(), "deerflow sandbox created") {
		t.Fatal("the log was not captured; the check above proves nothing")
	}
	// Every answer DeerFlow got is the one the OpenAPI document describes.
	seen := e.capture.check(t, fetchDoc(t, e.env))
	requireCovered(t, seen, []string{"deerflow", "aio"})
}

// dfFileCalls makes every file call DeerFlow's AioSandbox makes, in
// DeerFlow's /mnt/user-data namespace.
func dfFileCalls(t *testing.T, sb dfSandboxAPI) {
	const f = "/mnt/user-data/workspace/notes.txt"
	if d := sb.data(sb.post("/v1/file/write", map[string]any{"file": f, "content": "alpha\nbeta\ngamma\n"})); d["bytes_written"] != float64(17) {
		t.Fatalf("write: %v", d)
	}
	bin := base64.StdEncoding.EncodeToString([]byte{0, 1, 2, 255})
	sb.data(sb.post("/v1/file/write", map[string]any{"file": "/mnt/user-data/outputs/blob.bin", "content": bin, "encoding": "base64"}))
	if d := sb.data(sb.post("/v1/file/read", map[string]any{"file": f, "start_line": 1, "end_line": 2})); d["content"] != "beta\n" {
		t.Fatalf("read lines [1,2): %v", d)
	}
	if d := sb.data(sb.post("/v1/file/replace", map[string]any{"file": f, "old_str": "beta", "new_str": "BETA"})); d["replaced_count"] != float64(1) {
		t.Fatalf("replace: %v", d)
	}
	list := sb.data(sb.post("/v1/file/list", map[string]any{"path": "/mnt/user-data", "recursive": true, "show_hidden": false}))
	if !hasFile(list["files"], f) || !hasFile(list["files"], "/mnt/user-data/outputs/blob.bin") {
		t.Fatalf("list: %v", list)
	}
	if d := sb.data(sb.post("/v1/file/find", map[string]any{"path": "/mnt/user-data", "glob": "**/*.txt"})); !equalJSON(d["files"], []any{f}) {
		t.Fatalf("find: %v", d)
	}
	if d := sb.data(sb.post("/v1/file/search", map[string]any{"file": f, "regex": "^g"})); !equalJSON(d["matches"], []any{"gamma"}) ||
		!equalJSON(d["line_numbers"], []any{float64(3)}) {
		t.Fatalf("search: %v", d)
	}
	grep := sb.data(sb.post("/v1/file/grep", map[string]any{"path": "/mnt/user-data", "pattern": "beta",
		"case_insensitive": true, "fixed_strings": true, "max_results": 10, "max_file_size": "1M", "recursive": true}))
	m, _ := grep["matches"].([]any)
	if len(m) != 1 || !equalJSON(m[0], map[string]any{"file": f, "line_number": float64(2), "line_content": "BETA"}) {
		t.Fatalf("grep: %v", grep)
	}
	r := dfDo(t, "GET", sb.url+"/v1/file/download?path=/mnt/user-data/outputs/blob.bin", nil, nil)
	if r.status != 200 || !bytes.Equal(r.raw, []byte{0, 1, 2, 255}) {
		t.Fatalf("download: %d %q", r.status, r.raw)
	}
	// The sandbox's shell sessions are names only; DeerFlow creates and
	// deletes them around scoped commands.
	if d := sb.data(sb.post("/v1/shell/sessions/create", map[string]any{"id": "scope-1"})); d["session_id"] != "scope-1" {
		t.Fatalf("shell session create: %v", d)
	}
	if r := dfDo(t, "DELETE", sb.url+"/v1/shell/sessions/scope-1", nil, nil); r.status != 200 {
		t.Fatalf("shell session delete: %d %s", r.status, r.raw)
	}
}

func hasFile(files any, p string) bool {
	l, _ := files.([]any)
	for _, f := range l {
		if m, _ := f.(map[string]any); m["path"] == p {
			return true
		}
	}
	return false
}

func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// dfApproved sends a HIGH command through the sandbox URL: the call holds
// until an approver approves it through the approvals API, then runs.
func dfApproved(t *testing.T, e *deerflowEnv, sb dfSandboxAPI, session string) {
	done := make(chan dfReply, 1)
	go func() {
		done <- dfDo(t, "POST", sb.url+"/v1/shell/exec", nil, map[string]any{"command": `eval "echo approved"`})
	}()
	var id string
	for deadline := time.Now().Add(30 * time.Second); id == "" && time.Now().Before(deadline); {
		r := e.do("GET", "/v1/approvals?status=pending", approverTok, nil)
		items, _ := r.body["approvals"].([]any)
		for _, it := range items {
			if m, _ := it.(map[string]any); m["session_id"] == session {
				id, _ = m["id"].(string)
			}
		}
		select {
		case r := <-done:
			t.Fatalf("the HIGH command did not wait for approval: %d %s", r.status, r.raw)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if id == "" {
		t.Fatal("no pending approval for the sandbox's session")
	}
	if r := e.do("POST", "/v1/approvals/"+id+"/decision", approverTok, map[string]any{"decision": "approve"}); r.status != 200 {
		t.Fatalf("approve: %d %s", r.status, r.raw)
	}
	r := <-done
	d := sb.data(r)
	x, _ := d["x_sandgate"].(map[string]any)
	approval, _ := x["approval"].(map[string]any)
	if d["output"] != "approved\n" || approval["status"] != "approved" {
		t.Fatalf("approved command: %s", r.raw)
	}
}

// dfErrors: the workspace's refusals are AIO file errors; malformed calls
// and async mode are HTTP errors with sandgate's code.
func dfErrors(t *testing.T, e *deerflowEnv, sb dfSandboxAPI) {
	cases := []struct {
		path, errType string
		body          map[string]any
	}{
		{"/v1/file/read", "not_found", map[string]any{"file": "/mnt/user-data/missing.txt"}},
		{"/v1/file/read", "invalid_path", map[string]any{"file": "/etc/passwd"}},
		{"/v1/file/write", "invalid_path", map[string]any{"file": "/mnt/user-data/../../etc/x", "content": "x"}},
		{"/v1/file/read", "decode_error", map[string]any{"file": "/mnt/user-data/outputs/blob.bin"}},
	}
	for _, c := range cases {
		r := sb.post(c.path, c.body)
		d, _ := r.body["data"].(map[string]any)
		if r.status != 200 || r.body["success"] != false || d["error_type"] != c.errType {
			t.Errorf("%s %v: %d %s, want error_type %s", c.path, c.body, r.status, r.raw, c.errType)
		}
	}
	if r := sb.post("/v1/shell/exec", map[string]any{"command": "echo x", "async_mode": true}); r.status != 400 || r.str("error", "code") != "invalid_request" {
		t.Errorf("async_mode: %d %s", r.status, r.raw)
	}
	if r := e.prov.create("sbx-a", "t9", "u1"); r.status != 409 {
		t.Errorf("same sandbox_id, other thread: %d %s", r.status, r.raw)
	}
	if r := e.prov.create("bad/id", "t1", "u1"); r.status != 400 || r.str("detail") == "" {
		t.Errorf("bad sandbox_id: %d %s", r.status, r.raw)
	}
}

// dfIsolation: sandbox A's capability reaches nothing of sandbox B, of
// the token API or of the provisioner; another tenant cannot see A.
func dfIsolation(t *testing.T, e *deerflowEnv, urlA string) {
	b := e.prov.create("sbx-b", "t2", "u1")
	urlB := b.str("sandbox_url")
	if b.status != 200 || urlB == urlA {
		t.Fatalf("create B: %d %s", b.status, b.raw)
	}
	capA := urlA[strings.LastIndex(urlA, "/")+1:]
	// A's capability in B's URL.
	forged := strings.TrimSuffix(urlB, urlB[strings.LastIndex(urlB, "/")+1:]) + capA
	if r := (dfSandboxAPI{t: t, url: forged}).exec("echo x"); r.status != 403 || r.str("error", "code") != "forbidden" {
		t.Fatalf("A's capability on B: %d %s", r.status, r.raw)
	}
	if r := e.do("POST", "/v1/sessions/df.u1.t2/execute", capA, map[string]any{"command": "echo x"}); r.status != 401 {
		t.Fatalf("A's capability as a bearer token on B's session: %d %s", r.status, r.raw)
	}
	if r := (dfProvisioner{t: t, url: e.prov.url, apiKey: capA}).get("sbx-b"); r.status != 401 {
		t.Fatalf("A's capability as the provisioner key: %d %s", r.status, r.raw)
	}
	if r := (dfProvisioner{t: t, url: e.prov.url, apiKey: teamBTok}).get("sbx-a"); r.status != 404 {
		t.Fatalf("another tenant's GET of A: %d %s", r.status, r.raw)
	}
	// Deleting B's session through the sessions API kills B's URL.
	if r := e.do("DELETE", "/v1/sessions/df.u1.t2", agentTok, nil); r.status != 204 && r.status != 200 {
		t.Fatalf("delete B's session: %d %s", r.status, r.raw)
	}
	if r := (dfSandboxAPI{t: t, url: urlB}).exec("echo x"); r.status != 404 {
		t.Fatalf("B's URL after its session was deleted: %d %s", r.status, r.raw)
	}
}
