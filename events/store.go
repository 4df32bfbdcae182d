package events

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sandgate/sandgate/audit"
)

// component names this package's migrations in schema_migrations.
const component = "events"

// NotifyChannel is the PostgreSQL channel on which every append announces
// its event id (only the id: listeners read the rows).
const NotifyChannel = "sandgate_events"

// schemaV1 is migration 1 in both dialects: {int} is INTEGER on SQLite
// and BIGINT on PostgreSQL, {strict} is STRICT on SQLite. Times are
// fixed-width UTC text (timeLayout), so they compare as strings; leases
// are milliseconds since the epoch on the database's clock, so replicas
// with skewed clocks agree on who holds one.
const schemaV1 = `
CREATE TABLE events (
	id         {int}   PRIMARY KEY,
	type       TEXT    NOT NULL CHECK (type <> ''),
	tenant     TEXT    NOT NULL DEFAULT '',
	session_id TEXT    NOT NULL DEFAULT '',
	time       TEXT    NOT NULL,
	data       TEXT    NOT NULL
) {strict};
CREATE INDEX events_tenant_id ON events (tenant, id);
CREATE INDEX events_time ON events (time);
CREATE TABLE events_counter (
	one  {int} PRIMARY KEY CHECK (one = 1),
	last {int} NOT NULL
) {strict};
INSERT INTO events_counter (one, last) VALUES (1, 0);
CREATE TABLE webhook_endpoints (
	id                TEXT  PRIMARY KEY,
	tenant            TEXT  NOT NULL,
	url               TEXT  NOT NULL,
	delivered_through {int} NOT NULL,
	lease_owner       TEXT  NOT NULL DEFAULT '',
	lease_until       {int} NOT NULL DEFAULT 0,
	created_at        TEXT  NOT NULL
) {strict};
CREATE TABLE webhook_deliveries (
	endpoint         TEXT  NOT NULL,
	event_id         {int} NOT NULL,
	event_type       TEXT  NOT NULL,
	tenant           TEXT  NOT NULL,
	url              TEXT  NOT NULL,
	webhook_id       TEXT  NOT NULL,
	attempts         {int} NOT NULL,
	last_status      {int} NOT NULL DEFAULT 0,
	last_error       TEXT  NOT NULL DEFAULT '',
	first_attempt_at TEXT  NOT NULL,
	last_attempt_at  TEXT  NOT NULL,
	delivered_at     TEXT,
	next_attempt_at  TEXT,
	replica          TEXT  NOT NULL DEFAULT '',
	PRIMARY KEY (endpoint, event_id)
) {strict};
CREATE INDEX webhook_deliveries_event ON webhook_deliveries (event_id);
CREATE INDEX webhook_deliveries_tenant_event ON webhook_deliveries (tenant, event_id);
CREATE INDEX webhook_deliveries_last_attempt ON webhook_deliveries (last_attempt_at);`

func dialect(schema, intType, strict string) string {
	return strings.NewReplacer("{int}", intType, " {strict}", strict).Replace(schema)
}

// migrations is the history of this package's tables. Append; never edit.
var migrations = []audit.Migration{{
	Version:  1,
	Name:     "create events and webhook deliveries",
	SQL:      dialect(schemaV1, "INTEGER", " STRICT"),
	Postgres: dialect(schemaV1, "BIGINT", ""),
}}

const timeLayout = "2006-01-02T15:04:05.000000000Z07:00"

func fmtTime(t time.Time) string { return t.UTC().Format(timeLayout) }

func parseTime(s string) time.Time {
	t, _ := time.Parse(timeLayout, s)
	return t
}

// store holds the SQL of the log, written once with '?' placeholders and
// rebound for the driver.
type store struct {
	db audit.Database
	pg bool
	// nowMS is the database clock in milliseconds since the epoch, for
	// leases.
	nowMS string
}

func newStore(db audit.Database) *store {
	s := &store{db: db, pg: db.Driver() == audit.DriverPostgres}
	if s.pg {
		s.nowMS = `CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)`
	} else {
		s.nowMS = `CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)`
	}
	return s
}

// q rebinds query and puts the clock expression in place of {now}.
func (s *store) q(query string) string {
	return s.db.Rebind(strings.ReplaceAll(query, "{now}", s.nowMS))
}

