package api

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/browser"
	"github.com/sandgate/sandgate/confirm"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/workspace"
)

// Two teams' agent tokens, for the tenancy tests.
const (
	teamATok = "team-a-agent-token-0123456789"
	teamBTok = "team-b-agent-token-0123456789"
)

func tenantTokens() []Token {
	a := NewToken("bot-a", RoleAgent, teamATok)
	a.Tenant = "team-a"
	b := NewToken("bot-b", RoleAgent, teamBTok)
	b.Tenant = "team-b"
	return []Token{a, b}
}

// maybeBrowser wires the browser router when Chromium is installed (and
// fails without it under SANDGATE_REQUIRE_BROWSER=1); without it the
// browser endpoint still resolves the session first, so the tenancy
// answers are the same.
func maybeBrowser(t *testing.T, allow ...string) func(*policy.Engine, audit.Store, *workspace.Workspaces) *browser.Manager {
	if _, err := os.Stat(browser.DefaultChromiumPath); err != nil {
		if os.Getenv("SANDGATE_REQUIRE_BROWSER") == "1" {
			t.Fatal("chromium is not installed and SANDGATE_REQUIRE_BROWSER=1")
		}
		t.Log("chromium is not installed: the browser endpoint is checked without a browser behind it")
		return nil
	}
	return browserFor(t, allow...)
}

// endpoint is one session-scoped request; "{id}" in path and body is the
// session id under test.
type endpoint struct {
	name, method, path string
	body               any
	accept             string // "": the default (JSON)
}

// sessionEndpoints is every session-scoped endpoint of the API.
var sessionEndpoints = []endpoint{
	{"run_code", "POST", "/v1/sessions/{id}/run_code", runCode("print(open('secret.txt').read())", "python"), ""},
	{"execute", "POST", "/v1/sessions/{id}/execute", map[string]any{"command": "cat secret.txt"}, ""},
	// Streamed runs are resolved before the stream starts: a refusal is
	// an ordinary JSON error.
	{"run_code streamed", "POST", "/v1/sessions/{id}/run_code", runCode("print(open('secret.txt').read())", "python"), "application/x-ndjson"},
	{"execute streamed", "POST", "/v1/sessions/{id}/execute", map[string]any{"command": "cat secret.txt"}, "application/x-ndjson"},
	{"file get", "GET", "/v1/sessions/{id}/files/content?path=secret.txt", nil, ""},
	{"file put", "PUT", "/v1/sessions/{id}/files/content?path=secret.txt", "pwned", ""},
	{"file read", "GET", "/v1/sessions/{id}/files/read?path=secret.txt", nil, ""},
	{"file edit", "POST", "/v1/sessions/{id}/files/edit", map[string]any{"path": "secret.txt", "old": "a-secret", "new": "pwned"}, ""},
	{"file list", "GET", "/v1/sessions/{id}/files/list?path=", nil, ""},
	{"file glob", "GET", "/v1/sessions/{id}/files/glob?pattern=*", nil, ""},
	{"file grep", "GET", "/v1/sessions/{id}/files/grep?pattern=secret", nil, ""},
	{"file delete", "DELETE", "/v1/sessions/{id}/files?path=secret.txt", nil, ""},
	{"browser", "POST", "/v1/sessions/{id}/browser", map[string]any{"action": "content"}, ""},
	{"session get", "GET", "/v1/sessions/{id}", nil, ""},
	{"session delete", "DELETE", "/v1/sessions/{id}?purge=true", nil, ""},
	{"evaluate", "POST", "/v1/policy/evaluate", map[string]any{"session_id": "{id}", "code": "print(1)", "language": "python"}, ""},
}

func (ep endpoint) call(e *env, token, id string) resp {
	e.t.Helper()
	var body any = ep.body
	switch b := ep.body.(type) {
	case map[string]any:
		c := map[string]any{}
		for k, v := range b {
			if v == "{id}" {
				v = id
			}
			c[k] = v
		}
		body = c
	}
	var hdr map[string]string
	if ep.accept != "" {
		hdr = map[string]string{"Accept": ep.accept}
	}
	return e.doWith(ep.method, strings.ReplaceAll(ep.path, "{id}", id), token, body, hdr)
}

