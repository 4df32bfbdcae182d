package audit_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/internal/pgtest"
)

// driver opens (and reopens) one database as a given replica, and lets a
// test write to it behind the store's back, as someone with access to the
// database file or server would.
type driver struct {
	open   func(t *testing.T, replica string) audit.Database
	tamper func(t *testing.T, stmt string)
}

func drivers(t *testing.T) map[string]driver {
	path := filepath.Join(t.TempDir(), "audit.db")
	var dsn string
	pgDSN := func(t *testing.T) string {
		if dsn == "" {
			dsn = pgtest.Schema(t)
		}
		return dsn
	}
	return map[string]driver{
		"sqlite": {
			open: func(t *testing.T, replica string) audit.Database {
				db, err := audit.Open(t.Context(), path, audit.Options{Replica: replica})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = db.Close() })
				return db
			},
			tamper: func(t *testing.T, stmt string) {
				raw, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)")
				if err != nil {
					t.Fatal(err)
				}
				defer raw.Close()
				for _, s := range []string{`DROP TRIGGER IF EXISTS records_no_update`, `DROP TRIGGER IF EXISTS records_no_delete`, stmt} {
					if _, err := raw.ExecContext(t.Context(), s); err != nil {
						t.Fatalf("%s: %v", s, err)
					}
				}
			},
		},
		"postgres": {
			open: func(t *testing.T, replica string) audit.Database {
				db, err := audit.OpenPostgres(t.Context(), pgDSN(t), audit.Options{Replica: replica})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = db.Close() })
				return db
			},
			tamper: func(t *testing.T, stmt string) {
				pgtest.Exec(t, pgDSN(t), `ALTER TABLE records DISABLE TRIGGER USER`)
				pgtest.Exec(t, pgDSN(t), stmt)
			},
		},
	}
}

// TestWriteAhead: a started record is completed once; one left behind by
// a process that died becomes interrupted when its replica starts again;
// the chain still verifies.
func TestWriteAhead(t *testing.T) {
	for name, d := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			db := d.open(t, "a")
			done := audit.Record{RequestID: "r1", Kind: "run_code", Outcome: audit.OutcomeStarted, Action: "allow"}
			if err := db.Append(t.Context(), &done); err != nil {
				t.Fatal(err)
			}
			exit := 0
			done.Outcome, done.ExitCode, done.DurationMS, done.Executor = audit.OutcomeOK, &exit, 12, "subprocess"
			if err := db.Complete(t.Context(), &done); err != nil {
				t.Fatalf("Complete: %v", err)
			}
			done.Outcome = audit.OutcomeFailed
			if err := db.Complete(t.Context(), &done); !errors.Is(err, audit.ErrNotStarted) {
				t.Fatalf("second Complete: %v, want ErrNotStarted", err)
			}
			dangling := audit.Record{RequestID: "r2", Kind: "run_code", Outcome: audit.OutcomeStarted, Action: "allow"}
			if err := db.Append(t.Context(), &dangling); err != nil {
				t.Fatal(err)
			}
			other := d.open(t, "b") // another replica's started record is not ours to close
			theirs := audit.Record{RequestID: "r3", Kind: "run_code", Outcome: audit.OutcomeStarted}
			if err := other.Append(t.Context(), &theirs); err != nil {
				t.Fatal(err)
			}
			_ = db.Close() // the process "dies" with r2 started
			db = d.open(t, "a")
			if n, err := db.ResolveStarted(t.Context()); err != nil || n != 1 {
				t.Fatalf("ResolveStarted = %d, %v; want 1", n, err)
			}
			byReq := map[string]audit.Record{}
			for _, r := range queryAll(t, db, audit.Query{}) {
				byReq[r.RequestID] = r
			}
			if r := byReq["r1"]; r.Outcome != audit.OutcomeOK || r.ExitCode == nil || r.DurationMS != 12 || r.Action != "allow" {
				t.Errorf("completed record: %+v", r)
			}
			if r := byReq["r2"]; r.Outcome != audit.OutcomeInterrupted || r.Action != "allow" {
				t.Errorf("dangling record: %+v, want interrupted", r)
			}
			if r := byReq["r3"]; r.Outcome != audit.OutcomeStarted {
				t.Errorf("replica b's record: %+v, want still started", r)
			}
			rep, err := audit.Verify(t.Context(), db, "")
			if err != nil || len(rep.Broken) != 0 || rep.Records["a"] != 2 || rep.Records["b"] != 1 {
				t.Fatalf("Verify: %+v %v", rep, err)
			}
		})
	}
}

// TestVerifyNamesTheEditedRecord edits one field of one record, or deletes
// one, behind the store's back: Verify names that record (or, for a
// deletion, the one after it) and nothing earlier.
func TestVerifyNamesTheEditedRecord(t *testing.T) {
	cases := []struct {
		name   string
		stmt   string
		wantID int64
	}{
		{"outcome rewritten", `UPDATE records SET outcome = 'denied' WHERE id = 3`, 3},
		{"principal rewritten", `UPDATE records SET principal = 'agent:someone-else' WHERE id = 4`, 4},
		{"record deleted", `DELETE FROM records WHERE id = 2`, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for name, d := range drivers(t) {
				t.Run(name, func(t *testing.T) {
					db := d.open(t, "a")
					appendN(t, db, 5, minimal)
					if rep, err := audit.Verify(t.Context(), db, ""); err != nil || len(rep.Broken) != 0 || rep.Records["a"] != 5 {
						t.Fatalf("Verify before: %+v %v", rep, err)
					}
					d.tamper(t, tc.stmt)
					rep, err := audit.Verify(t.Context(), db, "a")
					if err != nil {
						t.Fatal(err)
					}
					if len(rep.Broken) != 1 || rep.Broken[0].ID != tc.wantID || rep.Broken[0].Replica != "a" {
						t.Fatalf("Verify after: %+v, want record %d named", rep, tc.wantID)
					}
					t.Logf("found: %s", rep.Broken[0])
				})
			}
		})
	}
}

// TestChainContinuesAcrossRestarts: a reopened store links to its last
// record, concurrently appended records chain in id order.
func TestChainContinuesAcrossRestarts(t *testing.T) {
	for name, d := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			db := d.open(t, "a")
			appendN(t, db, 3, minimal)
			_ = db.Close()
			db = d.open(t, "a")
			done := make(chan error, 20)
			for i := range 20 {
				go func() {
					r := minimal(100 + i)
					done <- db.Append(context.Background(), &r)
				}()
			}
			for range 20 {
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			}
			if rep, err := audit.Verify(t.Context(), db, ""); err != nil || len(rep.Broken) != 0 || rep.Records["a"] != 23 {
				t.Fatalf("Verify: %+v %v", rep, err)
			}
		})
	}
}
