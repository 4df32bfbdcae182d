package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/confirm"
	"github.com/sandgate/sandgate/egress"
	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/subprocess"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/risk"
	"github.com/sandgate/sandgate/workspace"
)

// Test hosts of the proposal acceptance; both resolve to 127.0.0.1.
const (
	propOpen   = "open.prop.test"   // allowed to the tenant (which grants its runs network)
	propWanted = "wanted.prop.test" // not on any list: denied until a proposal is accepted
)

type loopbackResolver struct{}

func (loopbackResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
}

// proposalPolicy is the shipped policy in STRICT with every level allowed
// on the subprocess executor, loopback not blocked (the test's servers
// are on it: the test resolver answers 127.0.0.1), and one rule allowing
// propOpen to tenant "a", which grants its sessions network.
func proposalPolicy(t *testing.T, port int) fstest.MapFS {
	t.Helper()
	out, err := policy.DefaultTree()
	if err != nil {
		t.Fatal(err)
	}
	const p = "sandgate/config/data.json"
	var doc map[string]any
	if err := json.Unmarshal(out[p].Data, &doc); err != nil {
		t.Fatal(err)
	}
	row := map[string]any{"action": "allow", "executor": "subprocess"}
	doc["modes"].(map[string]any)["STRICT"] = map[string]any{"SAFE": row, "LOW": row, "MEDIUM": row, "HIGH": row, "CRITICAL": row}
	doc["isolation_upgrade"].(map[string]any)["modes"] = []string{}
	eg := doc["egress"].(map[string]any)
	var blocked []any
	for _, c := range eg["blocked_cidrs"].([]any) {
		if c != "127.0.0.0/8" {
			blocked = append(blocked, c)
		}
	}
	eg["blocked_cidrs"] = blocked
	eg["rules"] = []any{map[string]any{"name": "open", "action": "allow", "hosts": []string{propOpen}, "ports": []int{port},
		"tenants": []string{"a"}}}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	out[p] = &fstest.MapFile{Data: b}
	return out
}

type proposalEnv struct {
	*env
	port int
}