// wsState is a workspace as the disk has it: every entry with its size and
// modification time.
func wsState(t *testing.T, dir string) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		lines = append(lines, fmt.Sprintf("%s %d %d", strings.TrimPrefix(p, dir), fi.Size(), fi.ModTime().UnixNano()))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// TestOtherTenantGetsNotFoundEverywhere: team-b's agent aims every
// session-scoped endpoint at team-a's session. By its qualified id every
// answer is 404 not_found, the same answer as for a session that does not
// exist; by its bare name it reaches only team-b's own namespace. Either
// way team-a's session, its files and its browser are unchanged, and no
// answer carries team-a's data.
func TestOtherTenantGetsNotFoundEverywhere(t *testing.T) {
	pages := testPages(t)
	e := newEnv(t, envOpts{policyFS: everythingToSubprocess(t), tokens: tenantTokens(), browser: maybeBrowser(t, hostPort(pages.URL))})
	if r := e.do("PUT", "/v1/sessions/a-private/files/content?path=secret.txt", teamATok, "a-secret"); r.status != 201 {
		t.Fatalf("A's upload: %d %s", r.status, r.raw)
	}
	if r := e.do("POST", "/v1/sessions/a-private/run_code", teamATok, runCode("print(open('secret.txt').read())", "python")); r.status != 200 || r.body["stdout"] != "a-secret\n" {
		t.Fatalf("A's run: %d %s", r.status, r.raw)
	}
	withBrowser := e.do("POST", "/v1/sessions/a-private/browser", teamATok,
		map[string]any{"action": "navigate", "params": map[string]any{"url": pages.URL + "/"}}).status == 200
	aDir := filepath.Join(e.dataDir, "workspaces", "team-a~a-private")
	before := wsState(t, aDir)
	infoBefore := e.do("GET", "/v1/sessions/a-private", teamATok, nil)

	// The answer for a session that exists nowhere, to compare with.
	absent := e.do("GET", "/v1/sessions/team-a~nothing-here", teamBTok, nil)
	if absent.status != 404 || absent.errCode() != "not_found" {
		t.Fatalf("absent session: %d %s", absent.status, absent.raw)
	}
	absentMsg := obj(absent.body["error"])["message"]

	for _, ep := range sessionEndpoints {
		t.Run(ep.name+" by qualified id", func(t *testing.T) {
			r := ep.call(e, teamBTok, "team-a~a-private")
			if r.status != 404 || r.errCode() != "not_found" || obj(r.body["error"])["message"] != absentMsg {
				t.Errorf("%d %s, want 404 not_found like an absent session", r.status, r.raw)
			}
		})
		t.Run(ep.name+" by name", func(t *testing.T) {
			r := ep.call(e, teamBTok, "a-private")
			if strings.Contains(string(r.raw), "a-secret") || strings.Contains(string(r.raw), pages.URL) {
				t.Errorf("team-b reached team-a's session: %d %s", r.status, r.raw)
			}
		})
	}

	if after := wsState(t, aDir); after != before {
		t.Errorf("team-a's workspace changed:\n%s\n---\n%s", before, after)
	}
	infoAfter := e.do("GET", "/v1/sessions/a-private", teamATok, nil)
	if infoAfter.status != 200 || infoAfter.body["runs"] != infoBefore.body["runs"] ||
		fmt.Sprint(infoAfter.body["resources"]) != fmt.Sprint(infoBefore.body["resources"]) {
		t.Errorf("team-a's session changed: %s -> %s", infoBefore.raw, infoAfter.raw)
	}
	if withBrowser && obj(infoAfter.body["resources"])["browser"] == nil {
		t.Errorf("team-a's browser is gone: %s", infoAfter.raw)
	}
	r := e.do("GET", "/v1/sessions/a-private/files/content?path=secret.txt", teamATok, nil)
	if r.status != 200 || string(r.raw) != "a-secret" {
		t.Errorf("team-a's file: %d %q", r.status, r.raw)
	}

	// Listings: each tenant its own; another tenant's by name is 404; an
	// admin sees both.
	if r := e.do("PUT", "/v1/sessions/b-own/files/content?path=x", teamBTok, "x"); r.status != 201 {
		t.Fatalf("B's upload: %d %s", r.status, r.raw)
	}
	for tok, want := range map[string]string{teamATok: "team-a", teamBTok: "team-b"} {
		r := e.do("GET", "/v1/sessions", tok, nil)
		for _, s := range r.body["sessions"].([]any) {
			if obj(s)["tenant"] != want {
				t.Errorf("%s lists %v", want, s)
			}
		}
	}
	if r := e.do("GET", "/v1/sessions?tenant=team-a", teamBTok, nil); r.status != 404 || r.errCode() != "not_found" {
		t.Errorf("team-b listing team-a: %d %s", r.status, r.raw)
	}
	r = e.do("GET", "/v1/sessions", adminTok, nil)
	tenants := map[string]bool{}
	for _, s := range r.body["sessions"].([]any) {
		tenants[fmt.Sprint(obj(s)["tenant"])] = true
	}
	if !tenants["team-a"] || !tenants["team-b"] {
		t.Errorf("admin lists %s", r.raw)
	}
	if r := e.do("GET", "/v1/sessions/team-a~a-private", adminTok, nil); r.status != 200 || r.body["qualified_id"] != "team-a~a-private" {
		t.Errorf("admin get: %d %s", r.status, r.raw)
	}

	// Audit: team-a's records are team-a's own requests only; team-b's
	// probes are recorded under team-b, with the id they named.
	r = e.do("GET", "/v1/audit?tenant=team-a&limit=1000", adminTok, nil)
	recs := r.body["records"].([]any)
	if r.status != 200 || len(recs) == 0 {
		t.Fatalf("audit: %d %s", r.status, r.raw)
	}
	for _, rec := range recs {
		// (The browser's per-request decisions carry no principal.)
		if m := obj(rec); m["tenant"] != "team-a" || (m["principal"] != "agent:bot-a" && m["kind"] != browser.KindRequest) {
			t.Errorf("team-a's audit holds %v", rec)
		}
	}
	r = e.do("GET", "/v1/audit?tenant=team-b&session_id=team-a~a-private&kind=file.get", adminTok, nil)
	if recs := r.body["records"].([]any); len(recs) != 1 || obj(recs[0])["error_code"] != "not_found" || obj(recs[0])["principal"] != "agent:bot-b" {
		t.Errorf("team-b's probe of team-a's file: %s", r.raw)
	}
}

