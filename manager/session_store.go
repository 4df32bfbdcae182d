package manager

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sandgate/sandgate/audit"
)

// SessionDB is the database session records live in: the audit database
// (*audit.SQLite or *audit.Postgres), as for approvals. On PostgreSQL every
// replica of a fleet reads the same records, so a session's labels, times
// and what it held survive the replica that served it.
type SessionDB interface {
	Migrate(ctx context.Context, component string, migs []audit.Migration) error
	DB() *sql.DB
	WriteTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error
	Rebind(query string) string
}

// sessionComponent names the records' migrations in schema_migrations.
const sessionComponent = "sessions"

// sessionMigrations is the session records' history. Append; never edit.
//
// A record holds what a session is (its key, tenant, state, labels,
// metadata and timeouts) and where its state lives (the replica, and what
// holds state there: "kernel", "browser", an executor's warm state), never
// code. held is what this replica's processes hold; lost is what a
// replica that adopted the session (or this one, restarted) found held by
// a process that is gone, until a client has been told.
var sessionMigrations = []audit.Migration{{
	Version:  1,
	Name:     "create session records",
	SQL:      strings.Replace(strings.ReplaceAll(sessionRecordsV1, "BIGINT", "INTEGER"), ");", ") STRICT;", 1) + ";",
	Postgres: sessionRecordsV1 + ";",
}, {
	// snapshot is what a pause must keep of the session ("memory" routes
	// its stateful cells where memory is kept; snapshot_route.go).
	Version:  2,
	Name:     "session snapshot requirement",
	SQL:      `ALTER TABLE session_records ADD COLUMN snapshot TEXT NOT NULL DEFAULT ''`,
	Postgres: `ALTER TABLE session_records ADD COLUMN snapshot TEXT NOT NULL DEFAULT ''`,
}}

const sessionRecordsV1 = `CREATE TABLE session_records (
	key            TEXT PRIMARY KEY,
	tenant         TEXT NOT NULL,
	name           TEXT NOT NULL,
	state          TEXT NOT NULL,
	labels         TEXT NOT NULL DEFAULT '{}',
	metadata       TEXT NOT NULL DEFAULT '{}',
	front_end      TEXT NOT NULL DEFAULT '',
	client         TEXT NOT NULL DEFAULT '',
	created_at     TEXT NOT NULL,
	expires_at     TEXT NOT NULL DEFAULT '',
	idle_timeout_ms BIGINT NOT NULL DEFAULT 0,
	replica        TEXT NOT NULL DEFAULT '',
	held           TEXT NOT NULL DEFAULT '[]',
	lost           TEXT NOT NULL DEFAULT '[]',
	told           TEXT NOT NULL DEFAULT '[]',
	moved_from     TEXT NOT NULL DEFAULT '',
	moved_at       TEXT NOT NULL DEFAULT ''
);
CREATE INDEX session_records_tenant ON session_records (tenant);
CREATE INDEX session_records_replica ON session_records (replica, state)`

// sessionStore reads and writes session records. A nil *sessionStore
// keeps nothing (a manager wired without a database, in unit tests): the
// manager's own cache is then the only copy.
type sessionStore struct{ db SessionDB }

func openSessionStore(ctx context.Context, db SessionDB) (*sessionStore, error) {
	if db == nil {
		return nil, nil
	}
	if err := db.Migrate(ctx, sessionComponent, sessionMigrations); err != nil {
		return nil, fmt.Errorf("manager: session records: %w", err)
	}
	return &sessionStore{db: db}, nil
}

const timeLayout = "2006-01-02T15:04:05.000000000Z07:00"

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(timeLayout)
}

