package manager

import (
	"context"
	"fmt"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/executors"
)

// Outcomes recorded in the audit log and the request metrics.
const (
	OutcomeOK          = "ok"
	OutcomeFailed      = "failed"
	OutcomeTimedOut    = "timed_out"
	OutcomeDenied      = "denied"
	OutcomeInvalid     = "invalid"
	OutcomeUnavailable = "unavailable"
	OutcomeError       = "error"
	OutcomeCancelled   = "cancelled"
	// OutcomeLimited is a request a quota refused: the tenant's rate, live
	// sessions, runs in flight or workspace bytes, or a session's
	// workspace quota. Nothing ran.
	OutcomeLimited = "limited"
)

// auditWriteTimeout bounds the record write. The write is detached from the
// request's cancellation: a client that went away still gets its record.
const auditWriteTimeout = 5 * time.Second

// finish is step 7: one record per request, whatever happened. A run's
// record is durable since its write-ahead (auditAhead), and the answer (the
// run's output) is not the record, so where the store allows (audit.Later)
// its completion is committed after the answer.
func (m *Manager) finish(ctx context.Context, rec *audit.Record, res *RunResult, err error, start time.Time) {
	code, _, _ := errcode.Of(err)
	if err == nil && res != nil {
		exit := res.Result.ExitCode
		rec.ExitCode = &exit
		rec.Executor = res.SandboxType
	}
	elapsed := m.stamp(ctx, rec, outcomeOf(code, res, err), err, start)
	m.runFinished(rec, res, err)
	if l, ok := m.deps.Audit.(laterCompleter); !ok || rec.ID == 0 || !l.CompleteLater(rec) {
		m.write(ctx, rec)
	}
	m.deps.Metrics.observeRequest(rec.Kind, rec.Action, rec.Executor, rec.Outcome, elapsed)
}

// laterCompleter is an audit store that can complete a write-ahead record
// after the answer (audit.Later).
type laterCompleter interface {
	CompleteLater(rec *audit.Record) bool
}

// record completes rec with the outcome, error code, status and duration,
// appends it to the audit log (detached from the request's cancellation),
// and counts the request. Executions and file operations share it, so
// their records have one shape. It returns the audit write's error, so
// that a caller whose answer is not sent yet can refuse to send it
// unrecorded (fileOp).
func (m *Manager) record(ctx context.Context, rec *audit.Record, outcome string, err error, start time.Time) error {
	elapsed := m.stamp(ctx, rec, outcome, err, start)
	werr := m.write(ctx, rec)
	m.deps.Metrics.observeRequest(rec.Kind, rec.Action, rec.Executor, rec.Outcome, elapsed)
	return werr
}

// write completes rec's write-ahead record, or appends rec when it has
// none, detached from the request's cancellation.
func (m *Manager) write(ctx context.Context, rec *audit.Record) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditWriteTimeout)
	defer cancel()
	var werr error
	if c, ok := m.deps.Audit.(audit.Completer); ok && rec.ID != 0 {
		werr = c.Complete(wctx, rec) // the write-ahead record of auditAhead
	} else {
		werr = m.deps.Audit.Append(wctx, rec)
	}
	if werr != nil {
		m.deps.Metrics.auditFailed()
		m.log.ErrorContext(ctx, "audit write failed", "request_id", rec.RequestID, "err", werr)
	}
	return werr
}

// stamp sets rec's outcome, error code, status and duration, counts a
// quota refusal and logs an internal error; it returns the duration.
func (m *Manager) stamp(ctx context.Context, rec *audit.Record, outcome string, err error, start time.Time) time.Duration {
	elapsed := time.Since(start)
	rec.DurationMS = elapsed.Milliseconds()
	code, status, _ := errcode.Of(err)
	rec.ErrorCode, rec.HTTPStatus = string(code), status
	rec.Outcome = outcome
	if q := quotaKind(err); q != "" {
		setDetail(rec, "quota", q)
		m.deps.Metrics.quotaRefused(m.quotas.label(rec.Tenant), q)
	}
	if code == errcode.Internal {
		m.log.ErrorContext(ctx, "request failed", "request_id", rec.RequestID, "session_id", rec.SessionID, "err", err)
	}
	return elapsed
}

