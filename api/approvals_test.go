package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/confirm"
	"github.com/sandgate/sandgate/deerflow"
	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/subprocess"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/risk"
	"github.com/sandgate/sandgate/workspace"
)

// highRisk is HIGH-risk Python: PERMISSIVE sends it to approval, and the
// approvalToSubprocess policy runs it on the subprocess executor once
// approved. Line 1 and 2 carry the subprocess pattern.
const highRisk = "import subprocess\nprint(subprocess.run(['echo','hi'],capture_output=True).stdout.decode())"

// approvalEnv is a gateway assembled like newEnv's (real OPA, SQLite,
// subprocess executor, real listener) with the approval hub wired as in
// main: the hub is the manager's confirmation service and api's
// Deps.Approvals, and keeps its table in the same audit database.
type approvalEnv struct {
	*env
	hub *confirm.Hub
}

type approvalOpts struct {
	timeout time.Duration // the manager's approval timeout
	dataDir string
	hub     confirm.HubOptions
	// channels, when set, builds the hub's approval channels on the
	// env's audit database.
	channels func(st audit.Store) []confirm.Channel
	// deerflow, when set, mounts the AIO/DeerFlow front end with this
	// configuration, its registry in the env's audit database and a
	// durable session resource (as main wires it).
	deerflow *deerflow.Config
	// log receives the API's log (none when nil).
	log *slog.Logger
	// wrap, when set, wraps the server's handler (a response capture).
	wrap func(*Server, http.Handler) http.Handler
	// sendBuffer, when set, is SO_SNDBUF of every connection the server
	// accepts: a client that stops reading then blocks the server's
	// writer after a few KiB, whatever the kernel's autotuning would
	// have grown the buffer to.
	sendBuffer int
	// grants, when set, enables grants on the hub (the engine's grant
	// rule, records in the env's audit database), as main wires them.
	grants bool
	// proposals, when set, enables agents' proposals (in mode
	// PERMISSIVE, the env's).
	proposals bool
}

// sndbufListener sets SO_SNDBUF on each connection it accepts.
type sndbufListener struct {
	net.Listener
	size int
}

func (l sndbufListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok && err == nil {
		if serr := tc.SetWriteBuffer(l.size); serr != nil {
			c.Close()
			return nil, serr
		}
	}
	return c, err
}

