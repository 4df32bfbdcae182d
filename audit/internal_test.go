package audit

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func openInternal(t *testing.T, opts Options) *SQLite {
	t.Helper()
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "audit.db"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func pragma(t *testing.T, db *sql.DB, name string) string {
	t.Helper()
	var v string
	if err := db.QueryRowContext(t.Context(), "PRAGMA "+name).Scan(&v); err != nil {
		t.Fatalf("PRAGMA %s: %v", name, err)
	}
	return v
}

func TestPragmas(t *testing.T) {
	s := openInternal(t, Options{BusyTimeout: 1500 * time.Millisecond})
	cases := []struct {
		db   string
		name string
		want string
	}{
		{"writer", "journal_mode", "wal"},
		{"writer", "synchronous", "2"}, // FULL
		{"writer", "foreign_keys", "1"},
		{"writer", "busy_timeout", "1500"},
		{"writer", "trusted_schema", "0"},
		{"writer", "query_only", "0"},
		{"writer", "journal_size_limit", "67108864"},
		{"reader", "journal_mode", "wal"},
		{"reader", "foreign_keys", "1"},
		{"reader", "busy_timeout", "1500"},
		{"reader", "query_only", "1"},
	}
	for _, tc := range cases {
		t.Run(tc.db+"/"+tc.name, func(t *testing.T) {
			var got string
			if tc.db == "writer" {
				// The writer connection is only touched under the token.
				if err := s.lockWriter(t.Context()); err != nil {
					t.Fatal(err)
				}
				got = pragma(t, s.w, tc.name)
				s.unlockWriter()
			} else {
				got = pragma(t, s.r, tc.name)
			}
			if got != tc.want {
				t.Errorf("PRAGMA %s = %q, want %q", tc.name, got, tc.want)
			}
		})
	}
}

// TestQueryPlans pins down that filtered queries walk an index in id order
// instead of scanning and sorting the table.
func TestQueryPlans(t *testing.T) {
	s := openInternal(t, Options{})
	cases := []struct {
		name      string
		q         Query
		wantIndex string
	}{
		{"newest", Query{Limit: 10}, ""},
		{"cursor", Query{Limit: 10, Before: 100}, ""},
		{"session", Query{SessionID: "s", Limit: 10}, "records_session_id_id"},
		{"session and cursor", Query{SessionID: "s", Before: 100, Limit: 10}, "records_session_id_id"},
		{"kind", Query{Kind: "run_code", Limit: 10}, "records_kind_id"},
		{"kind and cursor", Query{Kind: "run_code", Before: 100, Limit: 10}, "records_kind_id"},
		{"tenant", Query{Tenant: "t", Limit: 10}, "records_tenant_id"},
		{"tenant and cursor", Query{Tenant: "t", Before: 100, Limit: 10}, "records_tenant_id"},
		{"tenant and session", Query{Tenant: "t", SessionID: "s", Limit: 10}, "records_tenant_session_id_id"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stmt, args := buildSelect(tc.q)
			rows, err := s.r.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+stmt, args...)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			var plan []string
			for rows.Next() {
				var id, parent, notused int
				var detail string
				if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
					t.Fatal(err)
				}
				plan = append(plan, detail)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			p := strings.Join(plan, "; ")
			if strings.Contains(p, "TEMP B-TREE") {
				t.Errorf("plan sorts in a temp b-tree: %s", p)
			}
			if tc.wantIndex != "" && !strings.Contains(p, tc.wantIndex) {
				t.Errorf("plan does not use %s: %s", tc.wantIndex, p)
			}
			t.Logf("plan: %s", p)
		})
	}
}

