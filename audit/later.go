package audit

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

const (
	// laterTimeout bounds one queued completion, as the synchronous
	// path's write is bounded.
	laterTimeout = 5 * time.Second
	// laterRetryEvery is how often completions that failed (a full disk)
	// are tried again, and maxLaterRetries how many are kept meanwhile.
	laterRetryEvery = time.Second
	maxLaterRetries = 10000
)

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
//
// A completion that fails for a reason that may pass (the audit disk is
// full) is not lost: it is tried again every second until it is written,
// and only given up at Drain. A query meanwhile sees the record started
// (Flush waits for first attempts, never for retries, so a full disk
// cannot hang readers).
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
	var retry []*Record
	tick := time.NewTicker(laterRetryEvery)
	defer tick.Stop()
	for {
		select {
		case rec, ok := <-l.ch:
			if !ok {
				l.retry(retry, true)
				return
			}
			if l.attempt(rec, true) {
				retry = append(retry, rec)
			}
			l.mu.Lock()
			l.committed++
			l.cond.Broadcast()
			l.mu.Unlock()
		case <-tick.C:
			retry = l.retry(retry, false)
		}
	}
}

// attempt writes rec's completion and reports whether it should be tried
// again: a failure that may pass (a full disk, a database that went away)
// is kept, one that cannot (the record is not started: completed already,
// or resolved as interrupted) is not. The first failure of a record is
// logged and counted.
func (l *Later) attempt(rec *Record, first bool) (again bool) {
	ctx, cancel := context.WithTimeout(context.Background(), laterTimeout)
	defer cancel()
	err := l.Database.Complete(ctx, rec)
	if err == nil {
		return false
	}
	if first {
		l.log.Error("audit write failed", "request_id", rec.RequestID, "err", err)
		if l.failed != nil {
			l.failed()
		}
	}
	return !errors.Is(err, ErrNotStarted) && !errors.Is(err, ErrInvalidRecord)
}

// retry tries the kept completions again and returns those still
// failing; the last time (Drain) it gives up on them, and their records
// stay started until the next start resolves them as interrupted.
func (l *Later) retry(recs []*Record, last bool) []*Record {
	var still []*Record
	for _, rec := range recs {
		if l.attempt(rec, false) {
			still = append(still, rec)
		}
	}
	if len(still) > maxLaterRetries {
		for _, rec := range still[maxLaterRetries:] {
			l.log.Error("audit completion given up: too many failing", "request_id", rec.RequestID)
		}
		still = still[:maxLaterRetries]
	}
	if last {
		for _, rec := range still {
			l.log.Error("audit completion given up at shutdown; the record stays started", "request_id", rec.RequestID)
		}
		return nil
	}
	return still
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
