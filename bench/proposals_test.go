package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/confirm"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/policy/replay"
)

// replayRecords is the replay window (issue 31: a proposal's
// replay over 10,000 audit records ≤ 1 s).
const replayRecords = 10000

// seedEgressWindow writes n egress records of tenant t over 8 sessions,
// half of them denied, to hosts distinct hosts (hosts = n: nothing
// repeats, the replay's worst case).
func seedEgressWindow(tb testing.TB, st audit.Store, n, hosts int) {
	tb.Helper()
	ctx := context.Background()
	for i := range n {
		action, rule := "allow", "pkgs"
		if i%2 == 1 {
			action, rule = "deny", "default"
		}
		rec := &audit.Record{Kind: replay.KindEgress, Tenant: "t", SessionID: fmt.Sprintf("s-%d", i%8), Principal: "agent:a",
			Action: action, Outcome: audit.OutcomeOK, Detail: map[string]string{"host": fmt.Sprintf("h%d.example.org", i%hosts),
				"port": "443", "scheme": "https", "rule": rule}}
		if err := st.Append(ctx, rec); err != nil {
			tb.Fatal(err)
		}
	}
}

// cpuNow is the process's user+system CPU time: on a shared machine the
// wall time of a replay says more about the neighbours than about it.
func cpuNow() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkProposalReplay is an egress proposal's whole answer (read the
// tenant's window, replay it against the candidate rule, record the
// proposal) over 10,000 records, with every target distinct (worst case)
// and with 200 hosts (an agent's traffic repeats its hosts); its baseline
// in the same run is reading the window alone. Reported: ns/op (wall) and
// cpu-ms/op.
func BenchmarkProposalReplay(b *testing.B) {
	for _, hosts := range []int{replayRecords, 200} {
		b.Run("hosts="+strconv.Itoa(hosts), func(b *testing.B) {
			ctx := context.Background()
			st, err := audit.Open(ctx, filepath.Join(b.TempDir(), "audit.db"), audit.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			seedEgressWindow(b, st, replayRecords, hosts)
			eng, err := policy.New(ctx, policy.Options{EvalTimeout: 10 * time.Second})
			if err != nil {
				b.Fatal(err)
			}
			// No budget: the benchmark measures the whole replay.
			p, err := confirm.OpenProposals(ctx, confirm.ProposalOptions{Store: st, Audit: st, Policy: eng, Mode: "STRICT", Budget: time.Hour})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			b.Run("read-window", func(b *testing.B) {
				c0 := cpuNow()
				for b.Loop() {
					recs, err := replay.Window(ctx, st, audit.Query{Tenant: "t", Kind: replay.KindEgress}, replayRecords, replay.IsEgress)
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
					pr, err := p.Propose(ctx, confirm.ProposalRequest{Tenant: "t", SessionID: "s-1", Principal: "agent:a",
						Kind: confirm.ProposalEgressHost, Value: "h" + strconv.Itoa(8*i+1) + ".example.org:443", Justification: "bench"})
					if err != nil || pr.Effect.Replayed < replayRecords {
						b.Fatalf("%+v %v", pr.Effect, err)
					}
				}
				b.ReportMetric(float64((cpuNow()-c0).Milliseconds())/float64(b.N), "cpu-ms/op")
			})
		})
	}
}
