package audit

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// laterTimeout bounds one queued completion, as the synchronous path's
// write is bounded.
const laterTimeout = 5 * time.Second

// Later is a Database whose callers may complete a write-ahead record after
// they have answered. A run's record is durable (started, with its
// decision and approval) before the run begins; its completion only adds
// the outcome, and committing it (a SELECT, an UPDATE and a commit, about
// 0.4 ms on the reference VM) before the answer made every run that much
// slower. CompleteLater queues the completion and returns at once; one
// goroutine commits the queue in order.
//
// What a client can observe: Query waits for every completion queued
// before it, so an agent reading the audit log after its answer sees the
// outcome. The queue is this process's, so Later suits one replica: a
// fleet's client may read the shared log through another replica, and the
// gateway completes synchronously on PostgreSQL. A gateway killed between the answer and
// the commit leaves the record started, which its next start resolves as
// interrupted: the run is never unrecorded, only its outcome is lost. A
// request that must not be answered unrecorded (a file read, whose answer
// is the data) completes synchronously through Complete, as before.
type Later struct {
	Database
	log    *slog.Logger
	failed func() // counts a completion that could not be written

	ch     chan *Record
	done   chan struct{}
	sendMu sync.RWMutex // held to send on ch, taken whole to close it
	closed bool         // guarded by sendMu

	mu        sync.Mutex
	cond      *sync.Cond
	queued    uint64
	committed uint64
}

// NewLater wraps db; failed (may be nil) is called for each queued
// completion that could not be written, after it was logged.
func NewLater(db Database, log *slog.Logger, failed func()) *Later {
	if log == nil {
		log = slog.Default()
	}
	l := &Later{Database: db, log: log, failed: failed, ch: make(chan *Record, 1024), done: make(chan struct{})}
	l.cond = sync.NewCond(&l.mu)
	go l.loop()
	return l
}

// CompleteLater queues the completion of rec (a copy is taken) and
// reports whether it was queued; after Drain it is not, and the caller
// completes it itself.
func (l *Later) CompleteLater(rec *Record) bool {
	r := *rec
	l.sendMu.RLock()
	defer l.sendMu.RUnlock()
	if l.closed {
		return false
	}
	l.mu.Lock()
	l.queued++
	l.mu.Unlock()
	l.ch <- &r // a full queue makes the caller wait: back-pressure, nothing dropped
	return true
}

func (l *Later) loop() {
	defer close(l.done)
	for rec := range l.ch {
		ctx, cancel := context.WithTimeout(context.Background(), laterTimeout)
		if err := l.Database.Complete(ctx, rec); err != nil {
			l.log.Error("audit write failed", "request_id", rec.RequestID, "err", err)
			if l.failed != nil {
				l.failed()
			}
		}
		cancel()
		l.mu.Lock()
		l.committed++
		l.cond.Broadcast()
		l.mu.Unlock()
	}
}

// Flush waits until every completion queued before it has been written
// (or has failed).
func (l *Later) Flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for target := l.queued; l.committed < target; {
		l.cond.Wait()
	}
}

// Query is the Database's Query after Flush: it sees every outcome whose
// answer was sent before it was called.
func (l *Later) Query(ctx context.Context, q Query) (Page, error) {
	l.Flush()
	return l.Database.Query(ctx, q)
}

// Drain writes what is queued and stops queueing; the Database stays
// open. The gateway drains before it closes the Database.
func (l *Later) Drain() {
	l.sendMu.Lock()
	if !l.closed {
		l.closed = true
		close(l.ch)
	}
	l.sendMu.Unlock()
	<-l.done
}
