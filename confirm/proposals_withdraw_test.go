package confirm

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/policy"
)

// TestEndedSessionWithdrawsPendingProposals: a proposal still pending
// when its session ends is withdrawn (audited, its posted message updated
// as for any decision) and can no longer be accepted, so the Accept
// button of a message sent before the end cannot put it in force for a
// later session of the same name; another session's pending proposal
// stays open.
func TestEndedSessionWithdrawsPendingProposals(t *testing.T) {
	db := openTestDB(t)
	ctx := context.Background()
	p, eng := openTestProposals(t, db)
	ch := &recordingChannel{}
	p.useChannels([]Channel{ch}, time.Millisecond, 10*time.Millisecond)
	propose := func(s string) Proposal {
		pr, err := p.Propose(ctx, ProposalRequest{SessionID: s, Principal: "agent:a", Kind: ProposalEgressHost,
			Value: "pkg.example.org", Justification: "installs"})
		if err != nil {
			t.Fatal(err)
		}
		return pr
	}
	ended, other := propose("s1"), propose("s2")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if n, _ := ch.state(); n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the proposals were not posted")
		}
	}
	if err := p.EndSession(ctx, "", "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Decide(ctx, Approver{Name: "alice"}, ended.ID, ProposalDecision{Decision: "accept", ForS: 3600}); !errors.Is(err, ErrProposalSessionEnded) {
		t.Fatalf("accepting a proposal of an ended session: %v", err)
	}
	conn := policy.EgressInput{Mode: "STRICT", Host: "pkg.example.org", Port: 443, Scheme: "https", SessionID: "s1",
		Resolved: []string{"198.51.100.7"}}
	if eng.DecideEgressQuietly(ctx, conn).Allowed() {
		t.Fatal("the withdrawn proposal is in force")
	}
	got, err := p.Get(ctx, Approver{}, ended.ID)
	if err != nil || got.Status != ProposalRejected || got.DecidedBy != sessionEnded {
		t.Fatalf("the withdrawn proposal: %+v %v", got, err)
	}
	page, err := db.Query(ctx, audit.Query{Kind: AuditProposalWithdrawn})
	recs := page.Records
	if err != nil || len(recs) != 1 || recs[0].Detail["proposal_id"] != ended.ID {
		t.Fatalf("audit: %+v %v", recs, err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, u := ch.state(); len(u) == 1 && u[0] == ProposalRejected {
			break
		}
		if time.Now().After(deadline) {
			_, u := ch.state()
			t.Fatalf("the posted message was not updated: %v", u)
		}
	}
	if got, err := p.Get(ctx, Approver{}, other.ID); err != nil || got.Status != ProposalPending {
		t.Fatalf("the other session's proposal: %+v %v", got, err)
	}
	if _, err := p.Decide(ctx, Approver{Name: "alice"}, other.ID, ProposalDecision{Decision: "accept", ForS: 3600}); err != nil {
		t.Fatal(err)
	}
}
