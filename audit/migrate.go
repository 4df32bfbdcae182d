package audit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// ErrSchemaTooNew is returned when the database holds migrations this build
// does not know: it was written by a newer gateway, and running an older one
// against it could misread or corrupt it.
var ErrSchemaTooNew = errors.New("audit: database schema is newer than this build")

// Migration is one forward-only schema change of one component. Migrations
// are numbered 1, 2, 3, ... per component, applied in order, each in its own
// transaction together with its row in the schema_migrations table. Once
// released a migration is never edited: a change is a new migration.
type Migration struct {
	Version int
	// Name is a short description. It is recorded with the version and must
	// not change afterwards; Migrate refuses a database whose recorded name
	// differs, since that means the migration was rewritten.
	Name string
	// SQL is executed as one Exec on SQLite; it may hold several
	// statements.
	SQL string
	// Postgres is the same change in PostgreSQL's dialect, executed as one
	// Exec by [Postgres.Migrate]. Both drivers number a component's
	// migrations alike, so a version means the same schema on either.
	Postgres string
	// Func, if set, runs after SQL in the same transaction, for changes
	// that SQL alone cannot express.
	Func func(ctx context.Context, tx *sql.Tx) error
}

// auditComponent is the component name of this package's own migrations.
const auditComponent = "audit"

const schemaMigrationsDDL = `CREATE TABLE IF NOT EXISTS schema_migrations (
	component  TEXT    NOT NULL,
	version    INTEGER NOT NULL,
	name       TEXT    NOT NULL,
	applied_at TEXT    NOT NULL,
	PRIMARY KEY (component, version)
) STRICT`

