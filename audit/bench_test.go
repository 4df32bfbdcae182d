package audit_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/audit"
)

// BenchmarkAppend measures one durable Append (WAL, synchronous=FULL) of a
// typical run_code record, from one goroutine and from 4*GOMAXPROCS
// goroutines contending for the single writer (where group commit lets
// concurrent records share an fsync). Both report µs/op, and vs_raw: the
// ratio to a raw autocommit INSERT of a same-sized row into a bare table
// with the same pragmas, measured in the same run (the floor: one SQLite
// commit and its fsync, nothing of ours).
//
// Run: go test -run '^$' -bench BenchmarkAppend -benchtime 2000x ./audit/
func BenchmarkAppend(b *testing.B) {
	raw := rawInsertMicros(b, 300)
	b.Logf("raw durable INSERT baseline: %.1f µs", raw)
	b.Run("sequential", func(b *testing.B) {
		s := openBench(b)
		ctx := context.Background()
		for i := 0; b.Loop(); i++ {
			rec := benchRecord(i)
			if err := s.Append(ctx, &rec); err != nil {
				b.Fatal(err)
			}
		}
		reportMicros(b, raw)
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
		reportMicros(b, raw)
	})
}

// rawInsertMicros returns the mean time of n autocommit INSERTs of a row
// about the size of an encoded audit record, straight through database/sql.
func rawInsertMicros(b *testing.B, n int) float64 {
	b.Helper()
	path := filepath.Join(b.TempDir(), "raw.db")
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	row, err := json.Marshal(benchRecord(0))
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	for range n {
		if _, err := db.ExecContext(ctx, `INSERT INTO t (v) VALUES (?)`, string(row)); err != nil {
			b.Fatal(err)
		}
	}
	return float64(time.Since(start).Microseconds()) / float64(n)
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

func reportMicros(b *testing.B, raw float64) {
	us := float64(b.Elapsed().Microseconds()) / float64(b.N)
	b.ReportMetric(us, "µs/op")
	b.ReportMetric(us/raw, "vs_raw")
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

// BenchmarkAppendDrivers is the audit write on each storage.driver: one
// durable Append of a typical run_code record at a time (SQLite WAL with
// synchronous=FULL; PostgreSQL with synchronous_commit=on, over the test
// cluster's Unix socket), reporting the p50 and p99 per write. PostgreSQL
// needs SANDGATE_TEST_POSTGRES_DSN (make test's cluster).
//
// Run: go test -run '^$' -bench BenchmarkAppendDrivers -benchtime 2000x ./audit/
func BenchmarkAppendDrivers(b *testing.B) {
	for _, name := range []string{"sqlite", "postgres"} {
		b.Run(name, func(b *testing.B) {
			var s audit.Database
			if name == "sqlite" {
				s = openBench(b)
			} else {
				s = openPostgres(b, audit.Options{Logger: slog.New(slog.DiscardHandler)})
			}
			ctx := context.Background()
			lat := make([]time.Duration, 0, b.N)
			for i := 0; b.Loop(); i++ {
				rec := benchRecord(i)
				t0 := time.Now()
				if err := s.Append(ctx, &rec); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50_µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99_µs")
		})
	}
}
