package e2b

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/workspace"
)

// envelope frames msg as the Connect protocol does.
func envelope(flags byte, msg string) []byte {
	b := make([]byte, 5, 5+len(msg))
	b[0] = flags
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

// envelopes splits a streamed body into its messages.
func envelopes(t *testing.T, body []byte) (msgs []string, flags []byte) {
	t.Helper()
	for len(body) > 0 {
		if len(body) < 5 {
			t.Fatalf("a cut envelope: %q", body)
		}
		n := binary.BigEndian.Uint32(body[1:5])
		if int(n) > len(body)-5 {
			t.Fatalf("an envelope of %d bytes in %d", n, len(body)-5)
		}
		flags = append(flags, body[0])
		msgs = append(msgs, string(body[5:5+n]))
		body = body[5+n:]
	}
	return msgs, flags
}

func TestStreamRequestAndWriter(t *testing.T) {
	r := httptest.NewRequest("POST", "/e2b/process.Process/Start",
		bytes.NewReader(envelope(0, `{"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"]},"stdin":false,"extra":1}`)))
	r.Header.Set("Content-Type", "application/connect+json")
	var req startRequest
	if err := readStreamRequest(r, &req); err != nil {
		t.Fatal(err)
	}
	if req.Process.Cmd != "/bin/bash" || len(req.Process.Args) != 3 || req.Process.Args[2] != "echo hi" {
		t.Fatalf("decoded %+v", req)
	}

	w := httptest.NewRecorder()
	sw := newStreamWriter(w, DefaultWriteTimeout)
	sw.send(eventMessage{Event: processEvent{Start: &startEvent{PID: 100}}})
	sw.send(eventMessage{Event: processEvent{Data: &dataEvent{Stdout: []byte("hi\n")}}})
	code := "e"
	sw.send(eventMessage{Event: processEvent{End: &endEvent{ExitCode: 3, Exited: true, Status: "exit status 3", Error: &code}}})
	sw.end(nil)
	if sw.send(eventMessage{}) {
		t.Error("a message after the end was sent")
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/connect+json" {
		t.Errorf("content type %q", ct)
	}
	msgs, flags := envelopes(t, w.Body.Bytes())
	want := []string{`{"event":{"start":{"pid":100}}}`, `{"event":{"data":{"stdout":"aGkK"}}}`,
		`{"event":{"end":{"exitCode":3,"exited":true,"status":"exit status 3","error":"e"}}}`, `{}`}
	if strings.Join(msgs, "\n") != strings.Join(want, "\n") || !bytes.Equal(flags, []byte{0, 0, 0, flagEndStream}) {
		t.Errorf("got %q flags %v", msgs, flags)
	}

	w = httptest.NewRecorder()
	newStreamWriter(w, DefaultWriteTimeout).end(rpcErr(codeNotFound, "gone"))
	msgs, flags = envelopes(t, w.Body.Bytes())
	if len(msgs) != 1 || flags[0] != flagEndStream || msgs[0] != `{"error":{"code":"not_found","message":"gone"}}` {
		t.Errorf("error end %q", msgs)
	}
}

func TestStreamRequestRefusals(t *testing.T) {
	for name, tc := range map[string]struct {
		ct   string
		body []byte
		code string
	}{
		"binary codec": {"application/connect+proto", envelope(0, "{}"), codeInvalidArgument},
		"compressed":   {"application/connect+json", envelope(flagCompressed, "{}"), codeUnimplemented},
		"cut":          {"application/connect+json", envelope(0, `{"process":{}}`)[:8], codeInvalidArgument},
		"too large":    {"application/connect+json", []byte{0, 0xff, 0xff, 0xff, 0xff}, codeResourceExhausted},
		"not json":     {"application/connect+json", envelope(0, "{"), codeInvalidArgument},
	} {
		r := httptest.NewRequest("POST", "/", bytes.NewReader(tc.body))
		r.Header.Set("Content-Type", tc.ct)
		var req startRequest
		if err := readStreamRequest(r, &req); err == nil || err.Code != tc.code {
			t.Errorf("%s: %v, want %s", name, err, tc.code)
		}
	}
}

func TestPaths(t *testing.T) {
	for _, tc := range []struct {
		in, ws string
		sp     workspace.Spelling
		ok     bool
	}{
		{"/home/user", "/workspace", spellHome, true},
		{"/home/user/a.txt", "/workspace/a.txt", spellHome, true},
		{"/home/user/x/../a.txt", "/workspace/a.txt", spellHome, true},
		{"a/b", "/workspace/a/b", spellHome, true},
		{"~/a", "/workspace/a", spellHome, true},
		{"/workspace/a", "/workspace/a", spellWorkspace, true},
		{"/home/user/../../etc/passwd", "", "", false},
		{"/home/username", "", "", false},
		{"/tmp/x", "", "", false},
	} {
		ws, sp, ok := toWorkspace(tc.in)
		if ws != tc.ws || sp != tc.sp || ok != tc.ok {
			t.Errorf("toWorkspace(%q) = %q %q %v, want %q %q %v", tc.in, ws, sp, ok, tc.ws, tc.sp, tc.ok)
		}
	}
	if got := spellHome.Show("/workspace/a/b"); got != "/home/user/a/b" {
		t.Errorf("show: %q", got)
	}
	if got := spellHome.Show("/workspace"); got != "/home/user" {
		t.Errorf("show root: %q", got)
	}
	if got := spellWorkspace.Show("/workspace/a"); got != "/workspace/a" {
		t.Errorf("show workspace: %q", got)
	}
}

func TestCommandOf(t *testing.T) {
	sb := &sandbox{record: record{envs: map[string]string{"A": "x y"}}}
	cwd := "/home/user/sub"
	for _, tc := range []struct {
		c    processConfig
		want string
	}{
		{processConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", "echo hi"}}, "export A='x y'\necho hi"},
		{processConfig{Cmd: "ls", Args: []string{"-la", "it's"}}, "export A='x y'\n'ls' '-la' 'it'\\''s'"},
		{processConfig{Cmd: "/bin/bash", Args: []string{"-c", "pwd"}, Cwd: &cwd, Envs: map[string]string{"B": "1"}},
			"cd '/home/user/sub' || exit 1\nexport A='x y'\nexport B='1'\npwd"},
	} {
		got, err := commandOf(sb, tc.c)
		if err != nil || got != tc.want {
			t.Errorf("commandOf(%+v) = %q, %v; want %q", tc.c, got, err, tc.want)
		}
	}
	bad := "/etc"
	if _, err := commandOf(sb, processConfig{Cmd: "/bin/bash", Args: []string{"-c", "x"}, Cwd: &bad}); err == nil {
		t.Error("a cwd outside the tree was accepted")
	}
	if _, err := commandOf(&sandbox{}, processConfig{Cmd: "x", Envs: map[string]string{"A;rm": "1"}}); err == nil {
		t.Error("a bad environment variable name was accepted")
	}
}

func TestCellResults(t *testing.T) {
	name, value := cellError("Traceback...\n----> 1 1/0\n\nZeroDivisionError: division by zero\n")
	if name != "ZeroDivisionError" || value != "division by zero" {
		t.Errorf("cellError: %q %q", name, value)
	}
	if name, _ := cellError("KeyboardInterrupt\n"); name != "KeyboardInterrupt" {
		t.Errorf("bare name: %q", name)
	}
	if got := errorName(errcode.PolicyDenied); got != "PolicyDenied" {
		t.Errorf("errorName: %q", got)
	}
	b := executors.Bundle{"text/plain": json.RawMessage(`"<Figure>"`), "image/png": json.RawMessage(`"iVBOR"`),
		"application/vnd.custom": json.RawMessage(`{"x":1}`)}
	r := resultOf(b, false)
	if r["type"] != "result" || string(r["png"].(json.RawMessage)) != `"iVBOR"` || string(r["text"].(json.RawMessage)) != `"<Figure>"` ||
		r["application/vnd.custom"] == nil || !isPicture(b) {
		t.Errorf("resultOf: %v", r)
	}
}

// bare is a Server with a registry and no manager: enough for the
// refusals that come before any session work.
func bare() *Server {
	return &Server{cfg: Config{Keepalive: DefaultKeepalive, WriteTimeout: DefaultWriteTimeout},
		deps: Deps{Registry: NewRegistry()}, log: slog.New(slog.DiscardHandler)}
}

func TestSandboxAuth(t *testing.T) {
	s := bare()
	sb := newSandbox("sbxtest", "base", manager.Principal{Role: "agent", Name: "a", Tenant: "t"}, "e2b-js 2.51.0", nil)
	if err := s.deps.Registry.register(t.Context(), sb); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	s.Routes(func(p string, h http.Handler, _ bool) { mux.Handle(p, h) })

	call := func(path, id, token, traffic string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", path, strings.NewReader(`{}`))
		r.Header.Set("Content-Type", "application/json")
		if id != "" {
			r.Header.Set("E2b-Sandbox-Id", id)
		}
		if token != "" {
			r.Header.Set("X-Access-Token", token)
		}
		if traffic != "" {
			r.Header.Set("E2B-Traffic-Access-Token", traffic)
		}
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		return w
	}
	for name, tc := range map[string]struct {
		path, id, token, traffic string
		status                   int
		code                     string
	}{
		"no sandbox id":        {"/e2b/process.Process/List", "", sb.envdToken, "", 400, codeInvalidArgument},
		"unknown sandbox":      {"/e2b/process.Process/List", "sbxother", sb.envdToken, "", 503, codeUnavailable},
		"no token":             {"/e2b/process.Process/List", sb.id, "", "", 401, codeUnauthenticated},
		"wrong token":          {"/e2b/filesystem.Filesystem/Stat", sb.id, sb.trafficToken, "", 401, codeUnauthenticated},
		"traffic not on envd":  {"/e2b/process.Process/List", sb.id, "", sb.trafficToken, 401, codeUnauthenticated},
		"list":                 {"/e2b/process.Process/List", sb.id, sb.envdToken, "", 200, ""},
		"unimplemented method": {"/e2b/process.Process/Update", sb.id, sb.envdToken, "", 404, codeUnimplemented},
		"no such pid":          {"/e2b/process.Process/SendSignal", sb.id, sb.envdToken, "", 400, codeInvalidArgument},
	} {
		w := call(tc.path, tc.id, tc.token, tc.traffic)
		var e rpcError
		_ = json.Unmarshal(w.Body.Bytes(), &e)
		if w.Code != tc.status || e.Code != tc.code {
			t.Errorf("%s: %d %s, want %d %q", name, w.Code, w.Body.String(), tc.status, tc.code)
		}
	}
	// The interpreter's routes take either token; contexts list the
	// session's kernel.
	r := httptest.NewRequest("GET", "/e2b/contexts", nil)
	r.Header.Set("E2b-Sandbox-Id", sb.id)
	r.Header.Set("E2B-Traffic-Access-Token", sb.trafficToken)
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"id":"default"`) {
		t.Errorf("contexts with the traffic token: %d %s", w.Code, w.Body.String())
	}
	// A released session's sandbox is gone at once.
	if err := s.deps.Registry.Release(t.Context(), "t~"+sb.id); err != nil {
		t.Fatal(err)
	}
	if w := call("/e2b/process.Process/List", sb.id, sb.envdToken, ""); w.Code != 503 {
		t.Errorf("after release: %d %s", w.Code, w.Body.String())
	}
}

func TestControlPlaneRefusals(t *testing.T) {
	s := bare()
	mux := http.NewServeMux()
	s.Routes(func(p string, h http.Handler, _ bool) { mux.Handle(p, h) })
	// Without a principal (api did not authenticate): E2B's 401 body.
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest("POST", "/e2b/v2/sandboxes", strings.NewReader(`{}`)))
	var e apiError
	if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || w.Code != 401 || e.Code != 401 || !strings.Contains(e.Message, "X-API-Key") {
		t.Errorf("unauthenticated create: %d %s", w.Code, w.Body.String())
	}
	for _, body := range []string{`{"templateID":"desktop"}`, `{"autoPause":true}`, `{"timeout":-1}`,
		`{"network":{"allowOut":["x"]}}`, `{"envVars":{"A B":"1"}}`} {
		var b createBody
		if err := json.Unmarshal([]byte(body), &b); err != nil {
			t.Fatal(err)
		}
		err := b.check()
		var v *errcode.ValidationError
		if !errors.As(err, &v) {
			t.Errorf("%s: %v, want a validation error", body, err)
		}
	}
	var b createBody
	if err := b.check(); err != nil || b.TemplateID != "base" {
		t.Errorf("the default template: %v %q", err, b.TemplateID)
	}
}

func TestRefusalText(t *testing.T) {
	err := &manager.DeniedError{Kind: errcode.New(errcode.PolicyDenied, "the policy denied the request"),
		Reasons: []policy.Reason{{Code: "risk.critical", Message: "risk level CRITICAL is denied"},
			{Code: "x", Message: "dry", Enforcement: policy.EnforcementDryrun}}}
	got := refusal(t.Context(), err)
	if got != "policy_denied: the policy denied the request: risk level CRITICAL is denied (risk.critical) (request )" {
		t.Errorf("refusal: %q", got)
	}
	ev := endOf(err, got)
	if ev.End == nil || ev.End.ExitCode != exitRefused || ev.End.Error == nil || *ev.End.Error != got {
		t.Errorf("end: %+v", ev.End)
	}
	if ev := endOf(manager.ErrCancelled, ""); ev.End.ExitCode != exitKilled {
		t.Errorf("killed: %+v", ev.End)
	}
}

// TestKilledWhileStarting: a command whose start fails because the
// client killed it (its context ended) ends as killed (137), whatever
// the interrupted step's error; one that fails on its own is refused.
func TestKilledWhileStarting(t *testing.T) {
	cut := errors.New("docker: create: the request was cut short")
	live := context.Background()
	killed, cancel := context.WithCancel(context.Background())
	cancel()
	cases := []struct {
		name string
		ctx  context.Context
		want int
	}{
		{"killed while starting", killed, exitKilled},
		{"failed on its own", live, exitRefused},
	}
	for _, c := range cases {
		if got := int(endOf(killedOr(c.ctx, cut), "msg").End.ExitCode); got != c.want {
			t.Errorf("%s: exit %d, want %d", c.name, got, c.want)
		}
	}
}
