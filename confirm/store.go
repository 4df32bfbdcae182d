package confirm

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sandgate/sandgate/audit"
)

// Store is the database the hub keeps its approvals in: the audit database
// (*audit.SQLite or *audit.Postgres, see audit.Database). The hub creates
// its own table through Migrate and writes it only through WriteTx, so on
// SQLite it never contends with audit appends for the write lock. Queries
// are written with '?' placeholders and passed through Rebind.
type Store interface {
	Migrate(ctx context.Context, component string, migs []audit.Migration) error
	DB() *sql.DB
	WriteTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error
	Rebind(query string) string
	// Driver is audit.DriverSQLite or audit.DriverPostgres; on PostgreSQL
	// every write also notifies the other replicas (NotifyChannel).
	Driver() string
}

// NotifyChannel is the PostgreSQL channel on which every approval write
// announces the approval's id (only the id: replicas read the row), in the
// writing transaction, so a listener never hears of a row it cannot read.
const NotifyChannel = "sandgate_approvals"

// storeComponent names the hub's migrations in schema_migrations.
const storeComponent = "confirm"

// storeMigrations is the approvals table's history. Append; never edit.
//
// The table holds what binds and explains an approval, never the code
// itself (like audit records, it keeps only the code's SHA-256): a pending
// row exists so that a restart can resolve it, not to re-show it.
//
// Triggers make a row single-use: once its status leaves 'pending' it can
// never change again, and the binding columns (request, session, code
// digest, digest, times) can never change at all. The hub already enforces
// first-decision-wins in memory; the triggers make the database say the
// same whatever code path writes it.
var storeMigrations = []audit.Migration{{
	Version:  1,
	Name:     "create approvals",
	Postgres: pgApprovalsV1,
	SQL: approvalsTableV1 + ` STRICT;
CREATE INDEX approvals_status ON approvals (status);
CREATE INDEX approvals_decided_at ON approvals (decided_at);
CREATE TRIGGER approvals_single_use BEFORE UPDATE ON approvals
WHEN OLD.status <> 'pending'
  OR NEW.id IS NOT OLD.id OR NEW.request_id IS NOT OLD.request_id OR NEW.session_id IS NOT OLD.session_id
  OR NEW.language IS NOT OLD.language OR NEW.code_sha256 IS NOT OLD.code_sha256 OR NEW.digest IS NOT OLD.digest
  OR NEW.requested_at IS NOT OLD.requested_at OR NEW.deadline IS NOT OLD.deadline
BEGIN
	SELECT RAISE(ABORT, 'an approval is single-use and bound to its request');
END;
CREATE TRIGGER approvals_no_replace BEFORE INSERT ON approvals
WHEN EXISTS (SELECT 1 FROM approvals WHERE id = NEW.id)
BEGIN
	SELECT RAISE(ABORT, 'approval ids are never reused');
END;`,
}, {
	// Tenants (issue 14): the tenant that owns the request's session, a
	// plain column (rows written before have ''), bound like the session:
	// the single-use trigger is recreated with it among the binding
	// columns.
	Version:  2,
	Name:     "add tenant",
	Postgres: pgApprovalsV2,
	SQL: `
ALTER TABLE approvals ADD COLUMN tenant TEXT NOT NULL DEFAULT '';
CREATE INDEX approvals_tenant_decided_at ON approvals (tenant, decided_at);
DROP TRIGGER approvals_single_use;
CREATE TRIGGER approvals_single_use BEFORE UPDATE ON approvals
WHEN OLD.status <> 'pending'
  OR NEW.id IS NOT OLD.id OR NEW.request_id IS NOT OLD.request_id OR NEW.session_id IS NOT OLD.session_id
  OR NEW.tenant IS NOT OLD.tenant
  OR NEW.language IS NOT OLD.language OR NEW.code_sha256 IS NOT OLD.code_sha256 OR NEW.digest IS NOT OLD.digest
  OR NEW.requested_at IS NOT OLD.requested_at OR NEW.deadline IS NOT OLD.deadline
BEGIN
	SELECT RAISE(ABORT, 'an approval is single-use and bound to its request');
END;`,
}, {
	// Replicas (issue 15): the replica holding the waiting request, so
	// that a replica's start-up sweep interrupts only its own leftovers.
	// Not a binding column: a later sweep may hand it over.
	Version: 3,
	Name:    "add replica",
	Postgres: `ALTER TABLE approvals ADD COLUMN replica TEXT NOT NULL DEFAULT '';
CREATE INDEX approvals_pending_replica ON approvals (replica) WHERE status = 'pending';`,
	SQL: `ALTER TABLE approvals ADD COLUMN replica TEXT NOT NULL DEFAULT '';
CREATE INDEX approvals_pending_replica ON approvals (replica) WHERE status = 'pending';`,
}, {
	// Egress approvals (issue 17): the kind ('run' for every row before),
	// the host:port an egress approval is about (bound through the
	// digest), and the scope an approval was given ('once' or
	// 'session'), written with the decision.
	Version:  4,
	Name:     "add kind, target and scope",
	Postgres: approvalsV4,
	SQL:      approvalsV4,
}}

