package confirm

import (
	"context"
	"testing"
	"time"

	"github.com/sandgate/sandgate/policy"
)

// TestRevokedPatternProposalTakesItsGrant: revoking an accepted pattern
// proposal revokes the grant it became, and the grant is bounded like
// every session grant whatever the proposal's for_s.
func TestRevokedPatternProposalTakesItsGrant(t *testing.T) {
	h, eng := newGrantHub(t)
	ctx := context.Background()
	p, err := OpenProposals(ctx, ProposalOptions{Store: h.db, Audit: h.db, Policy: eng, Mode: "PERMISSIVE", Grants: h.opts.Grants})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	pr, err := p.Propose(ctx, ProposalRequest{Tenant: "", SessionID: "s1", Principal: "agent:a", Kind: ProposalPattern,
		Value: "py.subprocess", Justification: "runs the build"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Decide(ctx, Approver{Name: "alice"}, pr.ID, ProposalDecision{Decision: "accept", ForS: 7 * 24 * 3600}); err != nil {
		t.Fatal(err)
	}
	live := liveGrants(t, h.opts.Grants, "s1")
	if len(live) != 1 || live[0].ApprovalID != pr.ID || time.Until(live[0].ExpiresAt) > DefaultMaxSessionGrant {
		t.Fatalf("the accepted proposal's grant: %+v", live)
	}
	if _, err := p.Revoke(ctx, Approver{Name: "alice"}, pr.ID, "no longer"); err != nil {
		t.Fatal(err)
	}
	if live := liveGrants(t, h.opts.Grants, "s1"); len(live) != 0 {
		t.Fatalf("the grant outlived its revoked proposal: %+v", live)
	}
}

// TestEndedSessionTakesItsGrantsAndProposals: a deleted or expired
// session's session grants and accepted proposals are revoked, so a new
// session of the same name starts with none; another session keeps its
// own.
func TestEndedSessionTakesItsGrantsAndProposals(t *testing.T) {
	h, eng := newGrantHub(t)
	ctx := context.Background()
	g := h.opts.Grants
	p, err := OpenProposals(ctx, ProposalOptions{Store: h.db, Audit: h.db, Policy: eng, Mode: "STRICT", Grants: g})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	closed := make(chan struct{}, 4)
	p.OnOverlay(func(context.Context) { closed <- struct{}{} })
	for _, s := range []string{"s1", "s2"} {
		if _, err := g.give(ctx, View{ID: "apr-" + s, SessionID: s, Language: "python", RiskLevel: "HIGH"}, ScopeSession, 1800, "alice"); err != nil {
			t.Fatal(err)
		}
		pr, err := p.Propose(ctx, ProposalRequest{SessionID: s, Principal: "agent:a", Kind: ProposalEgressHost,
			Value: "pkg.example.org", Justification: "installs"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Decide(ctx, Approver{Name: "alice"}, pr.ID, ProposalDecision{Decision: "accept", ForS: 3600}); err != nil {
			t.Fatal(err)
		}
	}
	conn := func(s string) policy.EgressInput {
		return policy.EgressInput{Mode: "STRICT", Host: "pkg.example.org", Port: 443, Scheme: "https", SessionID: s,
			Resolved: []string{"198.51.100.7"}}
	}
	for len(closed) > 0 { // the accepts changed the overlay too
		<-closed
	}
	if err := g.EndSession(ctx, "", "s1"); err != nil {
		t.Fatal(err)
	}
	if err := p.EndSession(ctx, "", "s1"); err != nil {
		t.Fatal(err)
	}
	if live := liveGrants(t, g, "s1"); len(live) != 0 {
		t.Errorf("s1's grant outlived it: %+v", live)
	}
	if eng.DecideEgressQuietly(ctx, conn("s1")).Allowed() {
		t.Error("s1's accepted proposal outlived it")
	}
	select {
	case <-closed:
	default:
		t.Error("the egress proxy was not told the overlay changed")
	}
	if live := liveGrants(t, g, "s2"); len(live) != 1 {
		t.Errorf("s2 lost its grant: %+v", live)
	}
	if !eng.DecideEgressQuietly(ctx, conn("s2")).Allowed() {
		t.Error("s2 lost its accepted proposal")
	}
}

func liveGrants(t *testing.T, g *Grants, session string) []Grant {
	t.Helper()
	all, err := g.List(context.Background(), Approver{}, GrantQuery{SessionID: session, Live: true})
	if err != nil {
		t.Fatal(err)
	}
	var out []Grant
	for _, gr := range all {
		if gr.SessionID == session {
			out = append(out, gr)
		}
	}
	return out
}