// TestSameSessionNameTwoTenants: team-a's "demo" and team-b's "demo" are
// two sessions with two workspaces, on the real subprocess executor: code
// in one cannot see the other's files, by relative path or by the other
// workspace's host path.
func TestSameSessionNameTwoTenants(t *testing.T) {
	auto, _ := confirm.NewAutoApprove("PERMISSIVE")
	e := newEnv(t, envOpts{mode: "PERMISSIVE", confirm: auto, policyFS: everythingToSubprocess(t), tokens: tenantTokens()})
	r := e.do("POST", "/v1/sessions/demo/execute", teamATok, map[string]any{"command": "echo a-secret > secret.txt && ls"})
	if r.status != 200 || r.body["output"] != "secret.txt\n" {
		t.Fatalf("A: %d %s", r.status, r.raw)
	}
	r = e.do("POST", "/v1/sessions/demo/execute", teamBTok, map[string]any{"command": "ls -A; cat secret.txt"})
	if r.status != 200 || r.body["exit_code"] == 0.0 || strings.Contains(fmt.Sprint(r.body["output"]), "a-secret") ||
		strings.HasPrefix(fmt.Sprint(r.body["output"]), "secret.txt") {
		t.Fatalf("B's demo sees A's files: %d %s", r.status, r.raw)
	}
	a := e.do("GET", "/v1/sessions/demo", teamATok, nil)
	b := e.do("GET", "/v1/sessions/demo", teamBTok, nil)
	if a.body["qualified_id"] != "team-a~demo" || b.body["qualified_id"] != "team-b~demo" || a.body["runs"] != 1.0 || b.body["runs"] != 1.0 {
		t.Fatalf("sessions: %s / %s", a.raw, b.raw)
	}
	if r := e.do("GET", "/v1/sessions/demo/files/content?path=secret.txt", teamBTok, nil); r.status != 404 {
		t.Fatalf("B's file API reads A's file: %d %s", r.status, r.raw)
	}
	if os.Geteuid() != 0 {
		return // without root both workspaces belong to the gateway's uid
	}
	aFile := filepath.Join(e.dataDir, "workspaces", "team-a~demo", "secret.txt")
	r = e.do("POST", "/v1/sessions/demo/execute", teamBTok, map[string]any{"command": "cat " + aFile})
	if r.status != 200 || r.body["exit_code"] == 0.0 || strings.Contains(fmt.Sprint(r.body["output"]), "a-secret") {
		t.Fatalf("B read A's file by its host path: %d %s", r.status, r.raw)
	}
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// leadATok is an approver limited to team-a's approvals.
const leadATok = "lead-a-approver-token-0123456789"

func leadAToken() Token {
	t := NewToken("lead-a", RoleApprover, leadATok)
	t.Tenants = []string{"team-a"}
	return t
}

// pendingForTenant waits until the hub holds a pending approval of tenant
// for session.
func pendingForTenant(t *testing.T, hub *confirm.Hub, tenant, session string) confirm.View {
	t.Helper()
	for range 2000 {
		for _, v := range hub.Pending() {
			if v.Tenant == tenant && v.SessionID == session {
				return v
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no pending approval for %s/%s", tenant, session)
	return confirm.View{}
}

// TestTenantScopedApproverRESTAndSocket: lead-a, an approver limited to
// team-a, neither sees nor can decide team-b's approval, over REST or the
// WebSocket; to it that approval does not exist. The unrestricted approver
// sees both and decides team-b's.
func TestTenantScopedApproverRESTAndSocket(t *testing.T) {
	e := newApprovalEnv(t, approvalOpts{})
	lead := e.approver(t, leadATok)
	if snap := lead.next(confirm.EventSnapshot); fmt.Sprint(obj(snap["approver"])["tenants"]) != "[team-a]" {
		t.Fatalf("lead-a's snapshot: %v", snap)
	}
	callA := e.runAsyncAs(teamATok, "build", highRisk)
	va := pendingForTenant(t, e.hub, "team-a", "build")
	callB := e.runAsyncAs(teamBTok, "build", highRisk)
	vb := pendingForTenant(t, e.hub, "team-b", "build")

	// REST: lead-a lists team-a's only; team-b's is 404 to read and to
	// decide, and stays pending.
	r := e.do("GET", "/v1/approvals", leadATok, nil)
	list := r.body["approvals"].([]any)
	if r.status != 200 || len(list) != 1 || obj(list[0])["id"] != va.ID || obj(list[0])["tenant"] != "team-a" {
		t.Fatalf("lead-a lists %s", r.raw)
	}
	if r := e.do("GET", "/v1/approvals/"+vb.ID, leadATok, nil); r.status != 404 || r.errCode() != "not_found" {
		t.Fatalf("lead-a reads team-b's: %d %s", r.status, r.raw)
	}
	if r := e.do("POST", "/v1/approvals/"+vb.ID+"/decision", leadATok, map[string]any{"decision": "approve"}); r.status != 404 || r.errCode() != "not_found" {
		t.Fatalf("lead-a decides team-b's: %d %s", r.status, r.raw)
	}
	// The socket: lead-a was told of team-a's request only, and deciding
	// team-b's there is not_found too.
	if ev := lead.next(confirm.EventRequested); approvalOf(ev)["id"] != va.ID {
		t.Fatalf("lead-a's first event: %v", ev)
	}
	lead.send(map[string]any{"type": "decide", "ref": "x", "id": vb.ID, "decision": "approve"})
	if res := lead.next(confirm.EventResult); res["ok"] != false || obj(res["error"])["code"] != "not_found" {
		t.Fatalf("socket decision on team-b's: %v", res)
	}
	for _, ev := range lead.held {
		if approvalOf(ev)["id"] == vb.ID {
			t.Fatalf("lead-a's socket carried team-b's approval: %v", ev)
		}
	}
	if r := e.do("GET", "/v1/approvals", approverTok, nil); len(r.body["approvals"].([]any)) != 2 {
		t.Fatalf("the unrestricted approver lists %s", r.raw)
	}

	// Decisions: lead-a approves team-a's over the socket, the unrestricted
	// approver denies team-b's over REST.
	lead.send(map[string]any{"type": "decide", "ref": "y", "id": va.ID, "decision": "approve", "digest": va.Digest})
	if res := lead.next(confirm.EventResult); res["ok"] != true {
		t.Fatalf("lead-a approving team-a's: %v", res)
	}
	if r := e.do("POST", "/v1/approvals/"+vb.ID+"/decision", approverTok, map[string]any{"decision": "deny", "reason": "not today"}); r.status != 200 {
		t.Fatalf("p denying team-b's: %d %s", r.status, r.raw)
	}
	if out := callA.wait(t); out.status != 200 || obj(out.body["approval"])["decided_by"] != "lead-a" {
		t.Fatalf("team-a's call: %d %s", out.status, out.raw)
	}
	if out := callB.wait(t); out.status != 403 || out.errCode() != "approval_denied" {
		t.Fatalf("team-b's call: %d %s", out.status, out.raw)
	}
	r = e.do("GET", "/v1/approvals?status=resolved", leadATok, nil)
	if list := r.body["approvals"].([]any); len(list) != 1 || obj(list[0])["id"] != va.ID {
		t.Fatalf("lead-a's history: %s", r.raw)
	}
	if r := e.do("GET", "/v1/approvals/"+vb.ID, leadATok, nil); r.status != 404 {
		t.Fatalf("lead-a reads team-b's resolved approval: %d %s", r.status, r.raw)
	}
	if r := e.do("POST", "/v1/approvals/"+vb.ID+"/decision", leadATok, map[string]any{"decision": "approve"}); r.status != 404 {
		t.Fatalf("lead-a decides team-b's resolved approval: %d %s (a 409 would say who decided it)", r.status, r.raw)
	}
	if recs := e.auditRecords("build"); len(recs) != 2 {
		t.Fatalf("audit: %+v", recs)
	} else {
		for _, rec := range recs {
			if rec.Approval == nil || (rec.Tenant == "team-a") != (rec.Approval.DecidedBy == "lead-a") {
				t.Errorf("record %s of %s decided by %+v", rec.RequestID, rec.Tenant, rec.Approval)
			}
		}
	}
}