const approvalsV4 = `ALTER TABLE approvals ADD COLUMN kind TEXT NOT NULL DEFAULT 'run';
ALTER TABLE approvals ADD COLUMN target TEXT NOT NULL DEFAULT '';
ALTER TABLE approvals ADD COLUMN scope TEXT NOT NULL DEFAULT '';`

const timeLayout = "2006-01-02T15:04:05.000000000Z07:00"

func fmtTime(t time.Time) string { return t.UTC().Format(timeLayout) }

func parseTime(s string) time.Time {
	t, _ := time.Parse(timeLayout, s)
	return t
}

// errNotPending is returned by resolveRow when the row was already resolved
// (by this process or, after a restart, by the interruption sweep).
var errNotPending = errors.New("confirm: approval is not pending")

type store struct {
	db      Store
	replica string
}

func openStore(ctx context.Context, db Store, replica string) (*store, error) {
	if err := db.Migrate(ctx, storeComponent, storeMigrations); err != nil {
		return nil, err
	}
	return &store{db: db, replica: replica}, nil
}

// notify announces id to the other replicas, inside tx (PostgreSQL only:
// SQLite is one process).
func (s *store) notify(ctx context.Context, tx *sql.Tx, id string) error {
	if s.db.Driver() != audit.DriverPostgres {
		return nil
	}
	_, err := tx.ExecContext(ctx, `SELECT pg_notify($1, $2)`, NotifyChannel, id)
	return err
}

func (s *store) insert(ctx context.Context, v *View) error {
	return s.db.WriteTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, s.db.Rebind(`INSERT INTO approvals (id, request_id, tenant, session_id, language, code_sha256,
	digest, risk_level, executor, policy_revision, principal, status, requested_at, deadline, replica, kind, target)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?, ?)`),
			v.ID, v.RequestID, v.Tenant, v.SessionID, v.Language, v.CodeSHA256, v.Digest, v.RiskLevel, v.Executor,
			v.PolicyRevision, v.Principal, fmtTime(v.RequestedAt), fmtTime(v.Deadline), s.replica, v.Kind, v.Target)
		if err != nil {
			return err
		}
		return s.notify(ctx, tx, v.ID)
	})
}

// resolveRow moves a pending row to its final status. The WHERE clause makes
// it first-writer-wins in the database too: errNotPending if it was not
// pending.
func (s *store) resolveRow(ctx context.Context, v *View) error {
	return s.db.WriteTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.db.Rebind(`UPDATE approvals SET status = ?, decided_by = ?, reason = ?, decided_at = ?, scope = ?
	WHERE id = ? AND status = 'pending' AND digest = ?`),
			v.Status, v.DecidedBy, v.Reason, fmtTime(v.DecidedAt), v.Scope, v.ID, v.Digest)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n != 1 {
			return errNotPending
		}
		return s.notify(ctx, tx, v.ID)
	})
}

// decideRemote is a human decision on an approval another replica holds:
// the same first-writer-wins update, also refused once the deadline has
// passed (the holder's timer may not have written its timeout yet). The
// notification in the same transaction releases the holder.
func (s *store) decideRemote(ctx context.Context, v *View) error {
	return s.db.WriteTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.db.Rebind(`UPDATE approvals SET status = ?, decided_by = ?, reason = ?, decided_at = ?, scope = ?
	WHERE id = ? AND status = 'pending' AND digest = ? AND deadline > ?`),
			v.Status, v.DecidedBy, v.Reason, fmtTime(v.DecidedAt), v.Scope, v.ID, v.Digest, fmtTime(v.DecidedAt))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n != 1 {
			return errNotPending
		}
		return s.notify(ctx, tx, v.ID)
	})
}

