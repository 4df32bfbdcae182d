package confirm

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/policy"
)

// newGrantHub is a hub with grants decided by the shipped policy
// (PERMISSIVE: HIGH asks a person) on the test database (SQLite, or
// PostgreSQL with SANDGATE_TEST_STORAGE_DRIVER=postgres).
func newGrantHub(t *testing.T) (*testHub, *policy.Engine) {
	t.Helper()
	db := openTestDB(t)
	eng, err := policy.New(context.Background(), policy.Options{EvalTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	g, err := OpenGrants(context.Background(), GrantOptions{Store: db, Audit: db, Policy: EngineGrants(eng, "PERMISSIVE"),
		MinFor: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return newTestHub(t, HubOptions{Store: db, Grants: g}), eng
}

// TestGrantsOnTheStore: a session grant given with an approval covers the
// next identical request at once (its id as the approval's), not another
// session's; it is listed, and after revocation the request is asked
// again; the grant is read back from the database by a second book on it
// (a restart).
func TestGrantsOnTheStore(t *testing.T) {
	h, eng := newGrantHub(t)
	ctx := context.Background()
	first := confirmAsync(ctx, h.Hub, request("s1", "import subprocess"))
	v := waitPending(t, h.Hub, 1)[0]
	fin, err := h.Decide(ctx, v.ID, Approver{Name: "alice"}, Decision{Decision: "approve", Scope: ScopeSession, ForS: 1800})
	if err != nil || fin.Grant == nil {
		t.Fatalf("decide: %+v %v", fin, err)
	}
	first.wait(t)
	id := fin.Grant.ID
	out, err := h.Confirm(ctx, request("s1", "import subprocess"))
	if err != nil || !out.Approved() || out.ApprovalID != id || out.DecidedBy != "grant:"+id {
		t.Fatalf("covered: %+v %v", out, err)
	}
	other := confirmAsync(ctx, h.Hub, request("s2", "import subprocess"))
	v2 := waitPending(t, h.Hub, 1)[0]
	if _, err := h.Decide(ctx, v2.ID, Approver{Name: "alice"}, Decision{Decision: "deny"}); err != nil {
		t.Fatal(err)
	}
	other.wait(t)

	again, err := OpenGrants(ctx, GrantOptions{Store: h.db, Policy: EngineGrants(eng, "PERMISSIVE")})
	if err != nil {
		t.Fatal(err)
	}
	list, err := again.List(ctx, Approver{}, GrantQuery{SessionID: "s1", Live: true})
	if err != nil || len(list) != 1 || list[0].ID != id || list[0].Uses != 1 || list[0].Patterns[0] != "py.subprocess" {
		t.Fatalf("list: %+v %v", list, err)
	}
	if _, err := again.Revoke(ctx, Approver{Name: "bob"}, id, "done"); err != nil {
		t.Fatal(err)
	}
	if _, err := again.Revoke(ctx, Approver{Name: "bob"}, id, ""); !errors.Is(err, ErrGrantRevoked) {
		t.Fatalf("second revoke: %v", err)
	}
	if _, err := again.Get(ctx, Approver{Name: "eve", Tenants: []string{"other"}}, id); !errors.Is(err, ErrGrantNotFound) {
		t.Fatalf("another tenant's approver read it: %v", err)
	}
	asked := confirmAsync(ctx, h.Hub, request("s1", "import subprocess"))
	v3 := waitPending(t, h.Hub, 1)[0]
	if _, err := h.Decide(ctx, v3.ID, Approver{Name: "alice"}, Decision{Decision: "deny"}); err != nil {
		t.Fatal(err)
	}
	asked.wait(t)
}

// TestGrantScopes: a run approval's grant needs a duration within its
// scope's bounds, and an egress approval takes none.
func TestGrantScopes(t *testing.T) {
	h, _ := newGrantHub(t)
	g := h.opts.Grants
	const held = "POST api.example:443/v1/items"
	for _, tc := range []struct {
		kind   string
		target string
		d      Decision
		want   error
	}{
		{KindRun, "", Decision{Scope: ScopeSession}, ErrGrantDuration},
		{KindRun, "", Decision{Scope: ScopeSession, ForS: 25 * 3600}, ErrGrantDuration},
		{KindRun, "", Decision{Scope: ScopePattern, ForS: 6 * 24 * 3600}, nil},
		{KindRun, "", Decision{Scope: ScopeOnce, ForS: 60}, ErrGrantDuration},
		{KindRun, "", Decision{Scope: ScopeSession, ForS: 60, PathPrefix: "/"}, ErrGrantPrefix},
		{KindEgress, "api.example:443", Decision{Scope: ScopeSession, ForS: 60}, ErrGrantPrefix},
		{KindEgress, "api.example:443", Decision{Scope: ScopeSession}, nil},
		{KindEgress, held, Decision{Scope: ScopeSession, ForS: 1800}, nil},
		{KindEgress, held, Decision{Scope: ScopeSession, ForS: 1800, PathPrefix: "/v1/"}, nil},
		{KindEgress, held, Decision{Scope: ScopeSession, ForS: 1800, PathPrefix: "/"}, nil},
		{KindEgress, held, Decision{Scope: ScopeSession, ForS: 1800, PathPrefix: "/v1/it"}, ErrGrantPrefix},
		{KindEgress, held, Decision{Scope: ScopeSession, ForS: 1800, PathPrefix: "/v2/"}, ErrGrantPrefix},
		{KindEgress, held, Decision{Scope: ScopeSession, ForS: 1800, PathPrefix: "v1/"}, ErrGrantPrefix},
		{KindEgress, held, Decision{Scope: ScopeOnce, ForS: 1800}, ErrGrantDuration},
		{KindEgress, held, Decision{Scope: ScopeOnce, PathPrefix: "/v1/"}, ErrGrantPrefix},
		{KindEgress, held, Decision{Scope: ScopeSession, ForS: 25 * 3600}, ErrGrantDuration},
	} {
		if _, err := g.scope(View{Kind: tc.kind, Target: tc.target}, StatusApproved, tc.d); !errors.Is(err, tc.want) {
			t.Errorf("%s %s %+v: %v, want %v", tc.kind, tc.target, tc.d, err, tc.want)
		}
	}
}

// openTestProposals is the proposals service on db with the shipped
// policy, in STRICT, closed when the test ends.
func openTestProposals(t *testing.T, db audit.Database) (*Proposals, *policy.Engine) {
	t.Helper()
	ctx := context.Background()
	eng, err := policy.New(ctx, policy.Options{EvalTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p, err := OpenProposals(ctx, ProposalOptions{Store: db, Audit: db, Policy: eng, Mode: "STRICT"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p, eng
}

// TestProposalsOnTheStore: a proposal is recorded with its effect,
// decided once, its overlay in force while accepted and gone when
// revoked; the book reads it back from the database.
func TestProposalsOnTheStore(t *testing.T) {
	db := openTestDB(t)
	ctx := context.Background()
	p, eng := openTestProposals(t, db)
	conn := policy.EgressInput{Mode: "STRICT", Host: "pkg.example.org", Port: 443, Scheme: "https", SessionID: "s1", Tenant: "t",
		Resolved: []string{"198.51.100.7"}}
	pr, err := p.Propose(ctx, ProposalRequest{Tenant: "t", SessionID: "s1", Principal: "agent:a", Kind: ProposalEgressHost,
		Value: "PKG.example.org:443", Justification: "installs"})
	if err != nil || pr.Status != ProposalPending || pr.Value != "pkg.example.org:443" {
		t.Fatalf("propose: %+v %v", pr, err)
	}
	for _, bad := range []ProposalRequest{{Kind: ProposalEgressHost, Value: "*.example.org", Justification: "x"},
		{Kind: ProposalEgressHost, Value: "a.b:0", Justification: "x"}, {Kind: ProposalEgressHost, Value: "a.b"},
		{Kind: ProposalExecutor, Value: "docker", Justification: "x"}} {
		if _, err := p.Propose(ctx, bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	if eng.DecideEgressQuietly(ctx, conn).Allowed() {
		t.Fatal("allowed before the decision")
	}
	if _, err := p.Decide(ctx, Approver{Name: "alice"}, pr.ID, ProposalDecision{Decision: "accept", ForS: 3600}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Decide(ctx, Approver{Name: "bob"}, pr.ID, ProposalDecision{Decision: "reject"}); !errors.Is(err, ErrProposalDecided) {
		t.Fatalf("second decision: %v", err)
	}
	if d := eng.DecideEgressQuietly(ctx, conn); !d.Allowed() || d.Rule != "proposal:"+pr.ID {
		t.Fatalf("accepted: %+v", d)
	}
	other := conn
	other.SessionID = "s2"
	if eng.DecideEgressQuietly(ctx, other).Allowed() {
		t.Fatal("the overlay allowed another session")
	}
	// A reload drops the store the overlay was written into; the book
	// puts it back.
	if _, err := eng.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !eng.DecideEgressQuietly(ctx, conn).Allowed() {
		if time.Now().After(deadline) {
			t.Fatal("the overlay did not come back after a reload")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := p.Revoke(ctx, Approver{Name: "alice"}, pr.ID, "done"); err != nil {
		t.Fatal(err)
	}
	if eng.DecideEgressQuietly(ctx, conn).Allowed() {
		t.Fatal("allowed after the revocation")
	}
	got, err := p.Get(ctx, Approver{}, pr.ID)
	if err != nil || got.Status != ProposalRevoked || got.Overlay["name"] != "proposal:"+pr.ID {
		t.Fatalf("read back: %+v %v", got, err)
	}
}

// TestProposalsPerSessionBounded: a session has at most 5 pending
// proposals; a decision makes room.
func TestProposalsPerSessionBounded(t *testing.T) {
	db := openTestDB(t)
	ctx := context.Background()
	eng, err := policy.New(ctx, policy.Options{EvalTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p, err := OpenProposals(ctx, ProposalOptions{Store: db, Policy: eng, Mode: "STRICT"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.opts.Audit = db
	req := ProposalRequest{Tenant: "t", SessionID: "s1", Kind: ProposalEgressHost, Value: "a.example.org", Justification: "x"}
	var first Proposal
	for i := range 5 {
		pr, err := p.Propose(ctx, req)
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		if i == 0 {
			first = pr
		}
	}
	if _, err := p.Propose(ctx, req); !errors.Is(err, ErrProposalsPending) {
		t.Fatalf("sixth: %v", err)
	}
	other := req
	other.SessionID = "s2"
	if _, err := p.Propose(ctx, other); err != nil {
		t.Fatalf("another session: %v", err)
	}
	if _, err := p.Decide(ctx, Approver{Name: "alice"}, first.ID, ProposalDecision{Decision: "reject"}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Propose(ctx, req); err != nil {
		t.Fatalf("after a decision: %v", err)
	}
}

// TestProposalReplayBudget: a replay past its budget stops between
// batches, and the effect says it is partial and how many records it
// covered.
func TestProposalReplayBudget(t *testing.T) {
	db := openTestDB(t)
	ctx := context.Background()
	for i := range 300 {
		if err := db.Append(ctx, &audit.Record{Kind: "egress", Tenant: "t", SessionID: "s1", Action: "deny", Outcome: audit.OutcomeDenied,
			Detail: map[string]string{"host": fmt.Sprintf("h%d.example.org", i), "port": "443", "scheme": "https", "rule": "default"}}); err != nil {
			t.Fatal(err)
		}
	}
	eng, err := policy.New(ctx, policy.Options{EvalTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p, err := OpenProposals(ctx, ProposalOptions{Store: db, Audit: db, Policy: eng, Mode: "STRICT", Budget: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	pr, err := p.Propose(ctx, ProposalRequest{Tenant: "t", SessionID: "s1", Kind: ProposalEgressHost, Value: "h1.example.org",
		Justification: "x"})
	if err != nil || !pr.Effect.Truncated || pr.Effect.Replayed != replayBatch || pr.Effect.Distinct != 300 {
		t.Fatalf("%+v %v", pr.Effect, err)
	}
}
