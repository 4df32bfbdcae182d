package audit_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/audit"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

func TestOpen_BadPath(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "plain-file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(dir, "garbage.db")
	if err := os.WriteFile(garbage, []byte("this is not an SQLite database, just some bytes long enough to have a header......"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		path   string
		wantIs error // nil: only a non-nil error is required
	}{
		{"empty", "", nil},
		{"memory", ":memory:", nil},
		{"uri", "file:" + filepath.Join(dir, "a.db") + "?mode=ro", nil},
		{"query characters", filepath.Join(dir, "a?b.db"), nil},
		{"parent is a file", filepath.Join(file, "audit.db"), syscall.ENOTDIR},
		{"grandparent is a file", filepath.Join(file, "sub", "audit.db"), syscall.ENOTDIR},
		{"path is a directory", dir, syscall.EISDIR},
		{"not a database", garbage, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := audit.Open(t.Context(), tc.path, audit.Options{})
			if err == nil {
				s.Close()
				t.Fatalf("Open(%q) succeeded, want an error", tc.path)
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("Open(%q): err = %v, want one wrapping %v", tc.path, err, tc.wantIs)
			}
			t.Logf("Open(%q): %v", tc.path, err)
		})
	}
}

func TestOpen_UnwritableDirectory(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root ignores directory permissions; the ENOTDIR cases in TestOpen_BadPath cover the error path")
	}
	dir := filepath.Join(t.TempDir(), "ro")
	if err := os.Mkdir(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	_, err := audit.Open(t.Context(), filepath.Join(dir, "sub", "audit.db"), audit.Options{})
	if !errors.Is(err, fs.ErrPermission) {
		t.Fatalf("Open in a read-only directory: err = %v, want fs.ErrPermission", err)
	}
	_, err = audit.Open(t.Context(), filepath.Join(dir, "audit.db"), audit.Options{})
	if !errors.Is(err, fs.ErrPermission) {
		t.Fatalf("Open in a read-only directory: err = %v, want fs.ErrPermission", err)
	}
}

func TestOpen_Permissions(t *testing.T) {
	t.Run("new", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "data", "audit")
		path := filepath.Join(dir, "audit.db")
		s, err := audit.Open(t.Context(), path, audit.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		appendN(t, s, 1, minimal) // makes sure the -wal and -shm files exist
		wantMode(t, dir, fs.ModeDir|0o700)
		for _, f := range []string{path, path + "-wal", path + "-shm"} {
			wantMode(t, f, 0o600)
		}
	})
	t.Run("existing file is tightened", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "audit.db")
		if err := os.WriteFile(path, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, 0o644); err != nil { // umask may have masked it
			t.Fatal(err)
		}
		s, err := audit.Open(t.Context(), path, audit.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		wantMode(t, path, 0o600)
	})
}

func wantMode(t *testing.T, path string, want fs.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode() & (fs.ModeDir | fs.ModePerm); got != want {
		t.Errorf("%s: mode %v, want %v", path, got, want)
	}
}

func TestRecordsSurviveRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.db")
	s, err := audit.Open(t.Context(), path, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	first := appendN(t, s, 10, minimal)
	full := fullRecord()
	if err := s.Append(t.Context(), &full); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = audit.Open(t.Context(), path, audit.Options{})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	got := queryAll(t, s, audit.Query{})
	if len(got) != 11 {
		t.Fatalf("after reopen: %d records, want 11", len(got))
	}
	full.ID = got[0].ID
	if got[0].ID != first[9].ID+1 || got[0].RequestID != full.RequestID || got[0].Approval.DecidedBy != "approver:alice" {
		t.Errorf("after reopen: newest record %+v, want %+v", got[0], full)
	}
	// IDs keep increasing after a restart.
	next := appendN(t, s, 1, minimal)[0]
	if next.ID <= full.ID {
		t.Errorf("ID after reopen %d, want > %d", next.ID, full.ID)
	}
}