func parseTime(s string) time.Time {
	t, _ := time.Parse(timeLayout, s)
	return t
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

const recordColumns = `key, tenant, name, state, labels, metadata, front_end, client, created_at, expires_at,
	idle_timeout_ms, replica, held, lost, told, moved_from, moved_at, snapshot`

// load reads key's record; ok is false when there is none.
func (s *sessionStore) load(ctx context.Context, key string) (rec sessionRecord, ok bool, err error) {
	if s == nil {
		return rec, false, nil
	}
	row := s.db.DB().QueryRowContext(ctx, s.db.Rebind(`SELECT `+recordColumns+` FROM session_records WHERE key = ?`), key)
	rec, err = scanRecord(row)
	if errors.Is(err, sql.ErrNoRows) {
		return rec, false, nil
	}
	if err != nil {
		return rec, false, fmt.Errorf("manager: read a session record: %w", err)
	}
	return rec, true, nil
}

type scanner interface{ Scan(dest ...any) error }

func scanRecord(row scanner) (sessionRecord, error) {
	var r sessionRecord
	var labels, meta, created, expires, held, lost, told, movedAt string
	var idle int64
	err := row.Scan(&r.Key, &r.Tenant, &r.Name, &r.State, &labels, &meta, &r.FrontEnd, &r.Client, &created, &expires,
		&idle, &r.Replica, &held, &lost, &told, &r.MovedFrom, &movedAt, &r.Snapshot)
	if err != nil {
		return r, err
	}
	_ = json.Unmarshal([]byte(labels), &r.Labels)
	_ = json.Unmarshal([]byte(meta), &r.Metadata)
	_ = json.Unmarshal([]byte(held), &r.Held)
	_ = json.Unmarshal([]byte(lost), &r.Lost)
	_ = json.Unmarshal([]byte(told), &r.Told)
	r.CreatedAt, r.ExpiresAt, r.MovedAt = parseTime(created), parseTime(expires), parseTime(movedAt)
	r.IdleTimeout = time.Duration(idle) * time.Millisecond
	return r, nil
}

// save writes rec whole (insert or replace).
func (s *sessionStore) save(ctx context.Context, rec sessionRecord) error {
	if s == nil {
		return nil
	}
	return s.write(ctx, s.db.WriteTx, rec)
}

// write upserts rec in a transaction of writeTx.
func (s *sessionStore) write(ctx context.Context, writeTx func(context.Context, func(context.Context, *sql.Tx) error) error, rec sessionRecord) error {
	return writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, s.db.Rebind(`INSERT INTO session_records (`+recordColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (key) DO UPDATE SET tenant = excluded.tenant, name = excluded.name, state = excluded.state,
			labels = excluded.labels, metadata = excluded.metadata, front_end = excluded.front_end,
			client = excluded.client, created_at = excluded.created_at, expires_at = excluded.expires_at,
			idle_timeout_ms = excluded.idle_timeout_ms, replica = excluded.replica, held = excluded.held,
			lost = excluded.lost, told = excluded.told, moved_from = excluded.moved_from, moved_at = excluded.moved_at,
			snapshot = excluded.snapshot`),
			rec.Key, rec.Tenant, rec.Name, rec.State, jsonText(nonNilMap(rec.Labels)), jsonText(nonNilMap(rec.Metadata)),
			rec.FrontEnd, rec.Client, fmtTime(rec.CreatedAt), fmtTime(rec.ExpiresAt), rec.IdleTimeout.Milliseconds(),
			rec.Replica, jsonText(nonNilSlice(rec.Held)), jsonText(nonNilSlice(rec.Lost)), jsonText(nonNilSlice(rec.Told)), rec.MovedFrom, fmtTime(rec.MovedAt), rec.Snapshot)
		if err != nil {
			return fmt.Errorf("manager: write a session record: %w", err)
		}
		return nil
	})
}

// relaxedWriter is a database that can commit without waiting for the
// disk (audit.SQLite.RelaxedWriteTx).
type relaxedWriter interface {
	RelaxedWriteTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error
}

// create writes a new session's record, off the disk's path where the
// database allows: a session create answered from the page cache, whose
// record the next audited write (its first run's write-ahead record,
// synchronous=FULL) makes durable with it. Measured on the reference VM
// under load (bench -only ttfo-subprocess, n=30): the FULL commit took
// 0.8 ms p50 and up to 17 ms of a create's path.
func (s *sessionStore) create(ctx context.Context, rec sessionRecord) error {
	if s == nil {
		return nil
	}
	if r, ok := s.db.(relaxedWriter); ok {
		return s.write(ctx, r.RelaxedWriteTx, rec)
	}
	return s.save(ctx, rec)
}

// remove deletes key's record.
func (s *sessionStore) remove(ctx context.Context, key string) error {
	if s == nil {
		return nil
	}
	return s.db.WriteTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, s.db.Rebind(`DELETE FROM session_records WHERE key = ?`), key)
		if err != nil {
			return fmt.Errorf("manager: delete a session record: %w", err)
		}
		return nil
	})
}

// orphaned turns what replica's records say its processes held into what
// they lost: called at start, when no process of this replica holds
// anything yet (a kill -9 or a crash left the records saying otherwise).
// A paused session's hold is its checkpoint on disk, not a process: it is
// kept, and a resume that cannot restore it marks it lost then (pause.go).
func (s *sessionStore) orphaned(ctx context.Context, replica string) (int64, error) {
	if s == nil {
		return 0, nil
	}
	var n int64
	err := s.db.WriteTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.db.Rebind(`UPDATE session_records SET lost = held, told = '[]', held = '[]', moved_from = replica, moved_at = ?
		WHERE replica = ? AND held <> '[]' AND state <> ?`), fmtTime(time.Now()), replica, StatePaused)
		if err != nil {
			return fmt.Errorf("manager: mark lost session state: %w", err)
		}
		n, _ = res.RowsAffected()
		return nil
	})
	return n, err
}

// list reads every record of tenant ("" for every tenant).
func (s *sessionStore) list(ctx context.Context, tenant string) (map[string]sessionRecord, error) {
	out := map[string]sessionRecord{}
	if s == nil {
		return out, nil
	}
	q, args := `SELECT `+recordColumns+` FROM session_records`, []any{}
	if tenant != "" {
		q, args = q+` WHERE tenant = ?`, append(args, tenant)
	}
	rows, err := s.db.DB().QueryContext(ctx, s.db.Rebind(q), args...)
	if err != nil {
		return nil, fmt.Errorf("manager: list session records: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, fmt.Errorf("manager: list session records: %w", err)
		}
		out[r.Key] = r
	}
	return out, rows.Err()
}

// expirable reads the active records that have a TTL or an idle
// timeout: those replica serves, or, with others, every other
// replica's. What the expiry loop looks at.
func (s *sessionStore) expirable(ctx context.Context, replica string, others bool) ([]sessionRecord, error) {
	if s == nil {
		return nil, nil
	}
	op := "="
	if others {
		op = "<>"
	}
	rows, err := s.db.DB().QueryContext(ctx, s.db.Rebind(`SELECT `+recordColumns+` FROM session_records
	WHERE replica `+op+` ? AND state = 'active' AND (expires_at <> '' OR idle_timeout_ms > 0)`), replica)
	if err != nil {
		return nil, fmt.Errorf("manager: list expirable sessions: %w", err)
	}
	defer rows.Close()
	var out []sessionRecord
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, fmt.Errorf("manager: list expirable sessions: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func nonNilMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func nonNilSlice(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