// auditMigrations is the records table's history. Append new entries; never
// edit old ones.
var auditMigrations = []Migration{
	{
		Version:  1,
		Name:     "create records",
		Postgres: pgRecordsV1,
		SQL: `
CREATE TABLE records (
	id              INTEGER PRIMARY KEY AUTOINCREMENT,
	request_id      TEXT    NOT NULL DEFAULT '',
	time            TEXT    NOT NULL,
	kind            TEXT    NOT NULL CHECK (kind <> ''),
	session_id      TEXT    NOT NULL DEFAULT '',
	principal       TEXT    NOT NULL DEFAULT '',
	language        TEXT    NOT NULL DEFAULT '',
	code_sha256     TEXT    NOT NULL DEFAULT '',
	code_bytes      INTEGER NOT NULL DEFAULT 0,
	risk_level      TEXT    NOT NULL DEFAULT '',
	risk_patterns   TEXT    CHECK (risk_patterns IS NULL OR json_valid(risk_patterns)),
	action          TEXT    NOT NULL DEFAULT '',
	executor        TEXT    NOT NULL DEFAULT '',
	reasons         TEXT    CHECK (reasons IS NULL OR json_valid(reasons)),
	policy_revision TEXT    NOT NULL DEFAULT '',
	approval        TEXT    CHECK (approval IS NULL OR json_valid(approval)),
	outcome         TEXT    NOT NULL CHECK (outcome <> ''),
	error_code      TEXT    NOT NULL DEFAULT '',
	exit_code       INTEGER,
	duration_ms     INTEGER NOT NULL DEFAULT 0,
	http_status     INTEGER NOT NULL DEFAULT 0,
	path            TEXT    NOT NULL DEFAULT '',
	bytes           INTEGER NOT NULL DEFAULT 0,
	detail          TEXT    CHECK (detail IS NULL OR json_valid(detail))
) STRICT;
CREATE INDEX records_session_id_id ON records (session_id, id);
CREATE INDEX records_kind_id ON records (kind, id);
CREATE TRIGGER records_no_update BEFORE UPDATE ON records
BEGIN
	SELECT RAISE(ABORT, 'audit records are append-only');
END;
CREATE TRIGGER records_no_delete BEFORE DELETE ON records
BEGIN
	SELECT RAISE(ABORT, 'audit records are append-only');
END;
-- INSERT OR REPLACE removes the conflicting row without firing DELETE
-- triggers (unless recursive_triggers is on), so refuse the insert itself.
CREATE TRIGGER records_no_replace BEFORE INSERT ON records
WHEN EXISTS (SELECT 1 FROM records WHERE id = NEW.id)
BEGIN
	SELECT RAISE(ABORT, 'audit records are append-only');
END;`,
	},
	{
		// Tenants (issue 14). Records written before have no tenant (''),
		// which GET /v1/audit?tenant= never matches. A plain column, so
		// the schema carries over to other stores as it is.
		Version:  2,
		Name:     "add tenant",
		Postgres: pgRecordsV2,
		SQL: `
ALTER TABLE records ADD COLUMN tenant TEXT NOT NULL DEFAULT '';
CREATE INDEX records_tenant_id ON records (tenant, id);
CREATE INDEX records_tenant_session_id_id ON records (tenant, session_id, id);`,
	},
	{
		// Write-ahead records and hash chains (issue 15): a record may be
		// written as 'started' before the work runs and completed once,
		// by an UPDATE that may change only its outcome fields and
		// completion_hash; every other update still aborts. See chain.go.
		Version:  3,
		Name:     "write-ahead and hash chain",
		Postgres: pgRecordsV3,
		SQL: `
ALTER TABLE records ADD COLUMN replica TEXT NOT NULL DEFAULT '';
ALTER TABLE records ADD COLUMN prev_hash TEXT NOT NULL DEFAULT '';
ALTER TABLE records ADD COLUMN hash TEXT NOT NULL DEFAULT '';
ALTER TABLE records ADD COLUMN completion_hash TEXT NOT NULL DEFAULT '';
CREATE INDEX records_replica_id ON records (replica, id);
CREATE INDEX records_started ON records (replica, id) WHERE outcome = 'started';
DROP TRIGGER records_no_update;
CREATE TRIGGER records_no_update BEFORE UPDATE ON records
WHEN OLD.outcome <> 'started' OR NEW.outcome = 'started'
  OR NEW.id IS NOT OLD.id OR NEW.request_id IS NOT OLD.request_id OR NEW.time IS NOT OLD.time
  OR NEW.kind IS NOT OLD.kind OR NEW.tenant IS NOT OLD.tenant OR NEW.session_id IS NOT OLD.session_id
  OR NEW.principal IS NOT OLD.principal OR NEW.language IS NOT OLD.language
  OR NEW.code_sha256 IS NOT OLD.code_sha256 OR NEW.code_bytes IS NOT OLD.code_bytes
  OR NEW.risk_level IS NOT OLD.risk_level OR NEW.risk_patterns IS NOT OLD.risk_patterns
  OR NEW.action IS NOT OLD.action OR NEW.policy_revision IS NOT OLD.policy_revision
  OR NEW.approval IS NOT OLD.approval OR NEW.path IS NOT OLD.path OR NEW.replica IS NOT OLD.replica
  OR NEW.prev_hash IS NOT OLD.prev_hash OR NEW.hash IS NOT OLD.hash
BEGIN
	SELECT RAISE(ABORT, 'audit records are append-only');
END;`,
	},
	{
		// Policy decisions join OPA's decision log (issue 32): the
		// decision's decision_id and the action its dryrun and warn
		// reasons would have led to. Both are header fields (chain.go,
		// hashed only when set, so older records verify as before), so
		// completing a started record may not change them.
		Version:  4,
		Name:     "add decision_id and would_be",
		Postgres: pgRecordsV4,
		SQL: `
ALTER TABLE records ADD COLUMN decision_id TEXT NOT NULL DEFAULT '';
ALTER TABLE records ADD COLUMN would_be TEXT NOT NULL DEFAULT '';
CREATE INDEX records_decision_id ON records (decision_id) WHERE decision_id <> '';
DROP TRIGGER records_no_update;
CREATE TRIGGER records_no_update BEFORE UPDATE ON records
WHEN OLD.outcome <> 'started' OR NEW.outcome = 'started'
  OR NEW.id IS NOT OLD.id OR NEW.request_id IS NOT OLD.request_id OR NEW.time IS NOT OLD.time
  OR NEW.kind IS NOT OLD.kind OR NEW.tenant IS NOT OLD.tenant OR NEW.session_id IS NOT OLD.session_id
  OR NEW.principal IS NOT OLD.principal OR NEW.language IS NOT OLD.language
  OR NEW.code_sha256 IS NOT OLD.code_sha256 OR NEW.code_bytes IS NOT OLD.code_bytes
  OR NEW.risk_level IS NOT OLD.risk_level OR NEW.risk_patterns IS NOT OLD.risk_patterns
  OR NEW.action IS NOT OLD.action OR NEW.policy_revision IS NOT OLD.policy_revision
  OR NEW.approval IS NOT OLD.approval OR NEW.path IS NOT OLD.path OR NEW.replica IS NOT OLD.replica
  OR NEW.prev_hash IS NOT OLD.prev_hash OR NEW.hash IS NOT OLD.hash
  OR NEW.decision_id IS NOT OLD.decision_id OR NEW.would_be IS NOT OLD.would_be
BEGIN
	SELECT RAISE(ABORT, 'audit records are append-only');
END;`,
	},
}

