package audit_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/internal/pgtest"
)

// The tests in this file run against both Database drivers: what the
// gateway relies on must not depend on storage.driver.

// approvalsBoth is a component's history in both dialects, as package
// confirm writes it.
var approvalsBoth = []audit.Migration{
	{Version: 1, Name: "create approvals",
		SQL:      `CREATE TABLE approvals (id TEXT PRIMARY KEY, status TEXT NOT NULL) STRICT`,
		Postgres: `CREATE TABLE approvals (id TEXT PRIMARY KEY, status TEXT NOT NULL)`},
	{Version: 2, Name: "add reason",
		SQL:      `ALTER TABLE approvals ADD COLUMN reason TEXT NOT NULL DEFAULT ''`,
		Postgres: `ALTER TABLE approvals ADD COLUMN reason TEXT NOT NULL DEFAULT ''`,
		Func: func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `UPDATE approvals SET reason = 'migrated'`)
			return err
		}},
}

func TestDatabase_SharedTables(t *testing.T) {
	for name, open := range databases(t) {
		t.Run(name, func(t *testing.T) {
			db := open(t)
			ctx := t.Context()
			if err := db.Migrate(ctx, "approvals", approvalsBoth[:1]); err != nil {
				t.Fatalf("Migrate v1: %v", err)
			}
			insert := func(id string) func(ctx context.Context, tx *sql.Tx) error {
				return func(ctx context.Context, tx *sql.Tx) error {
					_, err := tx.ExecContext(ctx, db.Rebind(`INSERT INTO approvals (id, status) VALUES (?, ?)`), id, "pending")
					return err
				}
			}
			if err := db.WriteTx(ctx, insert("a1")); err != nil {
				t.Fatalf("WriteTx: %v", err)
			}
			boom := errors.New("boom")
			err := db.WriteTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
				if err := insert("a2")(ctx, tx); err != nil {
					return err
				}
				return boom
			})
			if !errors.Is(err, boom) {
				t.Fatalf("WriteTx: err = %v, want boom", err)
			}
			for range 2 { // applying again is a no-op
				if err := db.Migrate(ctx, "approvals", approvalsBoth); err != nil {
					t.Fatalf("Migrate v2: %v", err)
				}
			}
			var got []string
			rows, err := db.DB().QueryContext(ctx, db.Rebind(`SELECT id || '/' || reason FROM approvals WHERE status = ? ORDER BY id`), "pending")
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			for rows.Next() {
				var s string
				if err := rows.Scan(&s); err != nil {
					t.Fatal(err)
				}
				got = append(got, s)
			}
			if len(got) != 1 || got[0] != "a1/migrated" {
				t.Errorf("approvals = %v, want [a1/migrated] (a2 rolled back, v2's Func ran once)", got)
			}
			if err := db.Migrate(ctx, "approvals", approvalsBoth[:1]); !errors.Is(err, audit.ErrSchemaTooNew) {
				t.Errorf("Migrate with an older history: %v, want ErrSchemaTooNew", err)
			}
			renamed := append([]audit.Migration(nil), approvalsBoth...)
			renamed[0].Name = "rewritten"
			if err := db.Migrate(ctx, "approvals", renamed); err == nil {
				t.Error("Migrate accepted a rewritten migration")
			}
			if err := db.Ping(ctx); err != nil {
				t.Errorf("Ping: %v", err)
			}
		})
	}
}

// TestDatabase_AppendOnly: no UPDATE or DELETE of a record gets through
// the store's own transactions, on either driver.
func TestDatabase_AppendOnly(t *testing.T) {
	for name, open := range databases(t) {
		t.Run(name, func(t *testing.T) {
			db := open(t)
			appendN(t, db, 3, minimal)
			for _, stmt := range []string{
				`UPDATE records SET outcome = 'ok', kind = 'tampered' WHERE id = 2`,
				`UPDATE records SET session_id = 'x'`,
				`DELETE FROM records WHERE id = 1`,
				`DELETE FROM records`,
			} {
				err := db.WriteTx(t.Context(), func(ctx context.Context, tx *sql.Tx) error {
					_, err := tx.ExecContext(ctx, stmt)
					return err
				})
				if err == nil || !strings.Contains(err.Error(), "append-only") {
					t.Errorf("%s: err = %v, want the append-only refusal", stmt, err)
				}
			}
			got := queryAll(t, db, audit.Query{})
			if len(got) != 3 {
				t.Fatalf("%d records left, want 3", len(got))
			}
			for _, r := range got {
				if r.Kind != "run_code" || r.SessionID != "" {
					t.Errorf("record changed: %+v", r)
				}
			}
		})
	}
}

// TestDatabase_ConcurrentAppend: concurrent appends are all stored once
// with distinct IDs.
func TestDatabase_ConcurrentAppend(t *testing.T) {
	const workers, each = 8, 50
	for name, open := range databases(t) {
		t.Run(name, func(t *testing.T) {
			db := open(t)
			var wg sync.WaitGroup
			errs := make(chan error, workers*each)
			ids := make(chan int64, workers*each)
			for w := range workers {
				wg.Go(func() {
					for i := range each {
						rec := audit.Record{RequestID: fmt.Sprintf("w%d-%d", w, i), Kind: "run_code", Outcome: audit.OutcomeOK}
						if err := db.Append(context.Background(), &rec); err != nil {
							errs <- err
							return
						}
						ids <- rec.ID
					}
				})
			}
			wg.Wait()
			close(errs)
			close(ids)
			for err := range errs {
				t.Fatal(err)
			}
			seen := map[int64]bool{}
			for id := range ids {
				if seen[id] {
					t.Fatalf("id %d assigned twice", id)
				}
				seen[id] = true
			}
			if all := queryAll(t, db, audit.Query{Limit: 1000}); len(all) != workers*each {
				t.Fatalf("stored %d records, want %d", len(all), workers*each)
			}
		})
	}
}

