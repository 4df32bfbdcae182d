package audit_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/internal/pgtest"
)

// openTemp opens a fresh SQLite store in a temporary directory, closed at
// the end of the test. Its logs go to the test output.
func openTemp(t testing.TB, opts audit.Options) *audit.SQLite {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	}
	s, err := audit.Open(t.Context(), filepath.Join(t.TempDir(), "audit.db"), opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// stores lists the Store implementations that must behave alike.
func stores(t *testing.T) map[string]func(t *testing.T) audit.Store {
	t.Helper()
	return map[string]func(t *testing.T) audit.Store{
		"sqlite":   func(t *testing.T) audit.Store { return openTemp(t, audit.Options{}) },
		"memory":   func(t *testing.T) audit.Store { return audit.NewMemory() },
		"postgres": func(t *testing.T) audit.Store { return openPostgres(t, audit.Options{}) },
	}
}

// databases lists the Database drivers that must behave alike.
func databases(t *testing.T) map[string]func(t *testing.T) audit.Database {
	t.Helper()
	return map[string]func(t *testing.T) audit.Database{
		"sqlite":   func(t *testing.T) audit.Database { return openTemp(t, audit.Options{}) },
		"postgres": func(t *testing.T) audit.Database { return openPostgres(t, audit.Options{}) },
	}
}

// openPostgres opens a Postgres store in a fresh schema of the test
// cluster (skipped without one unless SANDGATE_REQUIRE_POSTGRES=1).
func openPostgres(t testing.TB, opts audit.Options) *audit.Postgres {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	}
	s, err := audit.OpenPostgres(t.Context(), pgtest.Schema(t), opts)
	if err != nil {
		t.Fatalf("OpenPostgres: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// fullRecord returns a record with every field set.
func fullRecord() audit.Record {
	exit := 3
	return audit.Record{
		RequestID:      "req-1",
		Time:           time.Date(2026, 3, 4, 5, 6, 7, 891234567, time.UTC),
		Kind:           "run_code",
		Tenant:         "team-a",
		SessionID:      "sess-1",
		Principal:      "agent:ci-bot",
		Language:       "python",
		CodeSHA256:     "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		CodeBytes:      321,
		RiskLevel:      "HIGH",
		RiskPatterns:   []string{"py.subprocess", "py.socket"},
		Action:         "require_approval",
		Executor:       "docker",
		Reasons:        []audit.Reason{{Code: "risk.high", Message: "high risk needs approval"}, {Code: "risk.critical", Message: "critical", Enforcement: "dryrun"}},
		PolicyRevision: "sha256:abc",
		Approval:       &audit.Approval{ID: "apr-1", Status: "approved", DecidedBy: "approver:alice", Reason: "looks fine"},
		Outcome:        audit.OutcomeFailed,
		ErrorCode:      "",
		ExitCode:       &exit,
		DurationMS:     1234,
		HTTPStatus:     200,
		Path:           "/workspace/out.txt",
		Bytes:          4096,
		Detail:         map[string]string{"host": "example.org"},
		DecisionID:     "4b1c0f6e-3f0a-4d7e-9c43-2f3d1f9f8a11",
		WouldBe:        "deny",
	}
}

// appendN appends n minimal records and returns them with IDs set.
func appendN(t *testing.T, s audit.Store, n int, mk func(i int) audit.Record) []audit.Record {
	t.Helper()
	out := make([]audit.Record, 0, n)
	for i := range n {
		rec := mk(i)
		if err := s.Append(t.Context(), &rec); err != nil {
			t.Fatalf("Append %d: %v", i, err)
		}
		out = append(out, rec)
	}
	return out
}

func minimal(i int) audit.Record {
	return audit.Record{RequestID: fmt.Sprintf("req-%d", i), Kind: "run_code", Outcome: audit.OutcomeOK}
}

// queryAll follows the cursor until the end and returns every record.
func queryAll(t *testing.T, s audit.Store, q audit.Query) []audit.Record {
	t.Helper()
	var all []audit.Record
	for range 100000 {
		page, err := s.Query(context.Background(), q)
		if err != nil {
			t.Fatalf("Query(%+v): %v", q, err)
		}
		all = append(all, page.Records...)
		if page.NextCursor == 0 {
			return all
		}
		q.Before = page.NextCursor
	}
	t.Fatal("queryAll: cursor never ended")
	return nil
}

func ids(recs []audit.Record) []int64 {
	out := make([]int64, len(recs))
	for i, r := range recs {
		out[i] = r.ID
	}
	return out
}