// Migrate brings component's tables up to date by applying, in order, the
// migrations in migs that the database has not recorded yet. Open runs the
// audit package's own migrations; a package that keeps state in the same
// database calls Migrate once at start with its own component name and then
// uses DB for reads and WriteTx for writes.
//
// migs must be numbered 1..n without gaps. Migrate fails with
// ErrSchemaTooNew if the database has a version above n, and fails if an
// applied version's recorded name differs from migs.
func (s *SQLite) Migrate(ctx context.Context, component string, migs []Migration) error {
	if err := checkMigrations(component, migs, func(m Migration) string { return m.SQL }); err != nil {
		return err
	}
	var applied map[int]string
	err := s.WriteTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, schemaMigrationsDDL); err != nil {
			return fmt.Errorf("create schema_migrations: %w", err)
		}
		var err error
		applied, err = appliedMigrations(ctx, tx, component, s.Rebind)
		return err
	})
	if err != nil {
		return fmt.Errorf("audit: migrate %s: %w", component, err)
	}
	if err := checkApplied(component, migs, applied); err != nil {
		return err
	}
	for _, m := range migs {
		if _, ok := applied[m.Version]; ok {
			continue
		}
		if err := s.WriteTx(ctx, func(ctx context.Context, tx *sql.Tx) error { return applyMigration(ctx, tx, component, m) }); err != nil {
			return fmt.Errorf("audit: migrate %s to version %d (%s): %w", component, m.Version, m.Name, err)
		}
		s.log.InfoContext(ctx, "applied schema migration", "component", component, "version", m.Version, "name", m.Name)
	}
	return nil
}

func appliedMigrations(ctx context.Context, tx *sql.Tx, component string, rebind func(string) string) (map[int]string, error) {
	rows, err := tx.QueryContext(ctx, rebind(`SELECT version, name FROM schema_migrations WHERE component = ?`), component)
	if err != nil {
		return nil, fmt.Errorf("read schema_migrations: %w", err)
	}
	defer rows.Close()
	applied := make(map[int]string)
	for rows.Next() {
		var (
			v    int
			name string
		)
		if err := rows.Scan(&v, &name); err != nil {
			return nil, fmt.Errorf("read schema_migrations: %w", err)
		}
		applied[v] = name
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read schema_migrations: %w", err)
	}
	return applied, nil
}

func applyMigration(ctx context.Context, tx *sql.Tx, component string, m Migration) error {
	// A concurrent Migrate of the same component may have got here first.
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations WHERE component = ? AND version = ?`,
		component, m.Version).Scan(&n); err != nil {
		return err
	}
	if n > 0 {
		return nil
	}
	if m.SQL != "" {
		if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
			return err
		}
	}
	if m.Func != nil {
		if err := m.Func(ctx, tx); err != nil {
			return err
		}
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (component, version, name, applied_at) VALUES (?, ?, ?, ?)`,
		component, m.Version, m.Name, formatTime(time.Now()))
	return err
}

// checkMigrations checks that migs are numbered 1..n and none is empty in
// the dialect sqlOf picks.
func checkMigrations(component string, migs []Migration, sqlOf func(Migration) string) error {
	if component == "" {
		return errors.New("audit: migrate: empty component name")
	}
	for i, m := range migs {
		if m.Version != i+1 {
			return fmt.Errorf("audit: migrate %s: migration %d has version %d, want %d", component, i, m.Version, i+1)
		}
		if sqlOf(m) == "" && m.Func == nil {
			return fmt.Errorf("audit: migrate %s: migration %d is empty", component, m.Version)
		}
	}
	return nil
}

// checkApplied refuses a database ahead of this build or whose recorded
// migration names differ from migs (a rewritten migration).
func checkApplied(component string, migs []Migration, applied map[int]string) error {
	for v, name := range applied {
		if v > len(migs) {
			return fmt.Errorf("%w: %s is at version %d, this build knows %d", ErrSchemaTooNew, component, v, len(migs))
		}
		if want := migs[v-1].Name; name != want {
			return fmt.Errorf("audit: migrate %s: version %d was applied as %q but is now %q", component, v, name, want)
		}
	}
	return nil
}
