package audit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// maxBatch caps how many queued appends one transaction commits.
const maxBatch = 256

// appendReq is one queued Append. The writer goroutine fills id, time and
// err, then closes done; the caller reads them only after done is closed
// (and not at all if it gave up waiting).
type appendReq struct {
	ctx  context.Context // detached from the caller's cancellation, bounded by WriteTimeout
	rec  *Record         // read-only for the writer
	cols jsonColumns

	id   int64
	time time.Time
	err  error
	done chan struct{}
}

// writeLoop is the group-commit writer. It takes the next queued append,
// adds whatever else is already queued (up to maxBatch), and commits them in
// one transaction, so concurrent requests share one fsync instead of queueing
// for one each. A lone append is one transaction, as it would be anyway.
// It exits when the queue is closed and drained.
func (s *SQLite) writeLoop() {
	defer close(s.writerDone)
	batch := make([]*appendReq, 0, maxBatch)
	for req := range s.queue {
		batch = append(batch[:0], req)
	drain:
		for len(batch) < maxBatch {
			select {
			case r, ok := <-s.queue:
				if !ok {
					break drain
				}
				batch = append(batch, r)
			default:
				break drain
			}
		}
		s.commitBatch(batch)
	}
}

// commitBatch writes batch under the write token and answers every request
// in it. If the batch transaction fails, each record is retried in its own
// transaction so that one bad record cannot fail the others.
func (s *SQLite) commitBatch(batch []*appendReq) {
	<-s.wtoken
	defer s.unlockWriter()

	live := batch[:0:0]
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			r.finish(fmt.Errorf("audit: append %s record for request %q: not written: %w", r.rec.Kind, r.rec.RequestID, err))
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.writeTimeout)
	defer cancel()
	err := s.insertTx(ctx, live)
	if err == nil {
		for _, r := range live {
			r.finish(nil)
		}
		return
	}
	if len(live) == 1 {
		live[0].finish(err)
		return
	}
	s.log.Warn("audit batch commit failed; retrying records one by one", "records", len(live), "error", err)
	for _, r := range live {
		r.finish(s.insertTx(ctx, []*appendReq{r}))
	}
}

// insertTx inserts reqs in one transaction and, on commit, records their
// IDs and times in them.
func (s *SQLite) insertTx(ctx context.Context, reqs []*appendReq) (err error) {
	if len(reqs) == 1 {
		// A lone INSERT is its own (autocommit) transaction; skipping
		// BEGIN and COMMIT saves two statements on the common path.
		r := reqs[0]
		t := r.stamp()
		row := rowOf(r.rec, r.cols, formatTime(t), s.replica)
		row.seal(s.last)
		id, err := insertRow(ctx, s.insert, &row)
		if err != nil {
			return fmt.Errorf("audit: append %s record for request %q: %w", r.rec.Kind, r.rec.RequestID, err)
		}
		r.id, r.time = id, t
		s.last = row.Hash
		return nil
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("audit: begin: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, rollback(tx))
		}
	}()
	stmt := tx.StmtContext(ctx, s.insert)
	ids := make([]int64, len(reqs))
	times := make([]time.Time, len(reqs))
	last := s.last
	for i, r := range reqs {
		times[i] = r.stamp()
		row := rowOf(r.rec, r.cols, formatTime(times[i]), s.replica)
		row.seal(last)
		last = row.Hash
		if ids[i], err = insertRow(ctx, stmt, &row); err != nil {
			return fmt.Errorf("audit: append %s record for request %q: %w", r.rec.Kind, r.rec.RequestID, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("audit: commit %d records: %w", len(reqs), err)
	}
	s.last = last
	for i, r := range reqs {
		r.id, r.time = ids[i], times[i]
	}
	return nil
}

func insertRow(ctx context.Context, stmt *sql.Stmt, row *chainRow) (int64, error) {
	res, err := stmt.ExecContext(ctx, rowArgs(row)...)
	if err != nil {
		return 0, err
	}
	return res.LastInsertId()
}

// rowArgs are insertSQL's arguments, in its column order.
func rowArgs(r *chainRow) []any {
	var exit any
	if r.ExitCode.Valid {
		exit = r.ExitCode.Int64
	}
	null := func(s sql.NullString) any {
		if !s.Valid {
			return nil
		}
		return s.String
	}
	return []any{r.RequestID, r.Time, r.Kind, r.Tenant, r.SessionID, r.Principal, r.Language,
		r.CodeSHA256, r.CodeBytes, r.RiskLevel, null(r.RiskPatterns), r.Action, r.Executor,
		null(r.Reasons), r.PolicyRevision, null(r.Approval), r.Outcome, r.ErrorCode, exit,
		r.DurationMS, r.HTTPStatus, r.Path, r.Bytes, null(r.Detail),
		r.Replica, r.PrevHash, r.Hash, r.CompletionHash, r.DecisionID, r.WouldBe}
}

// stamp returns the record's time: the caller's, in UTC, or now. The writer
// calls it just before inserting, in ID order, so store-assigned times never
// run backwards against IDs.
func (r *appendReq) stamp() time.Time {
	if r.rec.Time.IsZero() {
		return time.Now().UTC()
	}
	return r.rec.Time.UTC()
}

func (r *appendReq) finish(err error) {
	r.err = err
	close(r.done)
}
