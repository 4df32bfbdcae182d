package audit_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/sandgate/sandgate/audit"
)

// approvalsV1 and approvalsV2 stand in for a later package (approvals) that
// keeps its own table in the audit database.
var (
	approvalsV1 = audit.Migration{Version: 1, Name: "create approvals",
		SQL: `CREATE TABLE approvals (id TEXT PRIMARY KEY, status TEXT NOT NULL) STRICT;
		      CREATE INDEX approvals_status ON approvals (status);`}
	approvalsV2 = audit.Migration{Version: 2, Name: "add reason",
		SQL: `ALTER TABLE approvals ADD COLUMN reason TEXT NOT NULL DEFAULT ''`,
		Func: func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `UPDATE approvals SET reason = 'migrated'`)
			return err
		}}
)

func TestMigrate_OtherComponent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.db")
	s, err := audit.Open(t.Context(), path, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(t.Context(), "approvals", []audit.Migration{approvalsV1}); err != nil {
		t.Fatalf("Migrate v1: %v", err)
	}
	err = s.WriteTx(t.Context(), func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO approvals (id, status) VALUES ('a1', 'pending')`)
		return err
	})
	if err != nil {
		t.Fatalf("WriteTx: %v", err)
	}
	// A failing WriteTx rolls back.
	boom := errors.New("boom")
	err = s.WriteTx(t.Context(), func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO approvals (id, status) VALUES ('a2', 'pending')`); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("WriteTx: err = %v, want boom", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// After a restart: v1 is not re-applied, v2 is applied on top.
	s, err = audit.Open(t.Context(), path, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(t.Context(), "approvals", []audit.Migration{approvalsV1, approvalsV2}); err != nil {
		t.Fatalf("Migrate v2: %v", err)
	}
	if err := s.Migrate(t.Context(), "approvals", []audit.Migration{approvalsV1, approvalsV2}); err != nil {
		t.Fatalf("Migrate again: %v", err)
	}
	rows, err := s.DB().QueryContext(t.Context(), `SELECT id, reason FROM approvals`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var id, reason string
		if err := rows.Scan(&id, &reason); err != nil {
			t.Fatal(err)
		}
		got = append(got, id+"/"+reason)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != "a1/migrated" {
		t.Errorf("approvals = %v, want [a1/migrated]", got)
	}
	var versions []int
	vrows, err := s.DB().QueryContext(t.Context(), `SELECT version FROM schema_migrations WHERE component = ? ORDER BY version`, "approvals")
	if err != nil {
		t.Fatal(err)
	}
	defer vrows.Close()
	for vrows.Next() {
		var v int
		if err := vrows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		versions = append(versions, v)
	}
	if len(versions) != 2 || versions[0] != 1 || versions[1] != 2 {
		t.Errorf("recorded versions %v, want [1 2]", versions)
	}
}

func TestMigrate_Refusals(t *testing.T) {
	s := openTemp(t, audit.Options{})
	if err := s.Migrate(t.Context(), "approvals", []audit.Migration{approvalsV1, approvalsV2}); err != nil {
		t.Fatal(err)
	}
	renamed := approvalsV1
	renamed.Name = "something else"
	broken := audit.Migration{Version: 1, Name: "bad", SQL: `CREATE TABLE oops (`}
	cases := []struct {
		name      string
		component string
		migs      []audit.Migration
		wantIs    error
	}{
		{"no component", "", []audit.Migration{approvalsV1}, nil},
		{"gap in versions", "other", []audit.Migration{approvalsV2}, nil},
		{"empty migration", "other", []audit.Migration{{Version: 1, Name: "empty"}}, nil},
		{"database is newer", "approvals", []audit.Migration{approvalsV1}, audit.ErrSchemaTooNew},
		{"rewritten migration", "approvals", []audit.Migration{renamed, approvalsV2}, nil},
		{"bad sql", "broken", []audit.Migration{broken}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Migrate(t.Context(), tc.component, tc.migs)
			if err == nil {
				t.Fatal("Migrate succeeded, want an error")
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("err = %v, want one wrapping %v", err, tc.wantIs)
			}
			t.Logf("refused: %v", err)
		})
	}
	// A failed migration leaves nothing behind and is retried next time.
	var n int
	if err := s.DB().QueryRowContext(t.Context(),
		`SELECT count(*) FROM schema_migrations WHERE component = 'broken'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("failed migration recorded: count %d, err %v", n, err)
	}
}

// TestOpen_NewerAuditSchema refuses a database written by a newer build.
func TestOpen_NewerAuditSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.db")
	s, err := audit.Open(t.Context(), path, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = s.WriteTx(t.Context(), func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (component, version, name, applied_at)
			VALUES ('audit', 999, 'from the future', '2099-01-01T00:00:00.000000000Z')`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = audit.Open(t.Context(), path, audit.Options{})
	if !errors.Is(err, audit.ErrSchemaTooNew) {
		t.Fatalf("Open: err = %v, want ErrSchemaTooNew", err)
	}
}