func newApprovalEnv(t *testing.T, o approvalOpts) *approvalEnv {
	t.Helper()
	if o.dataDir == "" {
		o.dataDir = t.TempDir()
	}
	traversable(t, o.dataDir)
	ctx := context.Background()
	var mgr *manager.Manager
	mgrOf := func() *manager.Manager { return mgr }
	st, err := audit.Open(ctx, filepath.Join(o.dataDir, "audit.db"), audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ws, err := workspace.New(filepath.Join(o.dataDir, "workspaces"), workspace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := policy.New(ctx, policy.Options{EvalTimeout: testEvalTimeout, FS: approvalPolicy(t)})
	if err != nil {
		t.Fatal(err)
	}
	sp, err := subprocess.New(ctx, subprocess.Config{})
	if err != nil {
		t.Fatal(err)
	}
	o.hub.Store = st
	if o.channels != nil {
		o.hub.Channels = o.channels(st)
	}
	if o.grants {
		if o.hub.Grants, err = confirm.OpenGrants(ctx, confirm.GrantOptions{Store: st, Audit: st,
			Policy: confirm.EngineGrants(eng, "PERMISSIVE"), MinFor: time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	if o.proposals {
		if o.hub.Proposals, err = confirm.OpenProposals(ctx, confirm.ProposalOptions{Store: st, Audit: st, Policy: eng,
			Mode: "PERMISSIVE", Grants: o.hub.Grants, Executors: func(ctx context.Context) map[string]policy.ExecutorState {
				return mgrOf().ExecutorStates(ctx) // the manager is made below, before any request
			}}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(o.hub.Proposals.Close)
	}
	hub, err := confirm.NewHub(ctx, o.hub)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	var resources []manager.SessionResource
	var sandboxes *deerflow.Registry
	if o.deerflow != nil {
		if sandboxes, err = deerflow.OpenRegistry(ctx, st); err != nil {
			t.Fatal(err)
		}
		resources = append(resources, manager.SessionResource{Name: "deerflow", Durable: true, Release: sandboxes.Release})
	}
	mgr, err = manager.New(manager.Config{Mode: "PERMISSIVE", ApprovalTimeout: o.timeout}, manager.Deps{
		Assessor: risk.NewAssessor(nil, nil), Policy: eng, Confirm: hub,
		Executors: []executors.Executor{sp}, Workspaces: ws, Audit: st, Metrics: manager.NewMetrics(reg),
		Resources: resources, Logger: o.log, Activity: hub.Activity(),
	})
	if err != nil {
		t.Fatal(err)
	}
	auth, err := NewAuth(append([]Token{
		NewToken("a", RoleAgent, agentTok), NewToken("p", RoleApprover, approverTok), NewToken("root", RoleAdmin, adminTok),
		leadAToken(),
	}, tenantTokens()...))
	if err != nil {
		t.Fatal(err)
	}
	var df DeerFlowServer // nil unless mounted: not a nil *deerflow.Server
	if o.deerflow != nil {
		if df, err = deerflow.New(*o.deerflow, deerflow.Deps{Manager: mgr, Registry: sandboxes, Audit: st, Logger: o.log}); err != nil {
			t.Fatal(err)
		}
	}
	h := New(Config{}, Deps{Manager: mgr, Policy: eng, Audit: st, AuditChain: st, Auth: auth, Gatherer: reg, Approvals: hub,
		DeerFlow: df, Logger: o.log})
	var handler http.Handler = h
	if o.wrap != nil {
		handler = o.wrap(h, h)
	}
	srv := httptest.NewUnstartedServer(handler)
	if o.sendBuffer > 0 {
		srv.Listener = sndbufListener{srv.Listener, o.sendBuffer}
	}
	srv.Start()
	e := &approvalEnv{env: &env{t: t, srv: srv, dataDir: o.dataDir, audit: st, ws: ws}, hub: hub}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hub.Close(cctx) // before the store: it records interruptions
		e.srv.Close()
		_ = st.Close()
	})
	return e
}

// approvalPolicy is the default policy with PERMISSIVE's approvals (HIGH
// and CRITICAL) routed to the subprocess executor, so an approved request
// really runs here (the default sends them to docker, not wired in these
// tests). data.json is edited as JSON, whatever its formatting.
func approvalPolicy(t *testing.T) fstest.MapFS {
	t.Helper()
	m := fstest.MapFS{}
	err := fsWalk(policy.DefaultFS(), func(p string, b []byte) {
		if p == "sandgate/config/data.json" {
			var data map[string]any
			if err := json.Unmarshal(b, &data); err != nil {
				t.Fatal(err)
			}
			perm := obj(obj(data["modes"])["PERMISSIVE"])
			for _, level := range []string{"HIGH", "CRITICAL"} {
				l := obj(perm[level])
				if l == nil || l["action"] != "require_approval" {
					t.Fatalf("data.json: PERMISSIVE %s is %v; update the test", level, perm[level])
				}
				l["executor"] = "subprocess"
			}
			var err error
			if b, err = json.Marshal(data); err != nil {
				t.Fatal(err)
			}
		}
		m[p] = &fstest.MapFile{Data: b}
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// pendingCall is an agent request running in the background.
type pendingCall struct {
	done   chan struct{}
	res    resp
	err    error
	cancel context.CancelFunc
}

// runAsync posts a run_code as the agent without blocking the test.
func (e *approvalEnv) runAsync(session, code string) *pendingCall {
	return e.runAsyncAs(agentTok, session, code)
}

// runAsyncAs is runAsync with another agent token.
func (e *approvalEnv) runAsyncAs(tok, session, code string) *pendingCall {
	return e.postAsync(tok, session, runCode(code, "python"))
}

// postAsync posts body to the session's run_code without waiting for the
// answer.
func (e *approvalEnv) postAsync(tok, session string, body any) *pendingCall {
	ctx, cancel := context.WithCancel(context.Background())
	c := &pendingCall{done: make(chan struct{}), cancel: cancel}
	raw, _ := json.Marshal(body)
	go func() {
		defer close(c.done)
		req, _ := http.NewRequestWithContext(ctx, "POST", e.srv.URL+"/v1/sessions/"+session+"/run_code", bytes.NewReader(raw))
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := e.srv.Client().Do(req)
		if err != nil {
			c.err = err
			return
		}
		defer res.Body.Close()
		out, _ := io.ReadAll(res.Body)
		c.res = resp{status: res.StatusCode, header: res.Header, raw: out}
		c.err = json.Unmarshal(out, &c.res.body)
	}()
	return c
}

func (c *pendingCall) wait(t *testing.T) resp {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the agent's call did not return")
	}
	if c.err != nil {
		t.Fatal(c.err)
	}
	return c.res
}

// approverSocket is a real WebSocket client of /v1/approvals/ws.
type approverSocket struct {
	t      *testing.T
	ws     *websocket.Conn
	events chan map[string]any
	held   []map[string]any
	closed chan struct{}
}

func (e *approvalEnv) wsURL() string {
	return "ws" + strings.TrimPrefix(e.srv.URL, "http") + "/v1/approvals/ws"
}

// dialWS opens the socket with hdr and optional subprotocols; it returns
// the handshake's status on failure.
func (e *approvalEnv) dialWS(hdr http.Header, protocols ...string) (*websocket.Conn, *http.Response, error) {
	d := websocket.Dialer{Subprotocols: protocols, HandshakeTimeout: 5 * time.Second}
	ws, res, err := d.Dial(e.wsURL(), hdr)
	if res != nil && res.Body != nil {
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		res.Body = io.NopCloser(bytes.NewReader(raw))
	}
	return ws, res, err
}

func bearer(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }

func (e *approvalEnv) approver(t *testing.T, tok string) *approverSocket {
	t.Helper()
	ws, res, err := e.dialWS(bearer(tok))
	if err != nil {
		t.Fatalf("dial: %v (%v)", err, res)
	}
	s := &approverSocket{t: t, ws: ws, events: make(chan map[string]any, 1024), closed: make(chan struct{})}
	go func() {
		defer close(s.closed)
		for {
			var m map[string]any
			if err := ws.ReadJSON(&m); err != nil {
				return
			}
			s.events <- m
		}
	}()
	t.Cleanup(func() { ws.Close() })
	return s
}

// next returns the first unconsumed event of type typ.
func (s *approverSocket) next(typ string) map[string]any {
	s.t.Helper()
	for i, m := range s.held {
		if m["type"] == typ {
			s.held = append(s.held[:i], s.held[i+1:]...)
			return m
		}
	}
	timeout := time.After(15 * time.Second)
	for {
		select {
		case m := <-s.events:
			if m["type"] == typ {
				return m
			}
			s.held = append(s.held, m)
		case <-s.closed:
			s.t.Fatalf("socket closed while waiting for %s", typ)
		case <-timeout:
			s.t.Fatalf("no %s event", typ)
		}
	}
}

func obj(v any) map[string]any { m, _ := v.(map[string]any); return m }

func approvalOf(m map[string]any) map[string]any { return obj(m["approval"]) }

func TestApprovalTwoApproversFirstWins(t *testing.T) {
	e := newApprovalEnv(t, approvalOpts{})
	p, root := e.approver(t, approverTok), e.approver(t, adminTok)
	for _, s := range []*approverSocket{p, root} {
		if snap := s.next(confirm.EventSnapshot); len(snap["pending"].([]any)) != 0 {
			t.Fatalf("snapshot %v", snap)
		}
	}
	call := e.runAsync("s1", highRisk)
	reqP, reqRoot := approvalOf(p.next(confirm.EventRequested)), approvalOf(root.next(confirm.EventRequested))
	id := reqP["id"].(string)
	if reqRoot["id"] != id || reqP["code"] != highRisk || reqP["risk_level"] != "HIGH" || reqP["session_id"] != "s1" {
		t.Fatalf("requested %v", reqP)
	}
	if pats := reqP["patterns"].([]any); len(pats) == 0 || obj(pats[0])["line"].(float64) < 1 {
		t.Fatalf("patterns %v", reqP["patterns"])
	}

	// p decides first over the API...
	r := e.do("POST", "/v1/approvals/"+id+"/decision", approverTok,
		map[string]any{"decision": "approve", "reason": "expected", "digest": reqP["digest"]})
	if r.status != 200 || r.body["status"] != "approved" || r.body["decided_by"] != "p" {
		t.Fatalf("%d %s", r.status, r.raw)
	}
	// ...root's later decision gets 409 naming p, over the API and the socket.
	r = e.do("POST", "/v1/approvals/"+id+"/decision", adminTok, map[string]any{"decision": "deny"})
	if r.status != 409 || r.errCode() != "conflict" || obj(r.body["approval"])["decided_by"] != "p" {
		t.Fatalf("%d %s", r.status, r.raw)
	}
	if !strings.Contains(string(r.raw), `"approved by p"`) {
		t.Fatalf("409 does not say who decided: %s", r.raw)
	}
	if err := root.ws.WriteJSON(map[string]any{"type": "decide", "ref": "x", "id": id, "decision": "deny"}); err != nil {
		t.Fatal(err)
	}
	res := root.next(confirm.EventResult)
	if res["ok"] != false || obj(res["error"])["code"] != "conflict" || approvalOf(res)["decided_by"] != "p" {
		t.Fatalf("socket conflict %v", res)
	}

	out := call.wait(t)
	if out.status != 200 || out.body["stdout"] != "hi\n\n" {
		t.Fatalf("%d %s", out.status, out.raw)
	}
	if a := obj(out.body["approval"]); a["status"] != "approved" || a["decided_by"] != "p" || a["id"] != id || a["reason"] != "expected" {
		t.Fatalf("approval %s", out.raw)
	}
	for _, s := range []*approverSocket{p, root} {
		if a := approvalOf(s.next(confirm.EventResolved)); a["status"] != "approved" || a["decided_by"] != "p" {
			t.Fatalf("resolved %v", a)
		}
	}
	recs := e.auditRecords("s1")
	if len(recs) != 1 || recs[0].Approval == nil || recs[0].Approval.DecidedBy != "p" || recs[0].Approval.Status != "approved" ||
		recs[0].Approval.Reason != "expected" {
		t.Fatalf("audit %+v", recs)
	}
	// The approvals table records the decision and its timing.
	g := e.do("GET", "/v1/approvals/"+id, approverTok, nil)
	if g.status != 200 || g.body["status"] != "approved" || g.body["decided_at"] == nil || g.body["code"] != nil {
		t.Fatalf("%d %s", g.status, g.raw)
	}
}

func TestApprovalDeniedOverSocketIs403(t *testing.T) {
	e := newApprovalEnv(t, approvalOpts{})
	p := e.approver(t, approverTok)
	p.next(confirm.EventSnapshot)
	call := e.runAsync("s1", highRisk)
	a := approvalOf(p.next(confirm.EventRequested))
	if err := p.ws.WriteJSON(map[string]any{"type": "decide", "ref": "d1", "id": a["id"], "decision": "deny",
		"reason": "not today", "digest": a["digest"]}); err != nil {
		t.Fatal(err)
	}
	if res := p.next(confirm.EventResult); res["ok"] != true || approvalOf(res)["status"] != "denied" {
		t.Fatalf("%v", res)
	}
	out := call.wait(t)
	if out.status != 403 || out.errCode() != "approval_denied" {
		t.Fatalf("%d %s", out.status, out.raw)
	}
	if !strings.Contains(string(out.raw), `"code":"approval_denied","message":"not today"`) {
		t.Fatalf("reason not reported: %s", out.raw)
	}
	if recs := e.auditRecords("s1"); len(recs) != 1 || recs[0].Outcome != audit.OutcomeDenied || recs[0].Approval.DecidedBy != "p" {
		t.Fatalf("audit %+v", recs)
	}
}

func TestApprovalTimeoutThroughAPI(t *testing.T) {
	e := newApprovalEnv(t, approvalOpts{timeout: time.Second})
	p := e.approver(t, approverTok)
	p.next(confirm.EventSnapshot)
	call := e.runAsync("s1", highRisk)
	id := approvalOf(p.next(confirm.EventRequested))["id"]
	out := call.wait(t)
	if out.status != 403 || out.errCode() != "approval_timeout" {
		t.Fatalf("%d %s", out.status, out.raw)
	}
	if a := approvalOf(p.next(confirm.EventResolved)); a["id"] != id || a["status"] != "timeout" {
		t.Fatalf("%v", a)
	}
	if recs := e.auditRecords("s1"); len(recs) != 1 || recs[0].ErrorCode != "approval_timeout" {
		t.Fatalf("audit %+v", recs)
	}
}

func TestApprovalWithdrawnWhenAgentCancels(t *testing.T) {
	e := newApprovalEnv(t, approvalOpts{})
	p := e.approver(t, approverTok)
	p.next(confirm.EventSnapshot)
	call := e.runAsync("s1", highRisk)
	id := approvalOf(p.next(confirm.EventRequested))["id"].(string)
	call.cancel() // the agent hangs up
	if a := approvalOf(p.next(confirm.EventResolved)); a["id"] != id || a["status"] != "withdrawn" {
		t.Fatalf("%v", a)
	}
	r := e.do("POST", "/v1/approvals/"+id+"/decision", approverTok, map[string]any{"decision": "approve"})
	if r.status != 409 || obj(r.body["approval"])["status"] != "withdrawn" {
		t.Fatalf("%d %s", r.status, r.raw)
	}
	if l := e.do("GET", "/v1/approvals?status=pending", approverTok, nil); len(l.body["approvals"].([]any)) != 0 {
		t.Fatalf("still pending: %s", l.raw)
	}
}

func TestApprovalEndpointsRefuseAgents(t *testing.T) {
	e := newApprovalEnv(t, approvalOpts{})
	call := e.runAsync("s1", highRisk)
	defer call.cancel()
	waitPendingAPI(t, e, 1)
	id := e.hub.Pending()[0].ID
	for _, tc := range []struct{ method, path string }{
		{"GET", "/v1/approvals?status=pending"},
		{"GET", "/v1/approvals/" + id},
		{"POST", "/v1/approvals/" + id + "/decision"},
		{"GET", "/v1/approvals/ws"},
	} {
		var body any
		if tc.method == "POST" {
			body = map[string]any{"decision": "approve"}
		}
		if r := e.do(tc.method, tc.path, agentTok, body); r.status != 403 || r.errCode() != "forbidden" {
			t.Errorf("agent %s %s: %d %s", tc.method, tc.path, r.status, r.raw)
		}
		if r := e.do(tc.method, tc.path, "", body); r.status != 401 {
			t.Errorf("anonymous %s %s: %d", tc.method, tc.path, r.status)
		}
	}
	// A real WebSocket handshake with an agent token, by header or by
	// subprotocol: 403, never upgraded.
	for name, dial := range map[string]func() (*websocket.Conn, *http.Response, error){
		"header": func() (*websocket.Conn, *http.Response, error) { return e.dialWS(bearer(agentTok)) },
		"subprotocol": func() (*websocket.Conn, *http.Response, error) {
			return e.dialWS(nil, confirm.Subprotocol, bearerProto(agentTok))
		},
		"bad token": func() (*websocket.Conn, *http.Response, error) {
			return e.dialWS(nil, confirm.Subprotocol, bearerProto("nope-nope-nope"))
		},
	} {
		ws, res, err := dial()
		if err == nil {
			ws.Close()
			t.Fatalf("%s: an agent token opened the socket", name)
		}
		want := 403
		if name == "bad token" {
			want = 401
		}
		if res == nil || res.StatusCode != want {
			t.Fatalf("%s: %v %v", name, err, res)
		}
	}
	if len(e.hub.Pending()) != 1 {
		t.Fatal("the approval was resolved by a refused caller")
	}
}

func bearerProto(tok string) string {
	return confirm.BearerProtocolPrefix + base64.RawURLEncoding.EncodeToString([]byte(tok))
}

func TestApprovalSocketOrigin(t *testing.T) {
	e := newApprovalEnv(t, approvalOpts{})
	self := e.srv.URL // http://127.0.0.1:port
	for _, tc := range []struct {
		origin string
		ok     bool
	}{
		{"", true},
		{self, true},
		{"http://evil.example", false},
		{"null", false},
		{strings.Replace(self, "127.0.0.1", "localhost", 1), false},
	} {
		hdr := http.Header{}
		if tc.origin != "" {
			hdr.Set("Origin", tc.origin)
		}
		// The browser way: the token as a subprotocol.
		ws, res, err := e.dialWS(hdr, confirm.Subprotocol, bearerProto(approverTok))
		if tc.ok {
			if err != nil {
				t.Fatalf("origin %q: %v", tc.origin, err)
			}
			if got := res.Header.Get("Sec-WebSocket-Protocol"); got != confirm.Subprotocol {
				t.Fatalf("selected subprotocol %q", got)
			}
			ws.Close()
			continue
		}
		if err == nil {
			ws.Close()
			t.Fatalf("origin %q accepted", tc.origin)
		}
		if res == nil || res.StatusCode != 403 {
			t.Fatalf("origin %q: %v", tc.origin, res)
		}
		var body map[string]any
		_ = json.NewDecoder(res.Body).Decode(&body)
		if obj(body["error"])["code"] != "forbidden" {
			t.Fatalf("origin %q: body %v", tc.origin, body)
		}
	}
}

func TestApprovalReplayForDifferentCodeRefused(t *testing.T) {
	e := newApprovalEnv(t, approvalOpts{})
	first := e.runAsync("s1", highRisk)
	v1 := waitPendingAPI(t, e, 1)[0]
	r := e.do("POST", "/v1/approvals/"+v1["id"].(string)+"/decision", approverTok,
		map[string]any{"decision": "approve", "digest": v1["digest"]})
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.raw)
	}
	if out := first.wait(t); out.status != 200 {
		t.Fatalf("%d %s", out.status, out.raw)
	}

	other := highRisk + "\nprint('and something else')"
	second := e.runAsync("s1", other)
	v2 := waitPendingAPI(t, e, 1)[0]
	if v2["id"] == v1["id"] || v2["digest"] == v1["digest"] {
		t.Fatalf("new request reuses the approval: %v / %v", v1, v2)
	}
	// Replaying the first approval (its id, its digest) approves nothing.
	r = e.do("POST", "/v1/approvals/"+v1["id"].(string)+"/decision", approverTok,
		map[string]any{"decision": "approve", "digest": v1["digest"]})
	if r.status != 409 {
		t.Fatalf("replayed id: %d %s", r.status, r.raw)
	}
	// The new approval with the old digest: refused, still pending.
	r = e.do("POST", "/v1/approvals/"+v2["id"].(string)+"/decision", approverTok,
		map[string]any{"decision": "approve", "digest": v1["digest"]})
	if r.status != 409 || r.errCode() != "conflict" || !strings.Contains(r.body["error"].(map[string]any)["message"].(string), "does not match") {
		t.Fatalf("old digest: %d %s", r.status, r.raw)
	}
	if l := waitPendingAPI(t, e, 1); l[0]["id"] != v2["id"] {
		t.Fatalf("pending %v", l)
	}
	second.cancel()
	<-second.done
}

func TestApprovalReconnectReceivesPending(t *testing.T) {
	e := newApprovalEnv(t, approvalOpts{})
	s := e.approver(t, approverTok)
	s.next(confirm.EventSnapshot)
	call := e.runAsync("s1", highRisk)
	defer call.cancel()
	id := approvalOf(s.next(confirm.EventRequested))["id"]
	s.ws.Close()
	<-s.closed

	again := e.approver(t, approverTok)
	snap := again.next(confirm.EventSnapshot)
	pending := snap["pending"].([]any)
	if len(pending) != 1 || obj(pending[0])["id"] != id || obj(pending[0])["code"] != highRisk {
		t.Fatalf("snapshot %v", snap)
	}
	if obj(snap["approver"])["name"] != "p" || obj(snap["approver"])["role"] != "approver" {
		t.Fatalf("approver %v", snap["approver"])
	}
}

func TestApprovalInterruptedAtShutdown(t *testing.T) {
	e := newApprovalEnv(t, approvalOpts{})
	call := e.runAsync("s1", highRisk)
	id := waitPendingAPI(t, e, 1)[0]["id"].(string)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.hub.Close(ctx); err != nil {
		t.Fatal(err)
	}
	out := call.wait(t)
	if out.status != 403 || out.errCode() != "approval_denied" || !strings.Contains(string(out.raw), "approval_interrupted") {
		t.Fatalf("%d %s", out.status, out.raw)
	}
	if g := e.do("GET", "/v1/approvals/"+id, approverTok, nil); g.body["status"] != "interrupted" {
		t.Fatalf("%s", g.raw)
	}
	// After shutdown began, new approvals are unavailable, not hung.
	if r := e.do("POST", "/v1/sessions/s1/run_code", agentTok, runCode(highRisk, "python")); r.status != 403 || r.errCode() != "approval_unavailable" {
		t.Fatalf("%d %s", r.status, r.raw)
	}
}

func TestApprovalRestartResolvesPendingAsInterrupted(t *testing.T) {
	dir := t.TempDir()
	db, err := audit.Open(t.Context(), filepath.Join(dir, "audit.db"), audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// A previous run's hub that died with an approval pending.
	old, err := confirm.NewHub(t.Context(), confirm.HubOptions{Store: db})
	if err != nil {
		t.Fatal(err)
	}
	ctx, kill := context.WithCancel(t.Context())
	defer kill()
	go func() { _, _ = old.Confirm(ctx, approvalRequest("s1", "x")) }()
	deadline := time.Now().Add(5 * time.Second)
	for len(old.Pending()) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	id := old.Pending()[0].ID
	if err := db.Close(); err != nil { // the store goes with the process
		t.Fatal(err)
	}

	e := newApprovalEnv(t, approvalOpts{dataDir: dir})
	g := e.do("GET", "/v1/approvals/"+id, approverTok, nil)
	if g.status != 200 || g.body["status"] != "interrupted" {
		t.Fatalf("%d %s", g.status, g.raw)
	}
	if l := e.do("GET", "/v1/approvals?status=interrupted", approverTok, nil); len(l.body["approvals"].([]any)) != 1 {
		t.Fatalf("%s", l.raw)
	}
}

func approvalRequest(session, code string) confirm.Request {
	return confirm.Request{RequestID: "req_x", SessionID: session, Language: "python", Code: code,
		CodeSHA256: policy.SHA256Hex([]byte(code)), RiskLevel: "HIGH", Deadline: time.Now().Add(time.Minute)}
}

func TestApprovalListAndValidation(t *testing.T) {
	e := newApprovalEnv(t, approvalOpts{})
	call := e.runAsync("s1", highRisk)
	v := waitPendingAPI(t, e, 1)[0]
	id := v["id"].(string)
	if v["code"] != highRisk || v["status"] != "pending" || v["deadline"] == nil {
		t.Fatalf("%v", v)
	}
	for _, tc := range []struct {
		body  any
		field string
	}{
		{map[string]any{"decision": "maybe"}, "decision"},
		{map[string]any{"decision": "deny", "reason": strings.Repeat("x", 1001)}, "reason"},
		{map[string]any{"decision": "deny", "extra": 1}, "extra"},
		{"", "body"},
	} {
		r := e.do("POST", "/v1/approvals/"+id+"/decision", approverTok, tc.body)
		if r.status != 400 || r.errField(0) != tc.field {
			t.Errorf("%v: %d %s", tc.body, r.status, r.raw)
		}
	}
	if r := e.do("GET", "/v1/approvals?status=bogus", approverTok, nil); r.status != 400 || r.errField(0) != "status" {
		t.Fatalf("%d %s", r.status, r.raw)
	}
	if r := e.do("GET", "/v1/approvals/apr_nope", approverTok, nil); r.status != 404 || r.errCode() != "not_found" {
		t.Fatalf("%d %s", r.status, r.raw)
	}
	if r := e.do("POST", "/v1/approvals/apr_nope/decision", approverTok, map[string]any{"decision": "deny"}); r.status != 404 {
		t.Fatalf("%d %s", r.status, r.raw)
	}
	if r := e.do("POST", "/v1/approvals/"+id+"/decision", adminTok, map[string]any{"decision": "deny", "reason": "admin says no"}); r.status != 200 {
		t.Fatalf("%d %s", r.status, r.raw)
	}
	call.wait(t)
	l := e.do("GET", "/v1/approvals?status=resolved&limit=10", adminTok, nil)
	list := l.body["approvals"].([]any)
	if l.status != 200 || len(list) != 1 || obj(list[0])["decided_by"] != "root" || obj(list[0])["time_to_decide_ms"] == nil {
		t.Fatalf("%d %s", l.status, l.raw)
	}
}

func TestApprovalPageServed(t *testing.T) {
	e := newApprovalEnv(t, approvalOpts{})
	for _, path := range []string{"/", "/?token=whatever"} {
		r := e.do("GET", path, "", nil)
		if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") || !bytes.Contains(r.raw, []byte("/assets/app.js")) {
			t.Fatalf("%s: %d %s", path, r.status, r.header)
		}
		for h, want := range map[string]string{
			"Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY", "Cache-Control": "no-store",
		} {
			if got := r.header.Get(h); got != want {
				t.Errorf("%s: %s = %q", path, h, got)
			}
		}
		if csp := r.header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
			t.Errorf("CSP %q", csp)
		}
	}
	for path, ctype := range map[string]string{"/assets/app.js": "text/javascript", "/assets/app.css": "text/css"} {
		if r := e.do("GET", path, "", nil); r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), ctype) {
			t.Errorf("%s: %d %q", path, r.status, r.header.Get("Content-Type"))
		}
	}
	for _, path := range []string{"/assets/index.html", "/assets/nope.js", "/assets/..%2fweb.go", "/index.html"} {
		if r := e.do("GET", path, "", nil); r.status != 404 {
			t.Errorf("%s: %d", path, r.status)
		}
	}
}

func TestApprovalsNotWired(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, path := range []string{"/v1/approvals", "/v1/approvals/x", "/v1/approvals/ws"} {
		if r := e.do("GET", path, approverTok, nil); r.status != 404 || r.errCode() != "not_found" {
			t.Errorf("%s: %d %s", path, r.status, r.raw)
		}
	}
	for _, path := range []string{"/v1/approvals", "/v1/approvals/ws"} {
		if r := e.do("GET", path, agentTok, nil); r.status != 403 {
			t.Errorf("agent %s: %d", path, r.status)
		}
	}
}

// waitPendingAPI polls GET /v1/approvals until n are pending.
func waitPendingAPI(t *testing.T, e *approvalEnv, n int) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		r := e.do("GET", "/v1/approvals?status=pending", approverTok, nil)
		list, _ := r.body["approvals"].([]any)
		if len(list) == n {
			out := make([]map[string]any, n)
			for i, v := range list {
				out[i] = obj(v)
			}
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("pending: %s", r.raw)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestApprovalSlowApproverDoesNotDelayOthers(t *testing.T) {
	// Small per-connection queues so the slow approver is dropped quickly;
	// a long write timeout so a hub that waited on it would show. The
	// server's socket buffer is small too: autotuned, it could absorb every
	// event, and the slow approver was then never dropped (seen in CI).
	e := newApprovalEnv(t, approvalOpts{timeout: 3 * time.Second, sendBuffer: 4096,
		hub: confirm.HubOptions{SendBuffer: 32, WriteTimeout: 30 * time.Second}})
	// The slow approver completes the handshake and never reads, with a
	// 4 KiB receive buffer, so its writer soon blocks.
	d := websocket.Dialer{NetDialContext: (&net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return errors.Join(err, serr)
	}}).DialContext}
	slow, _, err := d.Dial(e.wsURL(), bearer(approverTok))
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	fast, _, err := (&websocket.Dialer{}).Dial(e.wsURL(), bearer(adminTok))
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()
	var (
		mu                  sync.Mutex
		requested, resolved = map[string]bool{}, map[string]bool{}
		worst               time.Duration
		readerDone          = make(chan struct{})
	)
	go func() {
		defer close(readerDone)
		for {
			_, data, err := fast.ReadMessage()
			at := time.Now()
			if err != nil {
				return
			}
			var m struct {
				Type       string    `json:"type"`
				ServerTime time.Time `json:"server_time"`
				Approval   struct {
					SessionID string `json:"session_id"`
				} `json:"approval"`
			}
			if json.Unmarshal(data, &m) != nil {
				continue
			}
			mu.Lock()
			worst = max(worst, at.Sub(m.ServerTime))
			switch m.Type {
			case confirm.EventRequested:
				requested[m.Approval.SessionID] = true
			case confirm.EventResolved:
				resolved[m.Approval.SessionID] = true
			}
			mu.Unlock()
		}
	}()
	seen := func(set map[string]bool, session string) bool {
		mu.Lock()
		defer mu.Unlock()
		return set[session]
	}

	// Requests go in one after another (each once its approval is out), so
	// the policy engine is not asked for 60 evaluations at once on a busy
	// machine; the approvals still pile up, each with a ~46 KB event.
	filler := strings.Repeat("# a long comment that makes every event large\n", 1000)
	const n = 60
	calls := make([]*pendingCall, n)
	for i := range calls {
		session := fmt.Sprintf("s%d", i)
		calls[i] = e.runAsync(session, highRisk+"\n"+filler)
		deadline := time.Now().Add(20 * time.Second)
		for !seen(requested, session) {
			select {
			case <-readerDone:
				t.Fatal("the fast approver was disconnected")
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never reached the fast approver", session)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	for i, c := range calls {
		if r := c.wait(t); r.status != 403 || r.errCode() != "approval_timeout" {
			t.Fatalf("s%d: %d %s", i, r.status, r.raw)
		}
		session := fmt.Sprintf("s%d", i)
		deadline := time.Now().Add(20 * time.Second)
		for !seen(resolved, session) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: no resolved event", session)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	mu.Lock()
	// Half the slow approver's 30 s write timeout: a hub that waited on it
	// shows, a loaded machine's scheduling does not.
	if worst > 15*time.Second {
		t.Errorf("an event reached the fast approver after %v", worst)
	}
	mu.Unlock()
	// The slow approver was dropped: its socket is closed from the far end
	// (30 s: the hub drops it at once, but a loaded 2-core machine can
	// take several seconds to schedule the closing write).
	_ = slow.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		if _, _, err := slow.ReadMessage(); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("the slow approver is still connected")
			}
			break
		}
	}
}

func (s *approverSocket) send(v any) {
	s.t.Helper()
	if err := s.ws.WriteJSON(v); err != nil {
		s.t.Fatal(err)
	}
}