// TestAppendOnly shows that the triggers refuse UPDATE, DELETE and
// replacing inserts on the records table from any connection, including the
// store's own writer.
func TestAppendOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.db")
	s, err := audit.Open(t.Context(), path, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	appendN(t, s, 3, minimal)

	raw, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()

	stmts := []struct{ name, sql string }{
		{"update one", `UPDATE records SET outcome = 'ok', kind = 'tampered' WHERE id = 2`},
		{"update all", `UPDATE records SET session_id = 'x'`},
		{"delete one", `DELETE FROM records WHERE id = 1`},
		{"delete all", `DELETE FROM records`},
		{"insert or replace", `INSERT OR REPLACE INTO records (id, time, kind, outcome)
			SELECT id, time, 'tampered', 'ok' FROM records WHERE id = 3`},
		{"replace", `REPLACE INTO records (id, time, kind, outcome)
			VALUES (1, '2026-01-01T00:00:00.000000000Z', 'tampered', 'ok')`},
		{"upsert", `INSERT INTO records (id, time, kind, outcome)
			VALUES (2, '2026-01-01T00:00:00.000000000Z', 'x', 'ok')
			ON CONFLICT (id) DO UPDATE SET kind = 'tampered'`},
	}
	for _, st := range stmts {
		t.Run("raw connection/"+st.name, func(t *testing.T) {
			_, err := raw.ExecContext(t.Context(), st.sql)
			wantTriggerAbort(t, err)
		})
		t.Run("WriteTx/"+st.name, func(t *testing.T) {
			err := s.WriteTx(t.Context(), func(ctx context.Context, tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, st.sql)
				return err
			})
			wantTriggerAbort(t, err)
		})
	}
	got := queryAll(t, s, audit.Query{})
	if len(got) != 3 {
		t.Fatalf("%d records left, want 3", len(got))
	}
	for _, r := range got {
		if r.Kind != "run_code" || r.SessionID != "" {
			t.Errorf("record changed: %+v", r)
		}
	}
}

func wantTriggerAbort(t *testing.T, err error) {
	t.Helper()
	var se *sqlite.Error
	if !errors.As(err, &se) {
		t.Fatalf("err = %v, want a *sqlite.Error", err)
	}
	if se.Code() != sqlite3.SQLITE_CONSTRAINT_TRIGGER {
		t.Fatalf("err = %v (code %d), want SQLITE_CONSTRAINT_TRIGGER", err, se.Code())
	}
	t.Logf("refused: %v", err)
}

func TestDBIsReadOnly(t *testing.T) {
	s := openTemp(t, audit.Options{})
	appendN(t, s, 1, minimal)
	var n int
	if err := s.DB().QueryRowContext(t.Context(), `SELECT count(*) FROM records`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("count via DB: %d, %v; want 1, nil", n, err)
	}
	if _, err := s.DB().ExecContext(t.Context(), `CREATE TABLE sneaky (x)`); err == nil {
		t.Fatal("DB() accepted a write")
	}
}

