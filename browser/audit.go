package browser

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/sandgate/sandgate/audit"
)

// Audit record kinds of the browser router.
const (
	KindRequest = "browser.request" // one decision on one request the page (or the agent) made
	KindAction  = "browser.action"  // one action of the API
)

// auditWriteTimeout bounds one record write; it is detached from the
// request's cancellation, so a client that went away still gets its record.
const auditWriteTimeout = 5 * time.Second

// recorder appends the per-request decision records of one session without
// holding up the page: Chromium's paused request is answered first, and the
// record is written next to it. Flush waits for every record queued before
// it, so an action's response is never sent before the decisions taken
// while it ran are durable (the manager's "audit before answer" rule), and
// records appended concurrently share the store's group commit.
type recorder struct {
	store audit.Store
	log   *slog.Logger
	wg    sync.WaitGroup
	sem   chan struct{} // bounds concurrent appends
}

func newRecorder(store audit.Store, log *slog.Logger) *recorder {
	return &recorder{store: store, log: log, sem: make(chan struct{}, 64)}
}

// append writes rec in the background. It blocks only when 64 writes are
// already in flight, which applies back-pressure to a page that floods
// requests rather than dropping records.
func (r *recorder) append(rec *audit.Record) {
	r.sem <- struct{}{}
	r.wg.Add(1)
	go func() {
		defer func() { <-r.sem; r.wg.Done() }()
		r.write(rec)
	}()
}

func (r *recorder) write(rec *audit.Record) {
	ctx, cancel := context.WithTimeout(context.Background(), auditWriteTimeout)
	defer cancel()
	if err := r.store.Append(ctx, rec); err != nil {
		r.log.Error("browser audit write failed", "kind", rec.Kind, "session_id", rec.SessionID, "request_id", rec.RequestID, "err", err)
	}
}

// flush waits for the records queued so far, up to ctx.
func (r *recorder) flush(ctx context.Context) {
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}