// appendEvents stores evs (normalized), in order, in one transaction,
// and returns the last one's id. The counter row's lock, held to commit,
// serialises appends across replicas.
func (s *store) appendEvents(ctx context.Context, evs []Event) (int64, error) {
	next, err := s.db.Prepare(ctx, s.q(`UPDATE events_counter SET last = last + ? WHERE one = 1 RETURNING last`))
	if err != nil {
		return 0, err
	}
	insert, err := s.db.Prepare(ctx, s.q(`INSERT INTO events (id, type, tenant, session_id, time, data) VALUES (?, ?, ?, ?, ?, ?)`))
	if err != nil {
		return 0, err
	}
	var last int64
	err = s.db.WriteTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if err := tx.StmtContext(ctx, next).QueryRowContext(ctx, len(evs)).Scan(&last); err != nil {
			return fmt.Errorf("next id: %w", err)
		}
		ins := tx.StmtContext(ctx, insert)
		first := last - int64(len(evs)) + 1
		for i, ev := range evs {
			if _, err := ins.ExecContext(ctx, first+int64(i), ev.Type, ev.Tenant, ev.SessionID, fmtTime(ev.Time), string(ev.Data)); err != nil {
				return fmt.Errorf("insert: %w", err)
			}
		}
		if s.pg {
			if _, err := tx.ExecContext(ctx, `SELECT pg_notify($1, $2)`, NotifyChannel, fmt.Sprint(last)); err != nil {
				return fmt.Errorf("notify: %w", err)
			}
		}
		return nil
	})
	return last, err
}

// head is the highest committed id.
func (s *store) head(ctx context.Context) (int64, error) {
	var id int64
	err := s.db.DB().QueryRowContext(ctx, `SELECT last FROM events_counter WHERE one = 1`).Scan(&id)
	return id, err
}

const eventColumns = `id, type, tenant, session_id, time, data`

func scanEvents(rows *sql.Rows) ([]Event, error) {
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var (
			ev   Event
			at   string
			data string
		)
		if err := rows.Scan(&ev.ID, &ev.Type, &ev.Tenant, &ev.SessionID, &at, &data); err != nil {
			return nil, err
		}
		ev.Time, ev.Data = parseTime(at), []byte(data)
		out = append(out, ev)
	}
	return out, rows.Err()
}

// since reads up to limit events after id afterID, of tenant (all when
// allTenants).
func (s *store) since(ctx context.Context, allTenants bool, tenant string, afterID int64, limit int) ([]Event, error) {
	query, args := `SELECT `+eventColumns+` FROM events WHERE id > ?`, []any{afterID}
	if !allTenants {
		query += ` AND tenant = ?`
		args = append(args, tenant)
	}
	query += ` ORDER BY id LIMIT ?`
	args = append(args, limit)
	rows, err := s.db.DB().QueryContext(ctx, s.q(query), args...)
	if err != nil {
		return nil, err
	}
	return scanEvents(rows)
}

// pruneBatch bounds one DELETE, so that pruning a large backlog never
// holds the write lock for long.
const pruneBatch = 1000

// prune removes events and delivery records older than cutoff.
func (s *store) prune(ctx context.Context, cutoff time.Time) (int64, error) {
	c := fmtTime(cutoff)
	var total int64
	for _, query := range []string{
		`DELETE FROM events WHERE id IN (SELECT id FROM events WHERE time < ? ORDER BY id LIMIT ?)`,
		`DELETE FROM webhook_deliveries WHERE (endpoint, event_id) IN
	(SELECT endpoint, event_id FROM webhook_deliveries WHERE last_attempt_at < ? LIMIT ?)`,
	} {
		for {
			var n int64
			err := s.db.WriteTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
				res, err := tx.ExecContext(ctx, s.q(query), c, pruneBatch)
				if err != nil {
					return err
				}
				n, err = res.RowsAffected()
				return err
			})
			if err != nil {
				return total, err
			}
			total += n
			if n < pruneBatch {
				break
			}
		}
	}
	return total, nil
}