// interruptAll resolves this replica's pending rows as interrupted: rows a
// previous run of it left behind when it stopped without resolving them (a
// crash, a kill -9). Rows of other replicas sharing the database are
// theirs; rows without a replica predate replicas and were written by the
// lone process this one replaces.
func (s *store) interruptAll(ctx context.Context, now time.Time, reason string) (int64, error) {
	return s.interruptOf(ctx, s.replica, now, reason)
}

// interruptOf resolves replica's pending rows (and those without a
// replica) as interrupted, announcing each.
func (s *store) interruptOf(ctx context.Context, replica string, now time.Time, reason string) (int64, error) {
	var n int64
	err := s.db.WriteTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, s.db.Rebind(`UPDATE approvals SET status = 'interrupted', decided_by = '', reason = ?, decided_at = ?
	WHERE status = 'pending' AND replica IN (?, '') RETURNING id`), reason, fmtTime(now), replica)
		if err != nil {
			return err
		}
		var ids []string
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			ids = append(ids, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, id := range ids {
			if err := s.notify(ctx, tx, id); err != nil {
				return err
			}
		}
		n = int64(len(ids))
		return nil
	})
	return n, err
}

const viewColumns = `id, request_id, tenant, session_id, language, code_sha256, digest, risk_level, executor,
	policy_revision, principal, status, requested_at, deadline, decided_by, reason, decided_at, kind, target, scope`

func scanView(sc interface{ Scan(...any) error }) (View, error) {
	var (
		v                   View
		requested, deadline string
		decided             sql.NullString
	)
	err := sc.Scan(&v.ID, &v.RequestID, &v.Tenant, &v.SessionID, &v.Language, &v.CodeSHA256, &v.Digest, &v.RiskLevel,
		&v.Executor, &v.PolicyRevision, &v.Principal, &v.Status, &requested, &deadline, &v.DecidedBy, &v.Reason, &decided,
		&v.Kind, &v.Target, &v.Scope)
	if err != nil {
		return View{}, err
	}
	v.RequestedAt, v.Deadline = parseTime(requested), parseTime(deadline)
	if decided.Valid {
		v.DecidedAt = parseTime(decided.String)
		v.TimeToDecideMS = v.DecidedAt.Sub(v.RequestedAt).Milliseconds()
	}
	return v, nil
}

func (s *store) get(ctx context.Context, id string) (View, error) {
	row := s.db.DB().QueryRowContext(ctx, s.db.Rebind(`SELECT `+viewColumns+` FROM approvals WHERE id = ?`), id)
	v, err := scanView(row)
	if errors.Is(err, sql.ErrNoRows) {
		return View{}, ErrNotFound
	}
	if err != nil {
		return View{}, fmt.Errorf("confirm: read approval: %w", err)
	}
	return v, nil
}

// recent returns up to limit resolved approvals, newest decision first;
// status "" means any resolved status, no tenants means every tenant.
func (s *store) recent(ctx context.Context, status string, tenants []string, limit int) ([]View, error) {
	q := `SELECT ` + viewColumns + ` FROM approvals WHERE status <> 'pending'`
	args := []any{}
	if status != "" {
		q += ` AND status = ?`
		args = append(args, status)
	}
	if len(tenants) > 0 {
		q += ` AND tenant IN (?` + strings.Repeat(`, ?`, len(tenants)-1) + `)`
		for _, t := range tenants {
			args = append(args, t)
		}
	}
	q += ` ORDER BY decided_at DESC, id DESC LIMIT ?`
	args = append(args, limit)
	rows, err := s.db.DB().QueryContext(ctx, s.db.Rebind(q), args...)
	if err != nil {
		return nil, fmt.Errorf("confirm: read approvals: %w", err)
	}
	defer rows.Close()
	out := []View{}
	for rows.Next() {
		v, err := scanView(rows)
		if err != nil {
			return nil, fmt.Errorf("confirm: read approvals: %w", err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("confirm: read approvals: %w", err)
	}
	return out, nil
}