// TestPostgres_ReplicasOpenTogether: replicas starting at once against one
// database each migrate it without tripping over each other, and share
// the records.
func TestPostgres_ReplicasOpenTogether(t *testing.T) {
	dsn := pgtest.Schema(t)
	const n = 3
	dbs := make([]*audit.Postgres, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { dbs[i], errs[i] = audit.OpenPostgres(t.Context(), dsn, audit.Options{}) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("replica %d: %v", i, err)
		}
		defer dbs[i].Close()
	}
	for i, db := range dbs {
		rec := minimal(i)
		if err := db.Append(t.Context(), &rec); err != nil {
			t.Fatal(err)
		}
	}
	if got := queryAll(t, dbs[0], audit.Query{}); len(got) != n {
		t.Errorf("replica 0 sees %d records, want %d", len(got), n)
	}
}

// TestPostgres_PasswordNeverLogged: neither the logs of a working store
// nor the error of a refused login show the DSN's password.
func TestPostgres_PasswordNeverLogged(t *testing.T) {
	dsn := pgtest.Schema(t)
	var logs bytes.Buffer
	db, err := audit.OpenPostgres(t.Context(), dsn, audit.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	const wrong = "Wr0ngPassw0rdXyz"
	_, err = audit.OpenPostgres(t.Context(), dsn+" password="+wrong, audit.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err == nil {
		t.Fatal("a wrong password was accepted")
	}
	pw := dsnPassword(t, dsn)
	for _, secret := range []string{pw, wrong} {
		if strings.Contains(logs.String(), secret) || strings.Contains(err.Error(), secret) {
			t.Errorf("password %q appears in logs %q or error %q", secret, logs.String(), err)
		}
	}
	if !strings.Contains(logs.String(), "dbname=") {
		t.Errorf("logs do not name the database: %s", logs.String())
	}
}

func dsnPassword(t *testing.T, dsn string) string {
	for _, f := range strings.Fields(dsn) {
		if v, ok := strings.CutPrefix(f, "password="); ok {
			return v
		}
	}
	t.Fatal("the test cluster's DSN has no password")
	return ""
}

// TestDatabase_ReopenKeepsRecords: records outlive the store.
func TestDatabase_ReopenKeepsRecords(t *testing.T) {
	dsn := pgtest.Schema(t)
	path := filepath.Join(t.TempDir(), "audit.db")
	for name, open := range map[string]func() (audit.Database, error){
		"sqlite":   func() (audit.Database, error) { return audit.Open(t.Context(), path, audit.Options{}) },
		"postgres": func() (audit.Database, error) { return audit.OpenPostgres(t.Context(), dsn, audit.Options{}) },
	} {
		t.Run(name, func(t *testing.T) {
			db, err := open()
			if err != nil {
				t.Fatal(err)
			}
			appendN(t, db, 2, minimal)
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			if db, err = open(); err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if got := queryAll(t, db, audit.Query{}); len(got) != 2 {
				t.Errorf("%d records after reopening, want 2", len(got))
			}
		})
	}
}

// TestDatabase_Prepare: a prepared statement is compiled once and kept
// (the same one for the same text), runs inside WriteTx's transactions,
// survives a transaction that rolled back, and fails after Close; on
// either driver.
func TestDatabase_Prepare(t *testing.T) {
	for name, open := range databases(t) {
		t.Run(name, func(t *testing.T) {
			db := open(t)
			if err := db.Migrate(t.Context(), "prepare-test", []audit.Migration{{Version: 1, Name: "kv",
				SQL: `CREATE TABLE prepare_kv (k TEXT PRIMARY KEY, v TEXT NOT NULL)`, Postgres: `CREATE TABLE prepare_kv (k TEXT PRIMARY KEY, v TEXT NOT NULL)`}}); err != nil {
				t.Fatal(err)
			}
			q := db.Rebind(`INSERT INTO prepare_kv (k, v) VALUES (?, ?)`)
			st, err := db.Prepare(t.Context(), q)
			if err != nil {
				t.Fatal(err)
			}
			if again, err := db.Prepare(t.Context(), q); err != nil || again != st {
				t.Fatalf("a second Prepare of the same text: %p %v, want the kept %p", again, err, st)
			}
			insert := func(k string, fail bool) error {
				return db.WriteTx(t.Context(), func(ctx context.Context, tx *sql.Tx) error {
					if _, err := tx.StmtContext(ctx, st).ExecContext(ctx, k, "v-"+k); err != nil {
						return err
					}
					if fail {
						return errors.New("roll back")
					}
					return nil
				})
			}
			for _, step := range []struct {
				k       string
				fail    bool
				wantErr bool
			}{{"a", false, false}, {"b", true, true}, {"a", false, true}, {"c", false, false}} {
				if err := insert(step.k, step.fail); (err != nil) != step.wantErr {
					t.Fatalf("insert %q (fail %v): %v, want error %v", step.k, step.fail, err, step.wantErr)
				}
			}
			var n int
			if err := db.DB().QueryRowContext(t.Context(), `SELECT COUNT(*) FROM prepare_kv`).Scan(&n); err != nil || n != 2 {
				t.Fatalf("%d rows (%v), want a and c", n, err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := db.Prepare(t.Context(), db.Rebind(`SELECT k FROM prepare_kv WHERE k = ?`)); err == nil {
				t.Error("Prepare after Close succeeded")
			}
		})
	}
}
