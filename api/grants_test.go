package api

import (
	"context"
	"testing"
	"time"

	"github.com/sandgate/sandgate/audit"
)

// TestGrantForThisSession: an approver answers a HIGH request "for this
// session for 30 minutes"; the second identical request of the session
// runs without a prompt, with the grant's id as its approval in the run's
// answer and audit record, while the same request in another session is
// held. After the grant is revoked the session is asked again, and a
// short grant stops covering at its expiry.
func TestGrantForThisSession(t *testing.T) {
	e := newApprovalEnv(t, approvalOpts{timeout: 30 * time.Second, grants: true})
	approve := func(scope string, forS int) map[string]any {
		t.Helper()
		p := waitPendingAPI(t, e, 1)[0]
		r := e.do("POST", "/v1/approvals/"+p["id"].(string)+"/decision", approverTok,
			map[string]any{"decision": "approve", "scope": scope, "for_s": forS})
		if r.status != 200 {
			t.Fatalf("decision: %d %s", r.status, r.raw)
		}
		return r.body
	}
	held := func(session string) {
		t.Helper()
		call := e.runAsync(session, highRisk)
		p := waitPendingAPI(t, e, 1)[0]
		if p["session_id"] != session {
			t.Fatalf("held %v, want session %s", p["session_id"], session)
		}
		e.do("POST", "/v1/approvals/"+p["id"].(string)+"/decision", approverTok, map[string]any{"decision": "deny"})
		if r := call.wait(t); r.status != 403 {
			t.Fatalf("denied run: %d %s", r.status, r.raw)
		}
	}

	first := e.runAsync("g-1", highRisk)
	grant := obj(approve("session", 1800)["grant"])
	if r := first.wait(t); r.status != 200 {
		t.Fatalf("first run: %d %s", r.status, r.raw)
	}
	id, _ := grant["id"].(string)
	if id == "" || grant["scope"] != "session" || grant["session_id"] != "g-1" {
		t.Fatalf("grant %v", grant)
	}

	second := e.runAsync("g-1", highRisk)
	r := second.wait(t)
	if r.status != 200 || obj(r.body["approval"])["id"] != id || obj(r.body["approval"])["decided_by"] != "grant:"+id {
		t.Fatalf("second run: %d %s", r.status, r.raw)
	}
	if n := len(e.hub.Pending()); n != 0 {
		t.Fatalf("%d pending: the second run was held", n)
	}
	recs, err := e.audit.Query(context.Background(), audit.Query{SessionID: "g-1", Kind: "run_code", Limit: 1})
	if err != nil || len(recs.Records) != 1 || recs.Records[0].Approval == nil || recs.Records[0].Approval.ID != id {
		t.Fatalf("audit of the second run: %+v %v", recs.Records, err)
	}
	list := e.do("GET", "/v1/grants?session_id=g-1&live=true", approverTok, nil)
	if gs, _ := list.body["grants"].([]any); len(gs) != 1 || obj(gs[0])["uses"] != float64(1) {
		t.Fatalf("grants: %s", list.raw)
	}
	if r := e.do("GET", "/v1/grants", agentTok, nil); r.status != 403 {
		t.Errorf("an agent listed grants: %d", r.status)
	}

	held("g-2") // not in another session

	if r := e.do("DELETE", "/v1/grants/"+id, approverTok, map[string]any{"reason": "done"}); r.status != 200 || r.body["revoked_by"] != "p" {
		t.Fatalf("revoke: %d %s", r.status, r.raw)
	}
	if r := e.do("DELETE", "/v1/grants/"+id, approverTok, nil); r.status != 409 {
		t.Errorf("second revoke: %d %s", r.status, r.raw)
	}
	held("g-1") // revoked

	short := e.runAsync("g-3", highRisk)
	approve("session", 2)
	if r := short.wait(t); r.status != 200 {
		t.Fatalf("short grant's run: %d %s", r.status, r.raw)
	}
	time.Sleep(2500 * time.Millisecond) // past the grant's expiry
	held("g-3")

	revoked, err := e.audit.Query(context.Background(), audit.Query{Kind: "grant.revoked"})
	if err != nil || len(revoked.Records) != 1 || revoked.Records[0].Detail["grant_id"] != id || revoked.Records[0].Principal != "p" {
		t.Errorf("grant.revoked audit: %+v %v", revoked.Records, err)
	}
}

// TestOpenAPIGrantsAndProposals: the grants' and proposals' answers match
// the document.
func TestOpenAPIGrantsAndProposals(t *testing.T) {
	c := &capture{}
	e := newApprovalEnv(t, approvalOpts{timeout: 30 * time.Second, grants: true, proposals: true, wrap: c.wrap})
	doc := fetchDoc(t, e.env)
	call := e.runAsync("s1", highRisk)
	v := pendingForTenant(t, e.hub, "a", "s1")
	e.do("GET", "/v1/approvals/"+v.ID+"/context", approverTok, nil)
	r := e.do("POST", "/v1/approvals/"+v.ID+"/decision", approverTok, map[string]any{"decision": "approve", "scope": "pattern", "for_s": 3600})
	call.wait(t)
	id, _ := obj(r.body["grant"])["id"].(string)
	e.do("GET", "/v1/grants?tenant=a", approverTok, nil)
	e.do("GET", "/v1/grants/"+id, approverTok, nil)
	e.do("GET", "/v1/grants/nope", approverTok, nil) // 404
	e.do("DELETE", "/v1/grants/"+id, approverTok, nil)
	e.do("DELETE", "/v1/grants/"+id, approverTok, nil) // 409

	pr := e.do("POST", "/v1/sessions/s1/proposals", agentTok, map[string]any{"kind": "egress_host", "value": "pkg.example.org",
		"justification": "the task installs from there"})
	pid, _ := pr.body["id"].(string)
	e.do("POST", "/v1/sessions/s1/proposals", agentTok, map[string]any{"kind": "executor", "value": "x", "justification": "y"}) // 400
	e.do("GET", "/v1/sessions/s1/proposals/"+pid, agentTok, nil)
	e.do("GET", "/v1/proposals?status=pending", approverTok, nil)
	e.do("GET", "/v1/proposals/"+pid, approverTok, nil)
	e.do("POST", "/v1/proposals/"+pid+"/decision", approverTok, map[string]any{"decision": "accept", "for_s": 600})
	e.do("POST", "/v1/proposals/"+pid+"/decision", approverTok, map[string]any{"decision": "reject"}) // 409
	e.do("DELETE", "/v1/proposals/"+pid, approverTok, nil)
	e.do("DELETE", "/v1/proposals/"+pid, approverTok, nil) // 409
	deadline := time.Now().Add(5 * time.Second)
	for len(c.got) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	requireCovered(t, c.check(t, doc), []string{"grants", "proposals"})
}
