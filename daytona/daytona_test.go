package daytona

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/executortest"
	"github.com/sandgate/sandgate/executors/output"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/risk"
	"github.com/sandgate/sandgate/workspace"
)

func TestPaths(t *testing.T) {
	for _, tc := range []struct {
		in, ws string
		sp     workspace.Spelling
		ok     bool
	}{
		{"", "/workspace", spellWorkspace, true},
		{".", "/workspace", spellWorkspace, true},
		{"data.txt", "/workspace/data.txt", spellWorkspace, true},
		{"~/a/b", "/workspace/a/b", spellWorkspace, true},
		{"/workspace", "/workspace", spellWorkspace, true},
		{"/workspace/sub/x", "/workspace/sub/x", spellWorkspace, true},
		{"/home/daytona", "/workspace", spellHome, true},
		{"/home/daytona/sub/../x", "/workspace/x", spellHome, true},
		{"/home/daytonax/a", "", "", false},
		{"/etc/passwd", "", "", false},
		{"/workspace/../etc", "", "", false},
		{"/tmp/x", "", "", false},
	} {
		ws, sp, ok := toWorkspace(tc.in)
		if ws != tc.ws || sp != tc.sp || ok != tc.ok {
			t.Errorf("toWorkspace(%q) = %q %q %v, want %q %q %v", tc.in, ws, sp, ok, tc.ws, tc.sp, tc.ok)
		}
	}
	for _, tc := range []struct {
		sp           workspace.Spelling
		display, out string
	}{
		{spellHome, "/workspace", "/home/daytona"},
		{spellHome, "/workspace/a/b", "/home/daytona/a/b"},
		{spellWorkspace, "/workspace/a", "/workspace/a"},
	} {
		if got := tc.sp.Show(tc.display); got != tc.out {
			t.Errorf("%q.Show(%q) = %q, want %q", tc.sp, tc.display, got, tc.out)
		}
	}
}

func TestCommandOf(t *testing.T) {
	for name, tc := range map[string]struct {
		body executeBody
		want string
		bad  bool
	}{
		"plain":          {executeBody{Command: "echo hi"}, "echo hi", false},
		"cwd root":       {executeBody{Command: "ls", Cwd: "/home/daytona"}, "ls", false},
		"cwd":            {executeBody{Command: "ls", Cwd: "src"}, "cd '/workspace/src' || exit 1\nls", false},
		"envs sorted":    {executeBody{Command: "env", Envs: map[string]string{"B": "it's", "A": "1"}}, "export A='1'\nexport B='it'\\''s'\nenv", false},
		"empty":          {executeBody{Command: "  "}, "", true},
		"cwd outside":    {executeBody{Command: "ls", Cwd: "/etc"}, "", true},
		"bad env name":   {executeBody{Command: "ls", Envs: map[string]string{"A B": "1"}}, "", true},
		"injecting name": {executeBody{Command: "ls", Envs: map[string]string{"A=1;rm": "1"}}, "", true},
	} {
		got, err := commandOf(tc.body)
		var v *errcode.ValidationError
		if (err != nil) != tc.bad || (err != nil && !errors.As(err, &v)) || got != tc.want {
			t.Errorf("%s: %q %v, want %q (refused %v)", name, got, err, tc.want, tc.bad)
		}
	}
}

func TestCreateRefusals(t *testing.T) {
	for body, field := range map[string]string{
		`{"snapshot":"daytonaio/sandbox:0.4"}`:            "snapshot",
		`{"buildInfo":{"dockerfileContent":"FROM x"}}`:    "snapshot",
		`{"user":"root"}`:                                 "user",
		`{"public":true}`:                                 "public",
		`{"cpu":2}`:                                       "resources",
		`{"gpuType":["H100"]}`:                            "resources",
		`{"volumes":[{"volumeId":"v","mountPath":"/v"}]}`: "volumes",
		`{"networkBlockAll":true}`:                        "network",
		`{"domainAllowList":"example.com"}`:               "network",
		`{"secrets":[{"A":"s"}]}`:                         "secrets",
		`{"env":{"A":"1"}}`:                               "envVars",
		`{"autoStopInterval":99999}`:                      "autoStopInterval",
		`{"labels":{"a=b":"1"}}`:                          "labels",
		`{"labels":{"daytona.x":"1"}}`:                    "labels",
	} {
		var b createBody
		if err := json.Unmarshal([]byte(body), &b); err != nil {
			t.Fatal(err)
		}
		var v *errcode.ValidationError
		if err := b.check(); !errors.As(err, &v) || v.Fields[0].Field != field {
			t.Errorf("%s: %v, want a refusal of %s", body, err, field)
		}
	}
	// What the SDK sends by default passes.
	var b createBody
	if err := json.Unmarshal([]byte(`{"env":{},"labels":{"code-toolbox-language":"python"},"target":"us","autoDeleteInterval":0}`), &b); err != nil {
		t.Fatal(err)
	}
	if err := b.check(); err != nil {
		t.Errorf("the SDK's default create: %v", err)
	}
}