// TestConcurrentAppend appends from 16 goroutines at once: every record
// must be stored once, with unique IDs that increase in each goroutine's
// own order (Append returns only after its record is committed).
func TestConcurrentAppend(t *testing.T) {
	const workers, each = 16, 200
	s := openTemp(t, audit.Options{})
	var wg sync.WaitGroup
	got := make([][]int64, workers)
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				rec := audit.Record{
					RequestID: fmt.Sprintf("w%d-%d", w, i), SessionID: fmt.Sprintf("sess-%d", w),
					Kind: "run_code", Outcome: audit.OutcomeOK,
				}
				if err := s.Append(context.Background(), &rec); err != nil {
					errs <- err
					return
				}
				got[w] = append(got[w], rec.ID)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	seen := make(map[int64]bool, workers*each)
	for w, list := range got {
		if !slices.IsSorted(list) {
			t.Errorf("worker %d: ids not increasing: %v", w, list)
		}
		for _, id := range list {
			if seen[id] {
				t.Fatalf("id %d assigned twice", id)
			}
			seen[id] = true
		}
	}
	all := queryAll(t, s, audit.Query{Limit: 1000})
	if len(all) != workers*each {
		t.Fatalf("stored %d records, want %d", len(all), workers*each)
	}
	for i, r := range all {
		if !seen[r.ID] {
			t.Fatalf("stored id %d was never returned by Append", r.ID)
		}
		if i > 0 && (r.ID >= all[i-1].ID || r.Time.After(all[i-1].Time)) {
			t.Fatalf("query order broken at %d: id %d (%v) after id %d (%v)", i, r.ID, r.Time, all[i-1].ID, all[i-1].Time)
		}
	}
	for w := range workers {
		page, err := s.Query(t.Context(), audit.Query{SessionID: fmt.Sprintf("sess-%d", w), Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Records) != each {
			t.Errorf("session %d: %d records, want %d", w, len(page.Records), each)
		}
	}
}

func TestAppendIgnoresCancellation(t *testing.T) {
	s := openTemp(t, audit.Options{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	rec := minimal(1)
	if err := s.Append(ctx, &rec); err != nil {
		t.Fatalf("Append with a cancelled context: %v; the record must still be written", err)
	}
	if got := queryAll(t, s, audit.Query{}); len(got) != 1 {
		t.Fatalf("%d records stored, want 1", len(got))
	}
}

func TestClose(t *testing.T) {
	s, err := audit.Open(t.Context(), filepath.Join(t.TempDir(), "audit.db"), audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Appends racing with Close either land or fail with ErrClosed.
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			rec := minimal(i)
			if err := s.Append(context.Background(), &rec); err != nil && !errors.Is(err, audit.ErrClosed) {
				t.Errorf("Append during Close: %v", err)
			}
		})
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	rec := minimal(1)
	if err := s.Append(t.Context(), &rec); !errors.Is(err, audit.ErrClosed) {
		t.Errorf("Append after Close: %v, want ErrClosed", err)
	}
	if _, err := s.Query(t.Context(), audit.Query{}); !errors.Is(err, audit.ErrClosed) {
		t.Errorf("Query after Close: %v, want ErrClosed", err)
	}
	err = s.WriteTx(t.Context(), func(context.Context, *sql.Tx) error { return nil })
	if !errors.Is(err, audit.ErrClosed) {
		t.Errorf("WriteTx after Close: %v, want ErrClosed", err)
	}
}

func TestQuery_MaxLimit(t *testing.T) {
	s := openTemp(t, audit.Options{MaxQueryLimit: 5})
	appendN(t, s, 8, minimal)
	for _, limit := range []int{0, 5, 6, 1000} {
		page, err := s.Query(t.Context(), audit.Query{Limit: limit})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Records) != 5 || page.NextCursor == 0 {
			t.Errorf("Limit %d with MaxQueryLimit 5: %d records, cursor %d; want 5 and a cursor", limit, len(page.Records), page.NextCursor)
		}
	}
}

// TestAppend_WriteTimeout holds the writer with a long WriteTx: Append gives
// up after Options.WriteTimeout, and the writer then drops the expired
// record instead of writing it behind the caller's back; the store goes on
// working.
func TestAppend_WriteTimeout(t *testing.T) {
	s := openTemp(t, audit.Options{WriteTimeout: 100 * time.Millisecond})
	held, release := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		err := s.WriteTx(context.Background(), func(context.Context, *sql.Tx) error {
			close(held)
			<-release
			return nil
		})
		if err != nil {
			t.Errorf("WriteTx: %v", err)
		}
	})
	<-held
	rec := minimal(1)
	if err := s.Append(t.Context(), &rec); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Append behind a held writer: err = %v, want DeadlineExceeded", err)
	}
	if rec.ID != 0 {
		t.Errorf("failed Append set ID %d", rec.ID)
	}
	close(release)
	wg.Wait()
	// The next Append must succeed: give it a budget a loaded machine
	// cannot exhaust (queue, writer goroutine, WAL fsync), instead of the
	// 100 ms that only the Append behind the held writer needed.
	audit.SetWriteTimeout(s, time.Minute)
	next := minimal(2)
	if err := s.Append(t.Context(), &next); err != nil {
		t.Fatalf("Append after the writer is free: %v", err)
	}
	if got := queryAll(t, s, audit.Query{}); len(got) != 1 || got[0].RequestID != "req-2" {
		t.Errorf("stored %+v, want only req-2", got)
	}
}
