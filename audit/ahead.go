package audit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// Write-ahead outcomes.
const (
	// OutcomeStarted marks a record written before its work ran; the
	// completion replaces it. One left behind means the process died
	// while the work ran.
	OutcomeStarted = "started"
	// OutcomeInterrupted is a started record whose process died before
	// completing it: the work may have run, partly or wholly.
	OutcomeInterrupted = "interrupted"
)

// ErrNotStarted is returned by Complete for a record that is not (or no
// longer) a started record of this store.
var ErrNotStarted = errors.New("audit: record is not a started record")

// Completer is a Store that supports write-ahead records: Append a record
// with Outcome OutcomeStarted before the work runs, then Complete it with
// the same record (ID set by Append) and its final outcome.
type Completer interface {
	Complete(ctx context.Context, rec *Record) error
}

// chainHead returns replica's last hash ("" for a new chain).
func chainHead(ctx context.Context, q interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}, rebind func(string) string, replica string) (string, error) {
	var h string
	err := q.QueryRowContext(ctx, rebind(`SELECT hash FROM records WHERE replica = ? ORDER BY id DESC LIMIT 1`), replica).Scan(&h)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("audit: read the chain head of replica %q: %w", replica, err)
	}
	return h, nil
}

// complete rewrites a started record's outcome fields and reseals its
// completion_hash, in one transaction. Like Append it ignores the caller's
// cancellation (bounded by timeout instead).
func complete(ctx context.Context, db Database, rec *Record) error {
	if rec == nil || rec.ID <= 0 || rec.Outcome == "" || rec.Outcome == OutcomeStarted {
		return fmt.Errorf("%w: complete needs a stored record's ID and a final outcome", ErrInvalidRecord)
	}
	cols, err := encodeJSONColumns(rec)
	if err != nil {
		return err
	}
	fin := rowOf(rec, cols, "", "")
	st, err := prepareComplete(ctx, db)
	if err != nil {
		return err
	}
	return db.WriteTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		return completeRow(ctx, tx, st, rec.ID, &fin)
	})
}

// completeStmts are completeRow's statements, prepared (Database.Prepare).
type completeStmts struct{ read, update *sql.Stmt }

func prepareComplete(ctx context.Context, db Database) (completeStmts, error) {
	q := `SELECT ` + chainColumns + ` FROM records WHERE id = ?`
	if db.Driver() == DriverPostgres {
		q += ` FOR UPDATE`
	}
	read, err := db.Prepare(ctx, db.Rebind(q))
	if err != nil {
		return completeStmts{}, err
	}
	update, err := db.Prepare(ctx, db.Rebind(`UPDATE records SET outcome = ?, error_code = ?, exit_code = ?, duration_ms = ?,
	http_status = ?, executor = ?, reasons = ?, bytes = ?, detail = ?, completion_hash = ?
	WHERE id = ? AND outcome = 'started'`))
	return completeStmts{read: read, update: update}, err
}

// completeRow moves row id from started to fin's outcome fields.
func completeRow(ctx context.Context, tx *sql.Tx, st completeStmts, id int64, fin *chainRow) error {
	row, err := scanChainRow(tx.StmtContext(ctx, st.read).QueryRowContext(ctx, id))
	if errors.Is(err, sql.ErrNoRows) || (err == nil && row.Outcome != OutcomeStarted) {
		return fmt.Errorf("%w: record %d", ErrNotStarted, id)
	}
	if err != nil {
		return fmt.Errorf("audit: complete record %d: %w", id, err)
	}
	row.Outcome, row.ErrorCode, row.ExitCode = fin.Outcome, fin.ErrorCode, fin.ExitCode
	row.DurationMS, row.HTTPStatus, row.Executor = fin.DurationMS, fin.HTTPStatus, fin.Executor
	row.Reasons, row.Bytes, row.Detail = fin.Reasons, fin.Bytes, fin.Detail
	row.CompletionHash = row.completionHash(row.Hash)
	args := rowArgs(&row)
	_, err = tx.StmtContext(ctx, st.update).ExecContext(ctx,
		row.Outcome, row.ErrorCode, args[18], row.DurationMS, row.HTTPStatus, row.Executor, args[13], row.Bytes, args[23],
		row.CompletionHash, id)
	if err != nil {
		return fmt.Errorf("audit: complete record %d: %w", id, err)
	}
	return nil
}

