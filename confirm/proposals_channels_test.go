package confirm

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/policy"
)

// recordingChannel is a ProposalChannel that records what it is told;
// its first post fails (a transient error), as a channel's may.
type recordingChannel struct {
	mu      sync.Mutex
	posts   int
	tries   int
	updates []string // status of each update, in order
	tenants []string
}

func (c *recordingChannel) Name() string                                 { return "rec" }
func (c *recordingChannel) Routes(View) bool                             { return false }
func (c *recordingChannel) Post(context.Context, View) (string, error)   { return "", nil }
func (c *recordingChannel) Resolved(context.Context, string, View) error { return nil }
func (c *recordingChannel) RoutesProposal(pr Proposal) bool {
	return len(c.tenants) == 0 || pr.Tenant == c.tenants[0]
}
func (c *recordingChannel) ProposalDecided(_ context.Context, ref string, pr Proposal) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ref != "msg-"+pr.ID {
		return Permanent(errors.New("wrong ref"))
	}
	c.updates = append(c.updates, pr.Status)
	return nil
}

func (c *recordingChannel) PostProposal(_ context.Context, pr Proposal) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tries++
	if c.tries == 1 {
		return "", errors.New("connection reset")
	}
	c.posts++
	return "msg-" + pr.ID, nil
}

func (c *recordingChannel) state() (int, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.posts, append([]string(nil), c.updates...)
}

// TestProposalChannelsFollowOtherReplicas: a proposal made on replica A
// is posted to A's channel (after a failed attempt); decided and then
// revoked on replica B (another book on the same database), A's channel
// is told of each, in order, once; a proposal of a tenant the channel
// does not route is not posted.
func TestProposalChannelsFollowOtherReplicas(t *testing.T) {
	db := openTestDB(t)
	ctx := context.Background()
	eng, err := policy.New(ctx, policy.Options{EvalTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	open := func() *Proposals {
		p, err := OpenProposals(ctx, ProposalOptions{Store: db, Audit: db, Policy: eng, Mode: "STRICT", Refresh: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return p
	}
	a, b := open(), open()
	ch := &recordingChannel{tenants: []string{"team"}}
	a.useChannels([]Channel{ch}, time.Millisecond, 10*time.Millisecond)
	pr, err := a.Propose(ctx, ProposalRequest{Tenant: "team", SessionID: "s1", Principal: "agent:a", Kind: ProposalEgressHost,
		Value: "files.example.org", Justification: "dataset"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Propose(ctx, ProposalRequest{Tenant: "other", SessionID: "s1", Principal: "agent:a", Kind: ProposalEgressHost,
		Value: "files.example.org", Justification: "dataset"}); err != nil {
		t.Fatal(err)
	}
	waitFor := func(what string, cond func(int, []string) bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			n, u := ch.state()
			if cond(n, u) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: posts %d, updates %v", what, n, u)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor("the post", func(n int, _ []string) bool { return n == 1 })
	if _, err := b.Decide(ctx, Approver{Name: "alice"}, pr.ID, ProposalDecision{Decision: "accept"}); err != nil {
		t.Fatal(err)
	}
	waitFor("the acceptance", func(_ int, u []string) bool { return len(u) == 1 && u[0] == ProposalAccepted })
	if _, err := b.Revoke(ctx, Approver{Name: "alice"}, pr.ID, "done"); err != nil {
		t.Fatal(err)
	}
	waitFor("the revocation", func(_ int, u []string) bool { return len(u) == 2 && u[1] == ProposalRevoked })
	time.Sleep(100 * time.Millisecond) // a few more refreshes: nothing is told twice
	if n, u := ch.state(); n != 1 || len(u) != 2 {
		t.Errorf("posts %d, updates %v", n, u)
	}
}