func newProposalEnv(t *testing.T) *proposalEnv {
	t.Helper()
	requireRoot(t)
	ctx := context.Background()
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s", strings.Split(r.Host, ":")[0])
	}))
	t.Cleanup(web.Close)
	port := urlPort(t, web.URL)
	dataDir := t.TempDir()
	traversable(t, dataDir)
	st, err := audit.Open(ctx, filepath.Join(dataDir, "audit.db"), audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ws, err := workspace.New(filepath.Join(dataDir, "workspaces"), workspace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := policy.New(ctx, policy.Options{EvalTimeout: testEvalTimeout, FS: proposalPolicy(t, port)})
	if err != nil {
		t.Fatal(err)
	}
	props, err := confirm.OpenProposals(ctx, confirm.ProposalOptions{Store: st, Audit: st, Policy: eng, Mode: "STRICT"})
	if err != nil {
		t.Fatal(err)
	}
	hub, err := confirm.NewHub(ctx, confirm.HubOptions{Store: st, Proposals: props})
	if err != nil {
		t.Fatal(err)
	}
	sp, err := subprocess.New(ctx, subprocess.Config{RootDir: os.Getenv("SANDGATE_RUNTIME_ROOT")})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	proxy, err := egress.New(egress.Config{Mode: "STRICT", ApprovalTimeout: time.Minute, CADir: filepath.Join(dataDir, "egress"),
		// Not the host's own (loopback among them): the test's servers are on loopback.
		GatewayAddresses: []netip.Addr{netip.MustParseAddr("192.0.2.200")}, ProposalEndpoint: "/v1/sessions/{session}/proposals"},
		egress.Deps{Policy: eng, Confirm: hub, Audit: st, Resolver: loopbackResolver{}, Metrics: egress.NewMetrics(reg)})
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := manager.New(manager.Config{Mode: "STRICT", ApprovalTimeout: time.Minute}, manager.Deps{
		Assessor: risk.NewAssessor(nil, nil), Policy: eng, Confirm: hub, Executors: []executors.Executor{sp},
		Workspaces: ws, Audit: st, Metrics: manager.NewMetrics(reg), Egress: proxy,
	})
	if err != nil {
		t.Fatal(err)
	}
	auth, err := NewAuth([]Token{NewToken("a", RoleAgent, agentTok), NewToken("p", RoleApprover, approverTok),
		NewToken("root", RoleAdmin, adminTok)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(Config{}, Deps{Manager: mgr, Policy: eng, Audit: st, Auth: auth, Gatherer: reg,
		Approvals: hub, Logger: errorLog}))
	t.Cleanup(func() {
		srv.Close()
		props.Close()
		_ = hub.Close(context.Background())
		_ = st.Close()
	})
	return &proposalEnv{env: &env{t: t, srv: srv, dataDir: dataDir, audit: st, ws: ws}, port: port}
}

// fetch runs Python in session that fetches each URL through the proxy
// and prints one line per URL: the body, or "refused <status> <body>".
func (e *proposalEnv) fetch(session string, hosts ...string) []string {
	e.t.Helper()
	var urls []string
	for _, h := range hosts {
		urls = append(urls, fmt.Sprintf("%q", fmt.Sprintf("http://%s:%d/", h, e.port)))
	}
	code := e2eFetch + "for u in [" + strings.Join(urls, ", ") + "]:\n    print(fetch(u).replace(\"\\n\", \" \"))\n"
	r := e.do("POST", "/v1/sessions/"+session+"/run_code", agentTok, map[string]any{"code": code, "language": "python", "timeout_s": 60})
	if r.status != 200 {
		e.t.Fatalf("run_code: %d %s", r.status, r.raw)
	}
	out, _ := r.body["stdout"].(string)
	return strings.Split(strings.TrimSpace(out), "\n")
}

// TestEgressProposal is the acceptance for proposals, against a
// gateway with the real egress proxy and executor: an egress denial's
// body leads the agent to the proposal endpoint; the approver's view of
// the proposal lists the other recent decisions it would change (the
// session's earlier denials of the same host), not the other session's
// nor other hosts'; a rejected proposal leaves the host denied and tells
// the agent why; an accepted one lets the next connection through, for
// that session only, until revoked.
func TestEgressProposal(t *testing.T) {
	e := newProposalEnv(t)
	lines := e.fetch("p-1", propOpen, propWanted, propWanted)
	if len(lines) != 3 || lines[0] != "hello "+propOpen || !strings.HasPrefix(lines[1], "refused 403") {
		t.Fatalf("before: %q", lines)
	}
	// The refusal's JSON, after "refused 403 ", leads to the proposal.
	var refusal struct {
		Proposal struct {
			Endpoint string            `json:"endpoint"`
			Body     map[string]string `json:"body"`
		} `json:"proposal"`
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(lines[1], "refused 403 ")), &refusal); err != nil ||
		refusal.Proposal.Endpoint != "/v1/sessions/p-1/proposals" || refusal.Proposal.Body["kind"] != "egress_host" ||
		refusal.Proposal.Body["value"] != fmt.Sprintf("%s:%d", propWanted, e.port) {
		t.Fatalf("the denial does not lead to a proposal (%v): %q", err, lines[1])
	}
	e.fetch("p-2", propWanted) // another session's denial: not changed by p-1's proposal

	// The agent follows the refusal: its endpoint, kind and value.
	propose := func(justification string) map[string]any {
		t.Helper()
		r := e.do("POST", refusal.Proposal.Endpoint, agentTok, map[string]any{"kind": refusal.Proposal.Body["kind"],
			"value": refusal.Proposal.Body["value"], "justification": justification})
		if r.status != 201 || r.body["status"] != "pending" {
			t.Fatalf("propose: %d %s", r.status, r.raw)
		}
		return r.body
	}
	rejected := propose("the task downloads its input there")
	id := rejected["id"].(string)
	view := e.do("GET", "/v1/proposals/"+id, approverTok, nil)
	eff := obj(view.body["effect"])
	changed, _ := eff["changed"].([]any)
	if eff["changed_count"] != float64(2) || len(changed) != 2 {
		t.Fatalf("effect: %s", view.raw)
	}
	for _, c := range changed {
		c := obj(c)
		if c["session_id"] != "p-1" || c["what"] != fmt.Sprintf("%s:%d", propWanted, e.port) || c["now"] != "deny" || c["candidate"] != "allow" {
			t.Errorf("change %v", c)
		}
	}
	if r := e.do("POST", "/v1/sessions/p-1/proposals", agentTok, map[string]any{"kind": "egress_host", "value": "*.example.org",
		"justification": "x"}); r.status != 400 || r.errField(0) != "value" {
		t.Errorf("a glob: %d %s", r.status, r.raw)
	}

	if r := e.do("POST", "/v1/proposals/"+id+"/decision", approverTok, map[string]any{"decision": "reject",
		"reason": "use the mirror"}); r.status != 200 || r.body["status"] != "rejected" {
		t.Fatalf("reject: %d %s", r.status, r.raw)
	}
	if r := e.do("GET", "/v1/sessions/p-1/proposals/"+id, agentTok, nil); r.body["status"] != "rejected" || r.body["reason"] != "use the mirror" {
		t.Fatalf("the agent's view of the rejection: %d %s", r.status, r.raw)
	}
	if lines := e.fetch("p-1", propWanted); !strings.HasPrefix(lines[0], "refused 403") {
		t.Fatalf("after the rejection: %q", lines)
	}

	accepted := propose("the task downloads its input there; the mirror lacks it")["id"].(string)
	r := e.do("POST", "/v1/proposals/"+accepted+"/decision", approverTok, map[string]any{"decision": "accept", "for_s": 3600})
	if r.status != 200 || r.body["status"] != "accepted" || r.body["decided_by"] != "p" {
		t.Fatalf("accept: %d %s", r.status, r.raw)
	}
	if lines := e.fetch("p-1", propWanted); lines[0] != "hello "+propWanted {
		t.Fatalf("after the acceptance: %q", lines)
	}
	if lines := e.fetch("p-2", propWanted); !strings.HasPrefix(lines[0], "refused 403") {
		t.Fatalf("another session after the acceptance: %q", lines)
	}
	if r := e.do("DELETE", "/v1/proposals/"+accepted, approverTok, nil); r.status != 200 || r.body["status"] != "revoked" {
		t.Fatalf("revoke: %d %s", r.status, r.raw)
	}
	if lines := e.fetch("p-1", propWanted); !strings.HasPrefix(lines[0], "refused 403") {
		t.Fatalf("after the revocation: %q", lines)
	}

	var kinds []string
	page, err := e.audit.Query(context.Background(), audit.Query{SessionID: "p-1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range page.Records {
		if strings.HasPrefix(rec.Kind, "proposal.") {
			kinds = append(kinds, rec.Kind+":"+rec.Principal)
		}
	}
	want := []string{"proposal.revoked:p", "proposal.accepted:p", "proposal.created:agent:a", "proposal.rejected:p", "proposal.created:agent:a"}
	if !slices.Equal(kinds, want) {
		t.Errorf("audit (newest first):\n got %v\nwant %v", kinds, want)
	}
}

// TestDenialLeadsToProposal: a session request's denial names the rule
// that denied it, tells the agent how to ask, and gives the proposal
// endpoint; a pattern proposal made from it shows the earlier prompts
// it would have spared.
func TestDenialLeadsToProposal(t *testing.T) {
	e := newEnv(t, envOpts{})
	r := e.do("POST", "/v1/sessions/d-1/run_code", agentTok, runCode("import os\nos.system('rm -rf /')", "python"))
	if r.status != 403 || r.errCode() != "policy_denied" {
		t.Fatalf("run: %d %s", r.status, r.raw)
	}
	d := obj(r.body["error"])
	if d["rule"] != "risk.critical" || !strings.Contains(d["agent_guidance"].(string), "propose") ||
		obj(d["proposal"])["endpoint"] != "/v1/sessions/d-1/proposals" {
		t.Errorf("denial body: %s", r.raw)
	}
	if r := e.do("GET", "/v1/sessions/d-1/nothing", agentTok, nil); obj(r.body["error"])["proposal"] != nil {
		t.Errorf("a non-denial carries a proposal: %s", r.raw)
	}
}

// TestPatternProposal: in a gateway with grants, a pattern proposal's
// effect lists the session's earlier runs held for that pattern, and
// accepted it is a grant, so the next such run is not held.
func TestPatternProposal(t *testing.T) {
	e := newApprovalEnv(t, approvalOpts{timeout: 30 * time.Second, grants: true, proposals: true})
	first := e.runAsync("pp-1", highRisk)
	p := waitPendingAPI(t, e, 1)[0]
	e.do("POST", "/v1/approvals/"+p["id"].(string)+"/decision", approverTok, map[string]any{"decision": "approve"})
	if r := first.wait(t); r.status != 200 {
		t.Fatalf("first: %d %s", r.status, r.raw)
	}
	pats, _ := p["patterns"].([]any)
	pattern := ""
	for _, x := range pats {
		if id := obj(x)["id"].(string); pattern == "" || id == pattern {
			pattern = id
		} else {
			t.Fatalf("the test's code has patterns %v; want one id", pats)
		}
	}
	r := e.do("POST", "/v1/sessions/pp-1/proposals", agentTok, map[string]any{"kind": "pattern", "value": pattern,
		"justification": "the task runs its build tool"})
	if r.status != 201 || obj(r.body["effect"])["changed_count"] != float64(1) {
		t.Fatalf("propose: %d %s", r.status, r.raw)
	}
	id := r.body["id"].(string)
	if r := e.do("POST", "/v1/proposals/"+id+"/decision", approverTok, map[string]any{"decision": "accept", "for_s": 600}); r.status != 200 {
		t.Fatalf("accept: %d %s", r.status, r.raw)
	}
	second := e.runAsync("pp-1", highRisk)
	if r := second.wait(t); r.status != 200 || !strings.HasPrefix(obj(r.body["approval"])["decided_by"].(string), "grant:") {
		t.Fatalf("second: %d %s", r.status, r.raw)
	}
}