// resolveStarted closes replica's started records as interrupted: what a
// process that died mid-run left behind. A replica calls it for itself at
// start, before it writes anything.
func resolveStarted(ctx context.Context, db Database, replica string) (int, error) {
	rows, err := db.DB().QueryContext(ctx, db.Rebind(`SELECT id FROM records WHERE replica = ? AND outcome = 'started' ORDER BY id`), replica)
	if err != nil {
		return 0, fmt.Errorf("audit: find started records: %w", err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return 0, fmt.Errorf("audit: find started records: %w", err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("audit: find started records: %w", err)
	}
	fin := chainRow{Outcome: OutcomeInterrupted, ErrorCode: OutcomeInterrupted,
		Detail: sql.NullString{String: `{"interrupted":"the gateway stopped while this ran; it may have run in part or in full"}`, Valid: true}}
	if len(ids) == 0 {
		return 0, nil
	}
	st, err := prepareComplete(ctx, db)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		err := db.WriteTx(ctx, func(ctx context.Context, tx *sql.Tx) error { return completeRow(ctx, tx, st, id, &fin) })
		if errors.Is(err, ErrNotStarted) {
			continue
		}
		if err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// Complete finishes a started record; see Completer.
//
// Durability. The started record was fsynced before the work ran (Append
// under synchronous=FULL), so no crash of any kind can erase what ran. The
// completion is committed with synchronous=NORMAL (relaxedWrites): it is
// in the WAL before Complete returns, so a process crash (kill -9, an OOM
// kill) loses nothing, and the next FULL commit or checkpoint fsyncs it.
// Only a power or kernel failure in that window can lose it, and then the
// record stays started and is resolved as interrupted when the replica
// starts again: the outcome is lost, never the trace. That takes one
// fsync off every run's response path.
func (s *SQLite) Complete(ctx context.Context, rec *Record) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.writeTimeout)
	defer cancel()
	if s.synchronous != "FULL" {
		return complete(ctx, s, rec)
	}
	return complete(ctx, relaxedWrites{s}, rec)
}

// ResolveStarted closes this replica's started records as interrupted and
// returns how many there were.
func (s *SQLite) ResolveStarted(ctx context.Context) (int, error) {
	return resolveStarted(ctx, s, s.replica)
}

// Complete finishes a started record; see Completer.
func (p *Postgres) Complete(ctx context.Context, rec *Record) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.writeTimeout)
	defer cancel()
	return complete(ctx, p, rec)
}

// ResolveStarted closes this replica's started records as interrupted and
// returns how many there were.
func (p *Postgres) ResolveStarted(ctx context.Context) (int, error) {
	return resolveStarted(ctx, p, p.replica)
}

// Complete finishes a started record; see Completer.
func (m *Memory) Complete(_ context.Context, rec *Record) error {
	if rec == nil || rec.ID <= 0 || rec.Outcome == "" || rec.Outcome == OutcomeStarted {
		return fmt.Errorf("%w: complete needs a stored record's ID and a final outcome", ErrInvalidRecord)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if rec.ID > int64(len(m.records)) || m.records[rec.ID-1].Outcome != OutcomeStarted {
		return fmt.Errorf("%w: record %d", ErrNotStarted, rec.ID)
	}
	m.records[rec.ID-1] = rec.clone()
	return nil
}

// ResolveStartedOf closes another replica's started records as
// interrupted: one whose lease expired (package fleet).
func (p *Postgres) ResolveStartedOf(ctx context.Context, replica string) (int, error) {
	return resolveStarted(ctx, p, replica)
}