// addEndpoint registers ep if the database has not seen it, starting at
// the log's current end.
func (s *store) addEndpoint(ctx context.Context, ep *endpoint, now time.Time) error {
	return s.db.WriteTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, s.q(`INSERT INTO webhook_endpoints (id, tenant, url, delivered_through, created_at)
	SELECT ?, ?, ?, last, ? FROM events_counter WHERE one = 1
	ON CONFLICT (id) DO NOTHING`), ep.id, ep.tenant, ep.display, fmtTime(now))
		return err
	})
}

// releaseLeases gives up every lease replica holds (a clean stop, or on
// SQLite, a start: the previous process is gone).
func (s *store) releaseLeases(ctx context.Context, replica string, all bool) error {
	return s.db.WriteTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		query, args := `UPDATE webhook_endpoints SET lease_owner = '', lease_until = 0`, []any(nil)
		if !all {
			query += ` WHERE lease_owner = ?`
			args = append(args, replica)
		}
		_, err := tx.ExecContext(ctx, s.q(query), args...)
		return err
	})
}

// errLeaseLost: another replica took the endpoint over.
var errLeaseLost = errors.New("events: webhook lease taken over by another replica")

// acquire takes or renews the lease on endpoint id for replica and moves
// delivered_through up to through (the deliverer's scan position: every
// matching event up to it was delivered). It returns delivered_through,
// or errLeaseLost when another replica holds a live lease.
func (s *store) acquire(ctx context.Context, id, replica string, lease time.Duration, through int64) (int64, error) {
	var got int64
	err := s.db.WriteTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, s.q(`UPDATE webhook_endpoints SET lease_owner = ?, lease_until = {now} + ?,
	delivered_through = CASE WHEN delivered_through < ? THEN ? ELSE delivered_through END
	WHERE id = ? AND (lease_owner = ? OR lease_owner = '' OR lease_until < {now})
	RETURNING delivered_through`), replica, lease.Milliseconds(), through, through, id, replica).Scan(&got)
		if errors.Is(err, sql.ErrNoRows) {
			return errLeaseLost
		}
		return err
	})
	return got, err
}

// attempt is one delivery attempt's outcome, for the log.
type attempt struct {
	endpoint  *endpoint
	event     Event
	webhookID string
	at        time.Time
	status    int
	errText   string
	delivered bool
	next      time.Time // zero when delivered
}

// record writes an attempt: the delivery row (attempts counted in the
// database, so across restarts and replicas) and, on success, the
// endpoint's progress; it renews the lease, or fails with errLeaseLost if
// another replica holds it now (and then records nothing).
func (s *store) record(ctx context.Context, replica string, lease time.Duration, a attempt) error {
	return s.db.WriteTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		query, args := `UPDATE webhook_endpoints SET lease_until = {now} + ?`, []any{lease.Milliseconds()}
		if a.delivered {
			query += `, delivered_through = CASE WHEN delivered_through < ? THEN ? ELSE delivered_through END`
			args = append(args, a.event.ID, a.event.ID)
		}
		query += ` WHERE id = ? AND lease_owner = ?`
		args = append(args, a.endpoint.id, replica)
		res, err := tx.ExecContext(ctx, s.q(query), args...)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n != 1 {
			return errLeaseLost
		}
		var delivered, next any
		if a.delivered {
			delivered = fmtTime(a.at)
		} else {
			next = fmtTime(a.next)
		}
		at := fmtTime(a.at)
		_, err = tx.ExecContext(ctx, s.q(`INSERT INTO webhook_deliveries (endpoint, event_id, event_type, tenant, url, webhook_id,
	attempts, last_status, last_error, first_attempt_at, last_attempt_at, delivered_at, next_attempt_at, replica)
	VALUES (?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT (endpoint, event_id) DO UPDATE SET attempts = webhook_deliveries.attempts + 1,
		last_status = excluded.last_status, last_error = excluded.last_error, last_attempt_at = excluded.last_attempt_at,
		delivered_at = excluded.delivered_at, next_attempt_at = excluded.next_attempt_at, replica = excluded.replica`),
			a.endpoint.id, a.event.ID, a.event.Type, a.endpoint.tenant, a.endpoint.display, a.webhookID,
			a.status, a.errText, at, at, delivered, next, replica)
		return err
	})
}