func TestLanguageOf(t *testing.T) {
	for in, want := range map[string]string{"": "python", "python": "python", "javascript": "javascript", "typescript": "", "bash": ""} {
		got, err := languageOf(in)
		if got != want || (err != nil) != (want == "") {
			t.Errorf("languageOf(%q) = %q %v, want %q", in, got, err, want)
		}
	}
}

func TestInterleaved(t *testing.T) {
	var o interleaved
	o.add(output.Chunk{Stream: output.Stdout, Data: []byte("a\n")})
	o.add(output.Chunk{Stream: output.Stderr, Data: []byte("e\n")})
	o.add(output.Chunk{Stream: output.Stdout, Data: []byte("b\n")})
	if got := o.combined("a\nb\n", "e\n"); got != "a\ne\nb\n" {
		t.Errorf("in order: %q", got)
	}
	// A backend that streamed less than it answered: the answer wins.
	if got := o.combined("a\nb\nc\n", "e\n"); got != "a\nb\nc\ne\n" {
		t.Errorf("from the result: %q", got)
	}
}

func TestRefusalText(t *testing.T) {
	r := httptest.NewRequest("GET", "/", nil)
	err := &manager.DeniedError{Kind: errcode.New(errcode.PolicyDenied, "the policy denied the request"),
		Reasons: []policy.Reason{{Code: "risk.critical", Message: "risk level CRITICAL is denied"},
			{Code: "x", Message: "dry", Enforcement: policy.EnforcementDryrun}}}
	if got := refusal(r, err); got != "policy_denied: the policy denied the request: risk level CRITICAL is denied (risk.critical) (request )" {
		t.Errorf("refusal: %q", got)
	}
	w := httptest.NewRecorder()
	bare().WriteError(w, r, err)
	var e apiError
	if json.Unmarshal(w.Body.Bytes(), &e) != nil || w.Code != 403 || e.StatusCode != 403 || e.Code != "policy_denied" ||
		!strings.Contains(e.Message, "CRITICAL") || e.Error != "Forbidden" {
		t.Errorf("the error body: %d %s", w.Code, w.Body.String())
	}
	// Internal text never reaches the client.
	w = httptest.NewRecorder()
	bare().WriteError(w, r, errors.New("open /var/lib/secret: permission denied"))
	if w.Code != 500 || strings.Contains(w.Body.String(), "secret") {
		t.Errorf("an internal error: %d %s", w.Code, w.Body.String())
	}
}

func TestVia(t *testing.T) {
	for _, tc := range []struct{ src, ver, want string }{
		{"sdk-typescript", "0.218.0", "Daytona SDK (sdk-typescript 0.218.0)"},
		{"", "0.218.0", "Daytona SDK"},
		{"x\x00y\n", "1", "Daytona SDK (xy 1)"},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-Daytona-Source", tc.src)
		r.Header.Set("X-Daytona-SDK-Version", tc.ver)
		if got := via(r); got != tc.want {
			t.Errorf("via(%q, %q) = %q, want %q", tc.src, tc.ver, got, tc.want)
		}
	}
}

