package audit_test

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/audit"
)

// BenchmarkAppend measures one durable Append (WAL, synchronous=FULL, one
// fsync per record) of a typical run_code record, from one goroutine and
// from GOMAXPROCS*4 goroutines contending for the single writer. Both report
// µs/op, the latency (sequential) or throughput cost (parallel) per record.
//
// Run: go test -run '^$' -bench BenchmarkAppend -benchtime 2000x ./audit/
func BenchmarkAppend(b *testing.B) {
	b.Run("sequential", func(b *testing.B) {
		s := openBench(b)
		ctx := context.Background()
		for i := 0; b.Loop(); i++ {
			rec := benchRecord(i)
			if err := s.Append(ctx, &rec); err != nil {
				b.Fatal(err)
			}
		}
		reportMicros(b)
	})
	b.Run("parallel", func(b *testing.B) {
		s := openBench(b)
		ctx := context.Background()
		var n atomic.Int64
		b.SetParallelism(4)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				rec := benchRecord(int(n.Add(1)))
				if err := s.Append(ctx, &rec); err != nil {
					b.Error(err)
					return
				}
			}
		})
		reportMicros(b)
	})
}

func openBench(b *testing.B) *audit.SQLite {
	b.Helper()
	s, err := audit.Open(context.Background(), filepath.Join(b.TempDir(), "audit.db"), audit.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

func reportMicros(b *testing.B) {
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/op")
}

func benchRecord(i int) audit.Record {
	exit := 0
	return audit.Record{
		RequestID:      "req-" + time.Now().Format("150405.000000"),
		Kind:           "run_code",
		SessionID:      "sess-" + string(rune('a'+i%16)),
		Principal:      "agent:ci",
		Language:       "python",
		CodeSHA256:     "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		CodeBytes:      1234,
		RiskLevel:      "LOW",
		RiskPatterns:   []string{"py.open"},
		Action:         "allow",
		Executor:       "docker",
		Reasons:        []audit.Reason{{Code: "risk.low", Message: "low risk runs in docker"}},
		PolicyRevision: "sha256:0123456789abcdef",
		Outcome:        audit.OutcomeOK,
		ExitCode:       &exit,
		DurationMS:     42,
		HTTPStatus:     200,
	}
}
