package browser

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/workspace"
)

// Audit record kinds of the browser router.
const (
	KindRequest = "browser.request" // one decision on one request the page (or the agent) made
	KindAction  = "browser.action"  // one action of the API
)

// auditWriteTimeout bounds one record write; it is detached from the
// request's cancellation, so a client that went away still gets its record.
const auditWriteTimeout = 5 * time.Second

// recorder writes the per-request decision records of one session without
// holding up the page: Chromium's paused request is answered first, and the
// record is written next to it.
//
// What is durable before an action's response: the action's own record and
// every denial (the decisions a client or an auditor acts on). Allow
// records of page requests are batched and written in the background once
// the session is idle for a moment (or the batch is full, or old), so that
// they neither cost an action an extra commit nor queue in front of the
// next action's record; Close writes what is left. A gateway that dies
// meanwhile loses allow records, never a denial or an action.
type recorder struct {
	store      audit.Store
	log        *slog.Logger
	critical   inflight      // denials: flushed before each action's response
	background inflight      // allow batches being written
	sem        chan struct{} // bounds concurrent appends

	mu      sync.Mutex
	pending []*audit.Record // allow records waiting for a quiet moment
	oldest  time.Time
	timer   *time.Timer
}

// Allow-record batching.
const (
	batchIdle   = 250 * time.Millisecond
	batchMaxAge = 2 * time.Second
	batchMax    = 64
)

func newRecorder(store audit.Store, log *slog.Logger) *recorder {
	return &recorder{store: store, log: log, sem: make(chan struct{}, 64)}
}

// append queues rec: a critical record (a denial) is written at once; an
// allow record joins the pending batch. Writing blocks only when 64 writes
// are in flight, which applies back-pressure to a page that floods
// requests rather than dropping records.
func (r *recorder) append(rec *audit.Record, critical bool) {
	if critical {
		r.spawn(&r.critical, rec)
		return
	}
	r.mu.Lock()
	if len(r.pending) == 0 {
		r.oldest = time.Now()
	}
	r.pending = append(r.pending, rec)
	full := len(r.pending) >= batchMax || time.Since(r.oldest) >= batchMaxAge
	r.mu.Unlock()
	if full {
		r.writePending()
	} else {
		r.quiet()
	}
}

// quiet (re)arms the idle timer: the batch is written batchIdle after the
// last record or action.
func (r *recorder) quiet() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.pending) == 0 {
		return
	}
	if r.timer == nil {
		r.timer = time.AfterFunc(batchIdle, r.writePending)
		return
	}
	r.timer.Reset(batchIdle)
}

// writePending writes the pending batch, its records concurrently so that
// the store commits them together.
func (r *recorder) writePending() {
	r.mu.Lock()
	batch := r.pending
	r.pending = nil
	r.mu.Unlock()
	for _, rec := range batch {
		r.spawn(&r.background, rec)
	}
}

func (r *recorder) spawn(f *inflight, rec *audit.Record) {
	r.sem <- struct{}{}
	f.add()
	go func() {
		defer func() { <-r.sem; f.done() }()
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

// flush waits for the denials queued so far, up to ctx.
func (r *recorder) flush(ctx context.Context) { wait(ctx, &r.critical) }

// drain writes the pending batch and waits for every record queued so
// far, up to ctx.
func (r *recorder) drain(ctx context.Context) {
	r.writePending()
	wait(ctx, &r.critical)
	wait(ctx, &r.background)
}

func wait(ctx context.Context, f *inflight) {
	idle := f.idleChan()
	if idle == nil {
		return
	}
	select {
	case <-idle:
	case <-ctx.Done():
	}
}

// inflight counts writes in progress. Unlike a sync.WaitGroup it may be
// waited on while writes are still being added (a timer's batch racing a
// Close), which is exactly what the recorder does.
type inflight struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to zero; nil while idle
}

func (f *inflight) add() {
	f.mu.Lock()
	if f.n == 0 {
		f.idle = make(chan struct{})
	}
	f.n++
	f.mu.Unlock()
}

func (f *inflight) done() {
	f.mu.Lock()
	f.n--
	if f.n == 0 {
		close(f.idle)
		f.idle = nil
	}
	f.mu.Unlock()
}

// idleChan is closed once the writes in progress now have finished; nil
// when there are none.
func (f *inflight) idleChan() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 {
		return nil
	}
	return f.idle
}

// keyedStore attributes the router's records. Its sessions are keys
// (workspace.Key: tenant~name); a record names the session as clients do,
// by its name, with its tenant apart, like every other audit record.
type keyedStore struct{ audit.Store }

func (s keyedStore) Append(ctx context.Context, rec *audit.Record) error {
	tenant, name := workspace.SplitKey(rec.SessionID)
	rec.SessionID = name
	if rec.Tenant == "" {
		rec.Tenant = tenant
	}
	return s.Store.Append(ctx, rec)
}
