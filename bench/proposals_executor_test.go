package main

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/confirm"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/policy/replay"
)

// seedExecWindow writes n run records of tenant t, half of them in session
// s-1, with risk levels and pattern sets that make distinct inputs
// distinct ones in all.
func seedExecWindow(tb testing.TB, st audit.Store, n, distinct int) {
	tb.Helper()
	ctx := context.Background()
	levels := []string{"LOW", "MEDIUM", "HIGH"}
	for i := range n {
		rec := &audit.Record{Kind: "run_code", Tenant: "t", SessionID: fmt.Sprintf("s-%d", i%2), Principal: "agent:a",
			Language: "python", CodeBytes: 40, RiskLevel: levels[i%len(levels)], RiskPatterns: []string{fmt.Sprintf("python.p%d", i%distinct)},
			Action: "deny", Executor: "docker", Outcome: audit.OutcomeDenied}
		if err := st.Append(ctx, rec); err != nil {
			tb.Fatal(err)
		}
	}
}

// BenchmarkExecutorProposalReplay is an executor proposal's whole answer
// (read the tenant's window, replay the session's runs with the candidate
// executor overlay and as now, record the proposal; gVisor, since an
// overlay may only raise isolation) over 10,000 records,
// with 300 and 3,000 distinct runs in the session; its baseline in the
// same run is reading the window alone. Reported: ns/op (wall) and
// cpu-ms/op.
func BenchmarkExecutorProposalReplay(b *testing.B) {
	for _, distinct := range []int{300, 3000} {
		b.Run(fmt.Sprintf("distinct=%d", distinct), func(b *testing.B) {
			ctx := context.Background()
			st, err := audit.Open(ctx, filepath.Join(b.TempDir(), "audit.db"), audit.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			seedExecWindow(b, st, replayRecords, distinct)
			eng, err := policy.New(ctx, policy.Options{EvalTimeout: 10 * time.Second})
			if err != nil {
				b.Fatal(err)
			}
			execs := map[string]policy.ExecutorState{"subprocess": {Available: true}, "docker": {Available: false, Reason: "not installed"},
				"gvisor": {Available: true}}
			p, err := confirm.OpenProposals(ctx, confirm.ProposalOptions{Store: st, Audit: st, Policy: eng, Mode: "STRICT", Budget: time.Hour,
				Executors: func(context.Context) map[string]policy.ExecutorState { return execs }})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			b.Run("read-window", func(b *testing.B) {
				c0 := cpuNow()
				for b.Loop() {
					recs, err := replay.Window(ctx, st, audit.Query{Tenant: "t"}, replayRecords, replay.IsExec)
					if err != nil || len(recs) != replayRecords {
						b.Fatalf("%d %v", len(recs), err)
					}
				}
				b.ReportMetric(float64((cpuNow()-c0).Milliseconds())/float64(b.N), "cpu-ms/op")
			})
			b.Run("propose", func(b *testing.B) {
				i := 0
				c0 := cpuNow()
				for b.Loop() {
					i++
					// A session of its own each time: at most five proposals
					// may be pending in one.
					pr, err := p.Propose(ctx, confirm.ProposalRequest{Tenant: "t", SessionID: "s-1", Principal: "agent:a",
						Kind: confirm.ProposalExecutor, Value: "gvisor", Justification: "bench"})
					if err != nil || pr.Effect.Replayed < replayRecords || pr.Effect.ChangedCount == 0 {
						b.Fatalf("%+v %v", pr.Effect.ChangedCount, err)
					}
					if _, err := p.Decide(ctx, confirm.Approver{Name: "bench"}, pr.ID, confirm.ProposalDecision{Decision: "reject"}); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64((cpuNow()-c0).Milliseconds())/float64(b.N), "cpu-ms/op")
			})
		})
	}
}