func outcomeOf(code errcode.Code, res *RunResult, err error) string {
	if err == nil {
		switch {
		case res == nil:
			return OutcomeError
		case res.Result.TimedOut:
			return OutcomeTimedOut
		case res.Result.ExitCode != 0:
			return OutcomeFailed
		}
		return OutcomeOK
	}
	switch code {
	case errcode.InvalidRequest, errcode.PayloadTooLarge:
		return OutcomeInvalid
	case errcode.PolicyDenied, errcode.ApprovalDenied, errcode.ApprovalTimeout, errcode.ApprovalUnavailable:
		return OutcomeDenied
	case errcode.ExecutorUnavailable, errcode.PoolExhausted:
		return OutcomeUnavailable
	case errcode.Cancelled:
		return OutcomeCancelled
	case errcode.RateLimited, errcode.QuotaExceeded:
		return OutcomeLimited
	}
	return OutcomeError
}

// auditAhead writes rec as a started record before its work runs, when the
// store supports write-ahead records, so that a gateway killed mid-run
// (kill -9, an OOM kill, a host crash) still leaves a trace of what ran:
// the record holds the decision and approval, and the store resolves it as
// interrupted when this replica starts again. If the record cannot be
// written the run is refused (fail closed: nothing runs unaudited).
func (m *Manager) auditAhead(ctx context.Context, rec *audit.Record, exec executors.Executor) error {
	return m.writeAhead(ctx, rec, string(exec.Kind()))
}

// commitAhead is the run's write-ahead record (auditAhead). For a
// Stager's run it is committed while the executor stages the run, not
// before: spec.Release waits for it, and calls announce once it is
// durable, so the run's code starts only after its record exists, and the
// record's commit and the sandbox's preparation overlap instead of adding
// up. For any other run it is committed here, and announce called, before
// it starts. committed returns the commit's error once it has ended; the
// caller calls it before it reads rec again.
func (m *Manager) commitAhead(ctx context.Context, rec *audit.Record, exec executors.Executor, spec *executors.Spec, announce func()) (committed func() error, err error) {
	if st, ok := exec.(executors.Stager); !ok || !st.Stages(*spec) {
		if err := m.auditAhead(ctx, rec, exec); err != nil {
			return nil, err
		}
		announce()
		return func() error { return nil }, nil
	}
	done := make(chan struct{})
	var werr error
	go func() {
		defer close(done)
		werr = m.auditAhead(ctx, rec, exec)
	}()
	spec.Release = func(rctx context.Context) error {
		select {
		case <-done:
		case <-rctx.Done():
			return rctx.Err()
		}
		if werr == nil {
			announce()
		}
		return werr
	}
	return func() error { <-done; return werr }, nil
}

// writeAhead is auditAhead for any request that changes something (a run
// in executor, or a file operation with executor ""): the started record,
// or the error that refuses the request.
func (m *Manager) writeAhead(ctx context.Context, rec *audit.Record, executor string) error {
	if _, ok := m.deps.Audit.(audit.Completer); !ok {
		return nil
	}
	ahead := *rec
	ahead.Outcome, ahead.Executor = audit.OutcomeStarted, executor
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditWriteTimeout)
	defer cancel()
	if err := m.deps.Audit.Append(wctx, &ahead); err != nil {
		m.deps.Metrics.auditFailed()
		m.log.ErrorContext(ctx, "write-ahead audit failed; request refused", "request_id", rec.RequestID, "err", err)
		return fmt.Errorf("write-ahead audit record: %w", err)
	}
	rec.ID, rec.Time = ahead.ID, ahead.Time
	return nil
}