func TestNewChecksPublicURL(t *testing.T) {
	m := &manager.Manager{}
	for url, ok := range map[string]bool{"": true, "https://gate.example.com/": true, "http://10.0.0.1:8080": true,
		"ftp://x": false, "gate.example.com": false, "https://x/?a=b": false} {
		if _, err := New(Config{PublicURL: url}, Deps{Manager: m}); (err == nil) != ok {
			t.Errorf("public_url %q: %v", url, err)
		}
	}
	if _, err := New(Config{}, Deps{}); err == nil {
		t.Error("no manager: accepted")
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

func bare() *Server { return &Server{log: discard()} }

// harness is the front end on a real manager whose executors (one of
// each kind the default policy routes to) are fakes that run a script by
// answering its echo, print and exit lines.
type harness struct {
	t     *testing.T
	mux   *http.ServeMux
	mgr   *manager.Manager
	mu    sync.Mutex
	specs []executors.Spec
}

// last is the last run's spec.
func (h *harness) last() executors.Spec {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.specs) == 0 {
		h.t.Fatal("nothing ran")
	}
	return h.specs[len(h.specs)-1]
}

func newHarness(t *testing.T, mode string) *harness {
	t.Helper()
	dir := t.TempDir()
	ctx := t.Context()
	st, err := audit.Open(ctx, filepath.Join(dir, "audit.db"), audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	ws, err := workspace.New(filepath.Join(dir, "workspaces"), workspace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := policy.New(ctx, policy.Options{EvalTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, mux: http.NewServeMux()}
	run := func(_ context.Context, spec executors.Spec) (executors.Result, error) {
		h.mu.Lock()
		h.specs = append(h.specs, spec)
		h.mu.Unlock()
		// "echo X" lines print X; "echo X >&2" to stderr; "exit N" ends.
		var res executors.Result
		for line := range strings.SplitSeq(spec.Code, "\n") {
			line = strings.TrimSpace(line)
			switch {
			case strings.HasPrefix(line, "echo ") && strings.HasSuffix(line, ">&2"):
				s := strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(line, "echo "), ">&2")) + "\n"
				res.Stderr += s
				spec.Output(output.Chunk{Stream: output.Stderr, Data: []byte(s)})
			case strings.HasPrefix(line, "echo "):
				s := strings.TrimPrefix(line, "echo ") + "\n"
				res.Stdout += s
				spec.Output(output.Chunk{Stream: output.Stdout, Data: []byte(s)})
			case strings.HasPrefix(line, "print("):
				res.Stdout += strings.Trim(strings.TrimPrefix(line, "print("), `)"'`) + "\n"
			case strings.HasPrefix(line, "exit "):
				res.ExitCode = int(line[5] - '0')
			}
		}
		return res, nil
	}
	var execs []executors.Executor
	for _, k := range []executors.Kind{executors.KindSubprocess, executors.KindDocker, executors.KindGVisor} {
		execs = append(execs, &executortest.Fake{KindValue: k, ExecuteFunc: run})
	}
	mgr, err := manager.New(manager.Config{Mode: mode}, manager.Deps{
		Assessor: risk.NewAssessor(nil, nil), Policy: eng, Executors: execs, Workspaces: ws, Audit: st,
		Metrics: manager.NewMetrics(prometheus.NewRegistry()),
	})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{PublicURL: "https://gate.example.com"}, Deps{Manager: mgr, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	h.mgr = mgr
	s.Routes(func(p string, handler http.Handler) { h.mux.Handle(p, handler) })
	return h
}

// call makes a request as principal p (nil: unauthenticated).
func (h *harness) call(p *manager.Principal, method, path, ctype string, body io.Reader) *httptest.ResponseRecorder {
	h.t.Helper()
	r := httptest.NewRequest(method, path, body)
	if ctype != "" {
		r.Header.Set("Content-Type", ctype)
	}
	r.Header.Set("X-Daytona-Source", "sdk-typescript")
	r.Header.Set("X-Daytona-SDK-Version", "0.218.0")
	if p != nil {
		r = r.WithContext(manager.WithPrincipal(r.Context(), *p))
	}
	w := httptest.NewRecorder()
	h.mux.ServeHTTP(w, r)
	return w
}

func (h *harness) json(p *manager.Principal, method, path, body string, want int, out any) {
	h.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	w := h.call(p, method, path, "application/json", rd)
	if w.Code != want {
		h.t.Fatalf("%s %s: %d %s, want %d", method, path, w.Code, w.Body.String(), want)
	}
	if out != nil {
		if err := json.Unmarshal(w.Body.Bytes(), out); err != nil {
			h.t.Fatalf("%s %s: %v: %s", method, path, err, w.Body.String())
		}
	}
}

var (
	alice = &manager.Principal{Role: "agent", Name: "alice", Tenant: "alice"}
	bob   = &manager.Principal{Role: "agent", Name: "bob", Tenant: "bob"}
)

func TestSandboxLifecycle(t *testing.T) {
	h := newHarness(t, "STRICT")
	var sb sandboxView
	h.json(alice, "POST", "/daytona/sandbox", `{"env":{},"labels":{"code-toolbox-language":"python","team":"x"},"autoStopInterval":5}`, 200, &sb)
	if !strings.HasPrefix(sb.ID, "dtn-") || sb.State != "started" || sb.OrganizationID != "alice" || sb.AutoStopInterval != 5 ||
		sb.ToolboxProxyURL != "https://gate.example.com/daytona/toolbox" || sb.Labels["code-toolbox-language"] != "python" {
		t.Fatalf("created %+v", sb)
	}
	info, err := h.mgr.Session(t.Context(), *alice, sb.ID)
	if err != nil || info.FrontEnd != "daytona" || info.IdleTimeoutS != 300 {
		t.Fatalf("the session: %+v %v", info, err)
	}
	var got sandboxView
	h.json(alice, "GET", "/daytona/sandbox/"+sb.ID, "", 200, &got)
	if got.ID != sb.ID || got.State != "started" || got.Env == nil || got.AutoStopInterval != 5 {
		t.Errorf("get: %+v", got)
	}
	var url struct{ URL string }
	h.json(alice, "GET", "/daytona/sandbox/"+sb.ID+"/toolbox-proxy-url", "", 200, &url)
	if url.URL != sb.ToolboxProxyURL {
		t.Errorf("toolbox url %q", url.URL)
	}
	// A named sandbox, and a REST session, which is not a Daytona sandbox.
	h.json(alice, "POST", "/daytona/sandbox", `{"name":"named-one"}`, 200, nil)
	h.json(alice, "POST", "/daytona/sandbox", `{"name":"named-one"}`, 409, nil)
	if _, _, err := h.mgr.CreateSession(t.Context(), *alice, "rest-one", manager.OpenOptions{FrontEnd: "rest"}); err != nil {
		t.Fatal(err)
	}
	h.json(alice, "GET", "/daytona/sandbox/rest-one", "", 404, nil)
	h.json(alice, "POST", "/daytona/toolbox/rest-one/process/execute", `{"command":"echo hi"}`, 404, nil)

	for name, tc := range map[string]struct {
		query string
		want  []string
	}{
		"all":      {"", []string{"named-one", sb.ID}},
		"by label": {`?labels={"team":"x"}`, []string{sb.ID}},
		"by name":  {"?name=named-one", []string{"named-one"}},
	} {
		var l listResponse
		h.json(alice, "GET", "/daytona/sandbox"+strings.ReplaceAll(tc.query, `"`, "%22"), "", 200, &l)
		ids := []string{}
		for _, it := range l.Items {
			ids = append(ids, it.ID)
		}
		slices.Sort(ids)
		slices.Sort(tc.want)
		if !slices.Equal(ids, tc.want) || l.NextCursor != nil {
			t.Errorf("list %s: %v, want %v", name, ids, tc.want)
		}
	}
	var paged listResponse
	h.json(alice, "GET", "/daytona/sandbox?limit=1", "", 200, &paged)
	if len(paged.Items) != 1 || paged.NextCursor == nil {
		t.Errorf("a first page of one: %+v", paged)
	}

	// Another tenant sees nothing of it, and creates nothing by trying.
	h.json(bob, "GET", "/daytona/sandbox/"+sb.ID, "", 404, nil)
	h.json(bob, "POST", "/daytona/toolbox/"+sb.ID+"/process/execute", `{"command":"echo hi"}`, 404, nil)
	h.json(bob, "DELETE", "/daytona/sandbox/"+sb.ID, "", 404, nil)
	if _, err := h.mgr.Session(t.Context(), *bob, sb.ID); err == nil {
		t.Error("bob's toolbox call created a session")
	}
	var l listResponse
	h.json(bob, "GET", "/daytona/sandbox", "", 200, &l)
	if len(l.Items) != 0 {
		t.Errorf("bob lists %+v", l.Items)
	}

	var gone sandboxView
	h.json(alice, "DELETE", "/daytona/sandbox/"+sb.ID, "", 200, &gone)
	if gone.State != "destroyed" {
		t.Errorf("deleted: %+v", gone)
	}
	var e apiError
	h.json(alice, "GET", "/daytona/sandbox/"+sb.ID, "", 404, &e)
	if e.StatusCode != 404 || e.Code != "not_found" {
		t.Errorf("after delete: %+v", e)
	}
	h.json(alice, "POST", "/daytona/toolbox/"+sb.ID+"/process/execute", `{"command":"echo hi"}`, 404, nil)
}

func TestUnauthenticated(t *testing.T) {
	h := newHarness(t, "STRICT")
	for _, path := range []string{"/daytona/sandbox", "/daytona/toolbox/x/files?path=a"} {
		w := h.call(nil, "GET", path, "", nil)
		var e apiError
		if json.Unmarshal(w.Body.Bytes(), &e) != nil || w.Code != 401 || e.StatusCode != 401 || !strings.Contains(e.Message, "apiKey") {
			t.Errorf("%s unauthenticated: %d %s", path, w.Code, w.Body.String())
		}
	}
}

func TestToolbox(t *testing.T) {
	h := newHarness(t, "STRICT")
	var sb sandboxView
	h.json(alice, "POST", "/daytona/sandbox", `{}`, 200, &sb)
	tb := "/daytona/toolbox/" + sb.ID

	var home struct{ Dir string }
	h.json(alice, "GET", tb+"/user-home-dir", "", 200, &home)
	if home.Dir != "/workspace" {
		t.Errorf("home %q", home.Dir)
	}
	var ex executeResponse
	h.json(alice, "POST", tb+"/process/execute", `{"command":"echo out\necho err >&2\necho more\nexit 3","timeout":5}`, 200, &ex)
	if ex.ExitCode != 3 || ex.Result != "out\nerr\nmore\n" {
		t.Errorf("execute: %+v", ex)
	}
	spec := h.last()
	if spec.Language != "bash" || spec.Timeout.Seconds() != 5 {
		t.Errorf("the run's spec: %s %s", spec.Language, spec.Timeout)
	}
	var cr codeRunResponse
	h.json(alice, "POST", tb+"/process/code-run", `{"code":"print('hi')","language":"python"}`, 200, &cr)
	if cr.ExitCode != 0 || cr.Result != "hi\n" || cr.Artifacts.Charts == nil {
		t.Errorf("code-run: %+v", cr)
	}
	for body, field := range map[string]string{
		`{"command":""}`:                                "command",
		`{"command":"ls","cwd":"/etc"}`:                 "cwd",
		`{"command":"ls","timeout":7200}`:               "timeout",
		`{"code":"1","language":"typescript"}`:          "language",
		`{"code":"1","language":"python","argv":["a"]}`: "argv",
		`{"code":"1","envs":{"A":"1"}}`:                 "envs",
	} {
		path := tb + "/process/execute"
		if strings.Contains(body, "code") {
			path = tb + "/process/code-run"
		}
		var e apiError
		h.json(alice, "POST", path, body, 400, &e)
		if e.Code != "invalid_request" || !strings.Contains(e.Message, field) {
			t.Errorf("%s: %+v", body, e)
		}
	}
	// In STRICT the CRITICAL command is the SDK's 403 with the reason.
	var e apiError
	h.json(alice, "POST", tb+"/process/execute", `{"command":"rm -rf /"}`, 403, &e)
	if e.Code != "policy_denied" || !strings.Contains(e.Message, "CRITICAL") {
		t.Errorf("critical: %+v", e)
	}

	// Upload two files (as the SDK does: files[i].path, then files[i].file).
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for i, f := range []struct{ path, data string }{{"data.txt", "hello\n"}, {"/home/daytona/sub/n.txt", "nested\n"}} {
		_ = mw.WriteField("files["+string(rune('0'+i))+"].path", f.path)
		fw, _ := mw.CreateFormFile("files["+string(rune('0'+i))+"].file", f.path)
		_, _ = fw.Write([]byte(f.data))
	}
	_ = mw.Close()
	if w := h.call(alice, "POST", tb+"/files/bulk-upload", mw.FormDataContentType(), &buf); w.Code != 200 ||
		w.Body.String() != `["/workspace/data.txt","/home/daytona/sub/n.txt"]`+"\n" {
		t.Fatalf("upload: %d %s", w.Code, w.Body.String())
	}
	var list []fileInfo
	h.json(alice, "GET", tb+"/files?path=/home/daytona", "", 200, &list)
	names := map[string]fileInfo{}
	for _, f := range list {
		names[f.Name] = f
	}
	if f := names["data.txt"]; f.IsDir || f.Size != 6 || f.Path != "/home/daytona/data.txt" || f.ModTime == "" {
		t.Errorf("listed data.txt: %+v", f)
	}
	if f := names["sub"]; !f.IsDir {
		t.Errorf("listed sub: %+v", f)
	}
	var info fileInfo
	h.json(alice, "GET", tb+"/files/info?path=sub/n.txt", "", 200, &info)
	if info.Size != 7 || info.Name != "n.txt" {
		t.Errorf("info: %+v", info)
	}
	if w := h.call(alice, "GET", tb+"/files/download?path=data.txt", "", nil); w.Code != 200 || w.Body.String() != "hello\n" {
		t.Errorf("download: %d %q", w.Code, w.Body.String())
	}

	// Bulk download: a file part and an error part, each named by the
	// path as asked.
	w := h.call(alice, "POST", tb+"/files/bulk-download", "application/json",
		strings.NewReader(`{"paths":["data.txt","missing.txt","/etc/passwd"]}`))
	mt, params, err := mime.ParseMediaType(w.Header().Get("Content-Type"))
	if w.Code != 200 || err != nil || mt != "multipart/form-data" {
		t.Fatalf("bulk download: %d %s", w.Code, w.Header())
	}
	mr := multipart.NewReader(w.Body, params["boundary"])
	var parts []string
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(p)
		// The whole path, as the SDK's parser (busboy, preservePath) reads
		// it; FileName() would keep its base only.
		_, cd, _ := mime.ParseMediaType(p.Header.Get("Content-Disposition"))
		parts = append(parts, p.FormName()+" "+cd["filename"]+" "+strings.TrimSpace(string(b)))
	}
	if len(parts) != 3 || parts[0] != "file data.txt hello" || !strings.HasPrefix(parts[1], `error missing.txt {"statusCode":404`) ||
		!strings.HasPrefix(parts[2], `error /etc/passwd {"statusCode":400`) {
		t.Errorf("bulk download parts: %q", parts)
	}

	// createFolder is a mkdir through the pipeline.
	h.json(alice, "POST", tb+"/files/folder?path=/home/daytona/new&mode=755", "", 201, nil)
	if spec := h.last(); spec.Code != "mkdir -p -m 755 -- '/workspace/new'" {
		t.Errorf("createFolder ran %q", spec.Code)
	}
	h.json(alice, "POST", tb+"/files/folder?path=new&mode=7%3Brm", "", 400, nil)
	h.json(alice, "POST", tb+"/files/folder?path=/etc/x", "", 400, nil)

	// Delete: a file, a directory only with recursive.
	h.json(alice, "DELETE", tb+"/files?path=data.txt", "", 204, nil)
	h.json(alice, "DELETE", tb+"/files?path=data.txt", "", 404, nil)
	h.json(alice, "DELETE", tb+"/files?path=sub", "", 409, nil)
	h.json(alice, "DELETE", tb+"/files?path=sub&recursive=true", "", 204, nil)
	h.json(alice, "DELETE", tb+"/files?path=/home/daytona", "", 400, nil)
	h.json(alice, "GET", tb+"/files?path=/etc", "", 400, nil)
}

func TestBodyLimit(t *testing.T) {
	h := newHarness(t, "STRICT")
	s, _ := New(Config{}, Deps{Manager: h.mgr})
	for _, tc := range []struct {
		method, path string
		big          bool
	}{
		{"POST", "/daytona/toolbox/x/files/bulk-upload", true},
		{"GET", "/daytona/toolbox/x/files/bulk-upload", false},
		{"POST", "/daytona/sandbox", false},
		{"POST", "/e2b/files/bulk-upload", false},
	} {
		if got := s.BodyLimit(httptest.NewRequest(tc.method, tc.path, nil)) > 0; got != tc.big {
			t.Errorf("%s %s: a cap of its own %v, want %v", tc.method, tc.path, got, tc.big)
		}
	}
}
