package audit

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"
)

// relaxedWrites is s whose WriteTx commits with synchronous=NORMAL: the
// completions of write-ahead records (see SQLite.Complete), whose trace is
// already durable.
type relaxedWrites struct{ *SQLite }

// restoreTimeout bounds the PRAGMA that puts the writer back to FULL; it
// runs even when the caller's context has ended.
const restoreTimeout = 5 * time.Second

// WriteTx runs fn in one transaction on the writer connection, pinned, with
// synchronous=NORMAL for this commit only. The connection is put back to
// the store's setting afterwards; if that fails it is discarded, so that
// the pool opens a fresh one with the DSN's setting and no later commit
// is weakened.
func (r relaxedWrites) WriteTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	s := r.SQLite
	if err := s.lockWriter(ctx); err != nil {
		return err
	}
	defer s.unlockWriter()
	conn, err := s.w.Conn(ctx)
	if err != nil {
		return fmt.Errorf("audit: writer connection: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "PRAGMA synchronous=NORMAL"); err != nil {
		return fmt.Errorf("audit: relax synchronous: %w", err)
	}
	defer restoreSynchronous(conn, s.synchronous)
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("audit: begin: %w", err)
	}
	if err := fn(ctx, tx); err != nil {
		return errors.Join(err, rollback(tx))
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("audit: commit: %w", err)
	}
	return nil
}

// restoreSynchronous sets conn back to level, or marks it bad so that
// database/sql closes it instead of reusing it relaxed.
func restoreSynchronous(conn *sql.Conn, level string) {
	ctx, cancel := context.WithTimeout(context.Background(), restoreTimeout)
	defer cancel()
	if _, err := conn.ExecContext(ctx, "PRAGMA synchronous="+level); err != nil {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
}

// RelaxedWriteTx is WriteTx committed with synchronous=NORMAL. It is for
// rows that are not the audit trail and that a later audited action always
// follows: the WAL is one append-only file, so the next commit with
// synchronous=FULL (any Append, a run's write-ahead record) fsyncs these
// rows too, and a power cut can lose them only together with no audit
// record after them. A process crash loses nothing either way. The
// manager creates session records this way (a session's first run writes
// its write-ahead audit record, FULL, just after).
func (s *SQLite) RelaxedWriteTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	return relaxedWrites{s}.WriteTx(ctx, fn)
}
