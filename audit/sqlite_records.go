package audit

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// timeLayout stores times as fixed-width UTC text, so the column reads well
// in the sqlite3 shell and sorts and compares as text in time order.
const timeLayout = "2006-01-02T15:04:05.000000000Z"

func formatTime(t time.Time) string { return t.UTC().Format(timeLayout) }

const recordColumns = `id, request_id, time, kind, tenant, session_id, principal, language, code_sha256,
	code_bytes, risk_level, risk_patterns, action, executor, reasons, policy_revision, approval,
	outcome, error_code, exit_code, duration_ms, http_status, path, bytes, detail, decision_id, would_be`

const insertSQL = `INSERT INTO records (request_id, time, kind, tenant, session_id, principal, language,
	code_sha256, code_bytes, risk_level, risk_patterns, action, executor, reasons, policy_revision,
	approval, outcome, error_code, exit_code, duration_ms, http_status, path, bytes, detail,
	replica, prev_hash, hash, completion_hash, decision_id, would_be)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

// Append stores rec as a new record and sets rec.ID and, when it is zero,
// rec.Time. A store-assigned time is taken by the writer as it inserts the
// record, so such times never run backwards against IDs; a non-zero Time is
// kept, converted to UTC. rec.ID must be zero; Kind and Outcome are
// required. rec is not modified when Append fails.
//
// Append ignores the cancellation of ctx on purpose: the request context is
// cancelled when the client hangs up, and a client must not be able to
// suppress the audit record of its own request that way. Append is bounded
// by Options.WriteTimeout instead. If that expires (an error wrapping
// context.DeadlineExceeded) the record may or may not have been written.
//
// When Append returns nil the record is committed and durable (see SQLite).
// Concurrent Appends are committed together in one transaction (group
// commit); each still returns only once its own record is durable.
func (s *SQLite) Append(ctx context.Context, rec *Record) error {
	if err := rec.validate(); err != nil {
		return err
	}
	cols, err := encodeJSONColumns(rec)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.writeTimeout)
	defer cancel()
	req := &appendReq{ctx: ctx, rec: rec, cols: cols, done: make(chan struct{})}
	if err := s.enqueue(req); err != nil {
		return err
	}
	select {
	case <-req.done:
	case <-ctx.Done():
		// The writer is stuck behind a long WriteTx or a slow disk. It
		// skips requests whose deadline has passed, but this one may be
		// in a batch being committed right now.
		return fmt.Errorf("audit: append %s record for request %q: outcome unknown: %w",
			rec.Kind, rec.RequestID, context.Cause(ctx))
	}
	if req.err != nil {
		return req.err
	}
	rec.ID, rec.Time = req.id, req.time
	return nil
}

// enqueue hands req to the writer, or fails if the store is closed or the
// queue stays full until req's deadline.
func (s *SQLite) enqueue(req *appendReq) error {
	s.queueMu.RLock()
	defer s.queueMu.RUnlock()
	if s.queueClosed {
		return ErrClosed
	}
	select {
	case s.queue <- req:
		return nil
	case <-req.ctx.Done():
		return fmt.Errorf("audit: append %s record for request %q: queue full: %w",
			req.rec.Kind, req.rec.RequestID, context.Cause(req.ctx))
	}
}

// jsonColumns holds the encoded list and object columns; nil means NULL.
type jsonColumns struct {
	riskPatterns, reasons, approval, detail any
}

func encodeJSONColumns(rec *Record) (jsonColumns, error) {
	var c jsonColumns
	var err error
	enc := func(dst *any, name string, v any, empty bool) {
		if err != nil || empty {
			return
		}
		b, e := json.Marshal(v)
		if e != nil {
			err = fmt.Errorf("%w: encode %s: %w", ErrInvalidRecord, name, e)
			return
		}
		*dst = string(b)
	}
	enc(&c.riskPatterns, "risk_patterns", rec.RiskPatterns, len(rec.RiskPatterns) == 0)
	enc(&c.reasons, "reasons", rec.Reasons, len(rec.Reasons) == 0)
	enc(&c.approval, "approval", rec.Approval, rec.Approval == nil)
	enc(&c.detail, "detail", rec.Detail, len(rec.Detail) == 0)
	return c, err
}

// Query returns one page of records matching q, newest (highest ID) first.
// SessionID, Kind and Tenant filters use the (session_id, id), (kind, id),
// (tenant, id) and (tenant, session_id, id) indexes.
func (s *SQLite) Query(ctx context.Context, q Query) (Page, error) {
	if s.closed.Load() {
		return Page{}, ErrClosed
	}
	q, err := q.normalize(s.maxLimit)
	if err != nil {
		return Page{}, err
	}
	stmt, args := buildSelect(q)
	rows, err := s.r.QueryContext(ctx, stmt, args...)
	if err != nil {
		return Page{}, fmt.Errorf("audit: query: %w", err)
	}
	return readPage(rows, q.Limit)
}

// readPage reads rows (limit+1 at most) into a page and closes them.
func readPage(rows *sql.Rows, limit int) (Page, error) {
	defer rows.Close()
	page := Page{Records: make([]Record, 0, min(limit, 64))}
	for rows.Next() {
		rec, err := scanRecord(rows)
		if err != nil {
			return Page{}, fmt.Errorf("audit: query: %w", err)
		}
		page.Records = append(page.Records, rec)
	}
	if err := rows.Err(); err != nil {
		return Page{}, fmt.Errorf("audit: query: %w", err)
	}
	// One extra row was asked for: its presence means more remain.
	if len(page.Records) > limit {
		page.Records = page.Records[:limit]
		page.NextCursor = page.Records[limit-1].ID
	}
	return page, nil
}

// buildSelect renders q (already normalised) as SQL with placeholders only.
func buildSelect(q Query) (string, []any) {
	var (
		where []string
		args  []any
	)
	if q.Tenant != "" {
		where = append(where, "tenant = ?")
		args = append(args, q.Tenant)
	}
	if q.SessionID != "" {
		where = append(where, "session_id = ?")
		args = append(args, q.SessionID)
	}
	if q.Kind != "" {
		where = append(where, "kind = ?")
		args = append(args, q.Kind)
	}
	if q.DecisionID != "" {
		where = append(where, "decision_id = ?")
		args = append(args, q.DecisionID)
	}
	if q.Before > 0 {
		where = append(where, "id < ?")
		args = append(args, q.Before)
	}
	if !q.Since.IsZero() {
		where = append(where, "time >= ?")
		args = append(args, formatTime(q.Since))
	}
	if !q.Until.IsZero() {
		where = append(where, "time < ?")
		args = append(args, formatTime(q.Until))
	}
	if q.Outcome != "" {
		where = append(where, "outcome = ?")
		args = append(args, q.Outcome)
	}
	var b strings.Builder
	b.WriteString("SELECT " + recordColumns + " FROM records")
	if len(where) > 0 {
		b.WriteString(" WHERE " + strings.Join(where, " AND "))
	}
	b.WriteString(" ORDER BY id DESC LIMIT ?")
	args = append(args, q.Limit+1)
	return b.String(), args
}

func scanRecord(rows *sql.Rows) (Record, error) {
	var (
		r                                    Record
		tm                                   string
		riskPatterns, reasons, approval, dtl sql.NullString
		exit                                 sql.NullInt64
	)
	err := rows.Scan(&r.ID, &r.RequestID, &tm, &r.Kind, &r.Tenant, &r.SessionID, &r.Principal, &r.Language,
		&r.CodeSHA256, &r.CodeBytes, &r.RiskLevel, &riskPatterns, &r.Action, &r.Executor, &reasons,
		&r.PolicyRevision, &approval, &r.Outcome, &r.ErrorCode, &exit, &r.DurationMS, &r.HTTPStatus,
		&r.Path, &r.Bytes, &dtl, &r.DecisionID, &r.WouldBe)
	if err != nil {
		return r, err
	}
	if r.Time, err = time.Parse(time.RFC3339Nano, tm); err != nil {
		return r, fmt.Errorf("record %d: time %q: %w", r.ID, tm, err)
	}
	if exit.Valid {
		e := int(exit.Int64)
		r.ExitCode = &e
	}
	for _, c := range []struct {
		name string
		src  sql.NullString
		dst  any
	}{
		{"risk_patterns", riskPatterns, &r.RiskPatterns},
		{"reasons", reasons, &r.Reasons},
		{"approval", approval, &r.Approval},
		{"detail", dtl, &r.Detail},
	} {
		if !c.src.Valid {
			continue
		}
		if err := json.Unmarshal([]byte(c.src.String), c.dst); err != nil {
			return r, fmt.Errorf("record %d: %s: %w", r.ID, c.name, err)
		}
	}
	return r, nil
}
