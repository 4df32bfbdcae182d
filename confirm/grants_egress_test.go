package confirm

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/policy"
)

// newEgressGrantHub is a hub with grants decided by the shipped policy,
// whose egress rules allow GET to api.example, hold POST and DELETE for
// approval and deny anything under /admin.
func newEgressGrantHub(t *testing.T) *testHub {
	t.Helper()
	g, db := newEgressGrants(t)
	return newTestHub(t, HubOptions{Store: db, Grants: g})
}

// newEgressGrants is newEgressGrantHub's book of grants and its database.
func newEgressGrants(t *testing.T) (*Grants, audit.Database) {
	t.Helper()
	tree, err := policy.DefaultTree()
	if err != nil {
		t.Fatal(err)
	}
	const p = "sandgate/config/data.json"
	var doc map[string]any
	if err := json.Unmarshal(tree[p].Data, &doc); err != nil {
		t.Fatal(err)
	}
	doc["egress"].(map[string]any)["rules"] = []any{
		map[string]any{"name": "api-read", "action": "allow", "hosts": []string{"api.example"}, "methods": []string{"GET"}},
		map[string]any{"name": "api-write", "action": "require_approval", "hosts": []string{"api.example"}, "methods": []string{"POST", "DELETE"}},
		map[string]any{"name": "api-admin", "action": "deny", "hosts": []string{"api.example"}, "path_prefixes": []string{"/admin"}},
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	tree[p] = &fstest.MapFile{Data: b}
	eng, err := policy.New(context.Background(), policy.Options{EvalTimeout: 10 * time.Second, FS: tree})
	if err != nil {
		t.Fatal(err)
	}
	db := openTestDB(t)
	g, err := OpenGrants(context.Background(), GrantOptions{Store: db, Audit: db, Policy: EngineGrants(eng, "STRICT"), MinFor: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return g, db
}

// egressRequest builds the approval request the egress proxy sends for a
// held request of session.
func heldRequest(session, method, path string) Request {
	in := policy.EgressInput{Mode: "STRICT", Host: "api.example", Port: 443, Scheme: "https", SessionID: session, Tenant: "t1",
		Principal: "agent", RequestID: "req_" + session, Risk: "LOW", Resolved: []string{"203.0.113.10"},
		HTTP: &policy.EgressHTTP{Method: method, Scheme: "https", Host: "api.example", Port: 443, Path: path, HeaderNames: []string{"Host"}}}
	return Request{Kind: KindEgress, Target: method + " api.example:443" + path, RequestID: in.RequestID, Tenant: "t1",
		SessionID: session, RiskLevel: "LOW", Principal: "agent", Deadline: time.Now().Add(time.Minute), Egress: &in}
}

// TestEgressGrants: approving a held POST for the session with a path
// prefix gives a grant that answers the session's next POST under the
// prefix at once (its id as the approval's, its use counted); a DELETE,
// another session, a path outside the prefix and a request the policy
// denies get no such answer; the session's end revokes the grant.
func TestEgressGrants(t *testing.T) {
	h := newEgressGrantHub(t)
	ctx := context.Background()
	first := confirmAsync(ctx, h.Hub, heldRequest("s1", "POST", "/v1/items"))
	v := waitPending(t, h.Hub, 1)[0]
	type decided struct {
		fin View
		err error
	}
	dc := make(chan decided, 1)
	go func() {
		fin, err := h.Decide(ctx, v.ID, Approver{Name: "alice"},
			Decision{Decision: "approve", Scope: ScopeSession, ForS: 1800, PathPrefix: "/v1/"})
		dc <- decided{fin, err}
	}()
	if out := first.wait(t); !out.Approved() || out.Scope != ScopeOnce {
		t.Fatalf("the held request: %+v", out)
	}
	// The grant is in force by the time the held request is let go: the
	// session's next request, sent at once, finds it.
	if live, err := h.opts.Grants.List(ctx, Approver{}, GrantQuery{SessionID: "s1", Live: true}); err != nil || len(live) != 1 {
		t.Fatalf("grants when the held request went ahead: %+v %v", live, err)
	}
	d := <-dc
	if d.err != nil || d.fin.Grant == nil || d.fin.Scope != ScopeOnce {
		t.Fatalf("decide: %+v %v", d.fin, d.err)
	}
	gr := *d.fin.Grant
	if gr.Kind != KindEgress || gr.Method != "POST" || gr.Host != "api.example" || gr.Port != 443 || gr.PathPrefix != "/v1/" ||
		gr.SessionID != "s1" || time.Until(gr.ExpiresAt) > 30*time.Minute || time.Until(gr.ExpiresAt) < 29*time.Minute {
		t.Fatalf("grant %+v", gr)
	}

	out, err := h.Confirm(ctx, heldRequest("s1", "POST", "/v1/orders/7"))
	if err != nil || !out.Approved() || out.ApprovalID != gr.ID || out.Scope != ScopeGrant || out.DecidedBy != "grant:"+gr.ID {
		t.Fatalf("covered: %+v %v", out, err)
	}
	for _, req := range []Request{
		heldRequest("s1", "DELETE", "/v1/items/1"),
		heldRequest("s2", "POST", "/v1/items"),
		heldRequest("s1", "POST", "/v2/items"),
		heldRequest("s1", "POST", "/admin/users"), // the decision denies it: a grant never answers
	} {
		asked := confirmAsync(ctx, h.Hub, req)
		p := waitPending(t, h.Hub, 1)[0]
		if p.Target != req.Target {
			t.Fatalf("pending %s, want %s", p.Target, req.Target)
		}
		if _, err := h.Decide(ctx, p.ID, Approver{Name: "alice"}, Decision{Decision: "deny"}); err != nil {
			t.Fatal(err)
		}
		if out := asked.wait(t); out.Approved() {
			t.Fatalf("%s was approved: %+v", req.Target, out)
		}
	}
	// The run policy is never shown an egress grant.
	if near, err := h.opts.Grants.NearMisses(ctx, View{Kind: KindRun, Tenant: "t1", SessionID: "s1", Language: "python",
		RiskLevel: "HIGH"}); err != nil || len(near) != 0 {
		t.Fatalf("near misses of a run: %+v %v", near, err)
	}
	list, err := h.opts.Grants.List(ctx, Approver{}, GrantQuery{SessionID: "s1", Live: true})
	if err != nil || len(list) != 1 || list[0].Uses != 1 || list[0].PathPrefix != "/v1/" {
		t.Fatalf("list: %+v %v", list, err)
	}

	if err := h.opts.Grants.EndSession(ctx, "t1", "s1"); err != nil {
		t.Fatal(err)
	}
	asked := confirmAsync(ctx, h.Hub, heldRequest("s1", "POST", "/v1/orders/8"))
	p := waitPending(t, h.Hub, 1)[0]
	if _, err := h.Decide(ctx, p.ID, Approver{Name: "alice"}, Decision{Decision: "deny"}); err != nil {
		t.Fatal(err)
	}
	if out := asked.wait(t); out.Approved() {
		t.Fatalf("covered after the session ended: %+v", out)
	}
}

// TestEgressGrantOfAFailedDecision: a grant decision that does not stand
// (here: the digest is not the approval's) leaves no grant in force, and
// the request stays held for a person.
func TestEgressGrantOfAFailedDecision(t *testing.T) {
	h := newEgressGrantHub(t)
	ctx := context.Background()
	held := confirmAsync(ctx, h.Hub, heldRequest("s1", "POST", "/v1/items"))
	v := waitPending(t, h.Hub, 1)[0]
	_, err := h.Decide(ctx, v.ID, Approver{Name: "alice"},
		Decision{Decision: "approve", Scope: ScopeSession, ForS: 1800, Digest: "sha256:not-this-one"})
	if !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("decide with another digest: %v", err)
	}
	if live, err := h.opts.Grants.List(ctx, Approver{}, GrantQuery{SessionID: "s1", Live: true}); err != nil || len(live) != 0 {
		t.Fatalf("live grants after a failed decision: %+v %v", live, err)
	}
	if _, err := h.Decide(ctx, v.ID, Approver{Name: "alice"}, Decision{Decision: "deny"}); err != nil {
		t.Fatal(err)
	}
	if out := held.wait(t); out.Approved() {
		t.Fatalf("approved: %+v", out)
	}
}

// TestPrefixCovers: a grant's prefix covers the paths beneath it, and no
// path a server could resolve outside it: "..;" (Tomcat and Spring drop
// ";..." before resolving) or a dot or slash encoded twice.
func TestPrefixCovers(t *testing.T) {
	cases := []struct {
		prefix, path string
		covers       bool
	}{
		{"/v1/items", "/v1/items", true},
		{"/v1/items", "/v1/items/7", true},
		{"/v1/items", "/v1/items;v=2/7", false}, // not beneath "/v1/items/"
		{"/v1/items", "/v1/items/a;v=2/7", true},
		{"/v1/", "/v1/items", true},
		{"/v1/items", "/v1/itemsx", false},
		{"/v1/items", "/v1/items/../admin", false},
		{"/v1/items", "/v1/items/..;/admin", false},
		{"/v1/items", "/v1/items/%2e%2e;/admin", false},
		{"/v1/items", "/v1/items/%2E%2e%3B/admin", false},
		{"/v1/items", "/v1/items/.;/x", false},
		{"/v1/items", "/v1/items/..;jsessionid=1/admin", false},
		{"/v1/items", "/v1/items/%252e%252e/admin", false},
		{"/v1/items", "/v1/items/%252E%252E/admin", false},
		{"/v1/items", "/v1/items/x%252f..%252fadmin", false},
		{"/v1/items", "/v1/items/x%255C..", false},
		{"/v1/items", "/v1/items/%zz", false},
		{"/v1/items/..;/", "/v1/items/..;/admin", false},
	}
	for _, c := range cases {
		if got := prefixCovers(c.prefix, c.path); got != c.covers {
			t.Errorf("prefixCovers(%q, %q) = %v, want %v", c.prefix, c.path, got, c.covers)
		}
	}
}

// TestEgressGrantPrefixOverDotSegment: an approver's "POST under
// /v1/items" does not stand for a held request whose path a server
// resolves to /v1/admin: the decision is refused, no grant given.
func TestEgressGrantPrefixOverDotSegment(t *testing.T) {
	h := newEgressGrantHub(t)
	ctx := context.Background()
	held := confirmAsync(ctx, h.Hub, heldRequest("s1", "POST", "/v1/items/..;/admin"))
	v := waitPending(t, h.Hub, 1)[0]
	_, err := h.Decide(ctx, v.ID, Approver{Name: "alice"},
		Decision{Decision: "approve", Scope: ScopeSession, ForS: 1800, PathPrefix: "/v1/items"})
	if !errors.Is(err, ErrGrantPrefix) {
		t.Fatalf("a grant over a dot segment: %v", err)
	}
	if live, err := h.opts.Grants.List(ctx, Approver{}, GrantQuery{SessionID: "s1", Live: true}); err != nil || len(live) != 0 {
		t.Fatalf("live grants: %+v %v", live, err)
	}
	if _, err := h.Decide(ctx, v.ID, Approver{Name: "alice"}, Decision{Decision: "deny"}); err != nil {
		t.Fatal(err)
	}
	if out := held.wait(t); out.Approved() {
		t.Fatalf("approved: %+v", out)
	}
}

// TestEgressGrantOfARejectedApproval: an egress grant is recorded before
// its approval's decision; while the approval is pending, and after
// another approver's reject wins, it covers no request of the session,
// even when its revocation is never written.
func TestEgressGrantOfARejectedApproval(t *testing.T) {
	h := newEgressGrantHub(t)
	ctx := context.Background()
	held := confirmAsync(ctx, h.Hub, heldRequest("s1", "POST", "/v1/items"))
	v := waitPending(t, h.Hub, 1)[0]
	// The approve-with-grant has recorded its grant and not yet resolved.
	gr, err := h.opts.Grants.giveEgress(ctx, v, Decision{Decision: "approve", Scope: ScopeSession, ForS: 1800, PathPrefix: "/v1/"}, "alice")
	if err != nil {
		t.Fatal(err)
	}
	next := heldRequest("s1", "POST", "/v1/orders/1")
	if g, ok := h.opts.Grants.cover(ctx, next); ok {
		t.Fatalf("a grant of a pending approval covers %s: %+v", next.Target, g)
	}
	// Bob's reject wins; alice's approval (and so the grant's revocation)
	// never comes.
	if _, err := h.Decide(ctx, v.ID, Approver{Name: "bob"}, Decision{Decision: "deny"}); err != nil {
		t.Fatal(err)
	}
	if out := held.wait(t); out.Approved() {
		t.Fatalf("approved: %+v", out)
	}
	if g, ok := h.opts.Grants.cover(ctx, next); ok {
		t.Fatalf("grant %s of a rejected approval covers %s: %+v", gr.ID, next.Target, g)
	}
}

// TestEgressGrantRace: an approve-with-grant and a reject race on one
// held request; whichever wins, a grant covers the session's next request
// exactly when the approval ended approved.
func TestEgressGrantRace(t *testing.T) {
	h := newEgressGrantHub(t)
	ctx := context.Background()
	for i := range 8 {
		session := "s" + strconv.Itoa(i)
		held := confirmAsync(ctx, h.Hub, heldRequest(session, "POST", "/v1/items"))
		v := waitPending(t, h.Hub, 1)[0]
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, _ = h.Decide(ctx, v.ID, Approver{Name: "alice"}, Decision{Decision: "approve", Scope: ScopeSession, ForS: 1800, PathPrefix: "/v1/"})
		}()
		go func() {
			defer wg.Done()
			_, _ = h.Decide(ctx, v.ID, Approver{Name: "bob"}, Decision{Decision: "deny"})
		}()
		out := held.wait(t)
		wg.Wait()
		_, covered := h.opts.Grants.cover(ctx, heldRequest(session, "POST", "/v1/orders/1"))
		if covered != out.Approved() {
			t.Fatalf("round %d: approval %s, next request covered by a grant: %v", i, out.Status, covered)
		}
	}
}
