package confirm

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/policy"
)

// TestExecutorProposalOnlyRaisesIsolation: with subprocess, docker and
// gVisor all available, an executor proposal that could move no run of
// the session to an executor at least as isolating (subprocess in
// PERMISSIVE: SAFE and LOW runs are there already, the rest on docker)
// is refused; a gVisor one is accepted and raises the session's MEDIUM
// runs to gVisor while a CRITICAL run keeps the executor the admin
// configured.
func TestExecutorProposalOnlyRaisesIsolation(t *testing.T) {
	h, eng := newGrantHub(t)
	ctx := context.Background()
	avail := map[string]policy.ExecutorState{}
	for _, k := range []string{"subprocess", "docker", "gvisor"} {
		avail[k] = policy.ExecutorState{Available: true}
	}
	p, err := OpenProposals(ctx, ProposalOptions{Store: h.db, Audit: h.db, Policy: eng, Mode: "PERMISSIVE", Grants: h.opts.Grants,
		Executors: func(context.Context) map[string]policy.ExecutorState { return avail }})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// The session's recent runs: the effect shows the MEDIUM one moving
	// to gVisor, not the CRITICAL one (the states carry no capabilities,
	// so both are denied; the route is what this checks).
	for _, level := range []string{"MEDIUM", "CRITICAL"} {
		if err := h.db.Append(ctx, &audit.Record{Kind: "run_code", SessionID: "s1", Principal: "agent:a", Language: "python",
			RiskLevel: level, Action: "allow", Executor: "docker", Outcome: audit.OutcomeOK}); err != nil {
			t.Fatal(err)
		}
	}
	propose := func(value string) (Proposal, error) {
		return p.Propose(ctx, ProposalRequest{SessionID: "s1", Principal: "agent:a", Kind: ProposalExecutor, Value: value,
			Justification: "needs another tier"})
	}
	if _, err := propose("subprocess"); !errors.Is(err, ErrProposalWeakens) {
		t.Fatalf("subprocess proposal: %v", err)
	}
	pr, err := propose("gvisor")
	if err != nil {
		t.Fatal(err)
	}
	if pr.Effect.ChangedCount != 1 || len(pr.Effect.Changed) != 1 || !strings.HasSuffix(pr.Effect.Changed[0].Candidate, " on gvisor") ||
		!strings.HasPrefix(pr.Effect.Changed[0].What, "MEDIUM") {
		t.Errorf("effect: %+v", pr.Effect)
	}
	if _, err := p.Decide(ctx, Approver{Name: "alice"}, pr.ID, ProposalDecision{Decision: "accept", ForS: 600}); err != nil {
		t.Fatal(err)
	}
	in := func(level string) policy.Input {
		return policy.Input{Mode: "PERMISSIVE", Executors: avail, Risk: policy.Risk{Level: level},
			Request: policy.Request{Kind: "run_code", SessionID: "s1", Language: "python", TimeoutS: 30}}
	}
	if d := eng.DecideQuietly(ctx, in("MEDIUM")); d.Executor != "gvisor" {
		t.Errorf("MEDIUM with the gVisor overlay: %+v", d)
	}
	if d := eng.DecideQuietly(ctx, in("CRITICAL")); d.Executor != "docker" {
		t.Errorf("CRITICAL with the gVisor overlay: %+v", d)
	}
}