// TestCommitBatch_BadRecordDoesNotFailOthers feeds the group-commit writer
// a batch in which one record violates a table constraint: the batch
// transaction fails, and the writer retries the others one by one.
func TestCommitBatch_BadRecordDoesNotFailOthers(t *testing.T) {
	s := openInternal(t, Options{})
	mk := func(r Record) *appendReq {
		return &appendReq{ctx: context.Background(), rec: &r, done: make(chan struct{})}
	}
	good1 := mk(Record{Kind: "run_code", Outcome: OutcomeOK, RequestID: "good1"})
	bad := mk(Record{Kind: "", Outcome: OutcomeOK, RequestID: "bad"}) // CHECK (kind <> '')
	good2 := mk(Record{Kind: "run_code", Outcome: OutcomeOK, RequestID: "good2"})
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	late := mk(Record{Kind: "run_code", Outcome: OutcomeOK, RequestID: "late"})
	late.ctx = expired

	s.commitBatch([]*appendReq{good1, bad, good2, late})
	for _, r := range []*appendReq{good1, bad, good2, late} {
		<-r.done
	}
	if good1.err != nil || good2.err != nil {
		t.Fatalf("good records failed: %v, %v", good1.err, good2.err)
	}
	if bad.err == nil || late.err == nil {
		t.Fatalf("bad or expired record did not fail: %v, %v", bad.err, late.err)
	}
	if good1.id <= 0 || good2.id <= good1.id || good1.time.IsZero() {
		t.Errorf("ids %d, %d, time %v", good1.id, good2.id, good1.time)
	}
	page, err := s.Query(t.Context(), Query{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Records) != 2 || page.Records[0].RequestID != "good2" || page.Records[1].RequestID != "good1" {
		t.Errorf("stored %+v, want good2 and good1", page.Records)
	}
}

// TestMigrateAddsTenant: a database written before tenants (audit schema
// version 1) is upgraded in place; its records keep every field, with an
// empty tenant, and new records carry theirs.
func TestMigrateAddsTenant(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.db")
	db, err := sql.Open("sqlite", dsn(path, time.Second, "journal_mode(WAL)"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, schemaMigrationsDDL); err != nil {
		t.Fatal(err)
	}
	if err := applyMigration(ctx, tx, auditComponent, auditMigrations[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO records (request_id, time, kind, session_id, principal, outcome)
		VALUES ('old', '2026-01-01T00:00:00.000000000Z', 'run_code', 'demo', 'agent:a', 'ok')`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Append(ctx, &Record{RequestID: "new", Kind: "run_code", Tenant: "team-a", SessionID: "demo", Outcome: "ok"}); err != nil {
		t.Fatal(err)
	}
	page, err := s.Query(ctx, Query{SessionID: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Records) != 2 || page.Records[0].Tenant != "team-a" || page.Records[1].RequestID != "old" ||
		page.Records[1].Tenant != "" || page.Records[1].Principal != "agent:a" {
		t.Fatalf("records after the upgrade: %+v", page.Records)
	}
	if page, _ := s.Query(ctx, Query{Tenant: "team-a"}); len(page.Records) != 1 || page.Records[0].RequestID != "new" {
		t.Fatalf("tenant filter: %+v", page.Records)
	}
	if err := s.Append(ctx, &Record{Kind: "x", Outcome: "ok"}); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations WHERE component = 'audit'`).Scan(&n); err != nil || n != len(auditMigrations) {
		t.Fatalf("schema_migrations: %d rows, %v", n, err)
	}
}

// TestCompleteKeepsWriterFull: a completion commits relaxed
// (synchronous=NORMAL), and the writer connection is FULL again afterwards,
// so the next record (a denial, a write-ahead record) is fsynced as before.
func TestCompleteKeepsWriterFull(t *testing.T) {
	s := openInternal(t, Options{})
	rec := &Record{Kind: "run_code", RequestID: "req_1", Outcome: OutcomeStarted}
	if err := s.Append(t.Context(), rec); err != nil {
		t.Fatal(err)
	}
	rec.Outcome = "ok"
	if err := s.Complete(t.Context(), rec); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if err := s.lockWriter(t.Context()); err != nil {
		t.Fatal(err)
	}
	got := pragma(t, s.w, "synchronous")
	s.unlockWriter()
	if got != "2" {
		t.Fatalf("writer synchronous after Complete = %q, want 2 (FULL)", got)
	}
	page, err := s.Query(t.Context(), Query{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if recs := page.Records; len(recs) != 1 || recs[0].Outcome != "ok" {
		t.Fatalf("records after Complete = %+v, want one with outcome ok", page.Records)
	}
}
