package events

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sandgate/sandgate/audit"
)

// ErrClosed is returned by the methods of a closed Log.
var ErrClosed = errors.New("events: log closed")

// Limits of Since and Deliveries.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
)

// Log is the event log of one gateway process. It is safe for concurrent
// use. Close it before the database.
type Log struct {
	db     audit.Database
	store  *store
	cfg    Config
	log    *slog.Logger
	client *http.Client
	hooks  []*endpoint

	sig  *signal
	head atomic.Int64 // the highest id this process knows committed

	ctx       context.Context // ends at Close
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

// Open migrates the log's tables in db (component "events"), registers
// cfg's webhooks and starts delivering to them. log may be nil.
func Open(ctx context.Context, db audit.Database, cfg Config, log *slog.Logger) (*Log, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("events: config: %w", err)
	}
	cfg = cfg.withDefaults()
	pg := db.Driver() == audit.DriverPostgres
	if cfg.Replica == "" {
		if pg {
			return nil, errors.New("events: config: replica is required on PostgreSQL (the name webhook leases are held under)")
		}
		cfg.Replica = "local"
	}
	if err := db.Migrate(ctx, component, migrations); err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	l := &Log{
		db:     db,
		store:  newStore(db),
		cfg:    cfg,
		log:    log,
		client: newClient(cfg.Client),
		sig:    newSignal(),
	}
	if !pg {
		// SQLite is one process: leases left by a previous run are
		// stale, whatever its replica name was.
		if err := l.store.releaseLeases(ctx, "", true); err != nil {
			return nil, fmt.Errorf("events: release stale webhook leases: %w", err)
		}
	}
	now := time.Now()
	for _, w := range cfg.Webhooks {
		ep, err := newEndpoint(w)
		if err != nil { // Validate passed, so this cannot happen
			return nil, fmt.Errorf("events: webhook %s: %w", RedactURL(w.URL), err)
		}
		if err := l.store.addEndpoint(ctx, ep, now); err != nil {
			return nil, fmt.Errorf("events: register webhook %s: %w", ep.display, err)
		}
		l.hooks = append(l.hooks, ep)
	}
	head, err := l.store.head(ctx)
	if err != nil {
		return nil, fmt.Errorf("events: read the log's head: %w", err)
	}
	l.head.Store(head)
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.goRun(l.pruneLoop)
	if pg {
		l.goRun(l.pollLoop)
		l.goRun(l.listen)
	}
	for _, ep := range l.hooks {
		l.wg.Add(1)
		go l.deliver(ep)
	}
	log.InfoContext(ctx, "event log open", "driver", db.Driver(), "replica", cfg.Replica, "webhooks", len(l.hooks),
		"head", head, "max_age", cfg.MaxAge)
	return l, nil
}

func (l *Log) goRun(fn func()) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		fn()
	}()
}

// Close stops delivery (an attempt in flight is abandoned and made again
// after the next start) and the SSE streams, waits for them, and gives up
// this replica's webhook leases so that another replica, or the next run,
// takes over at once. It does not close the database.
func (l *Log) Close() error {
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		l.cancel()
		l.wg.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), l.cfg.WriteTimeout)
		defer cancel()
		if len(l.hooks) > 0 {
			if err := l.store.releaseLeases(ctx, l.cfg.Replica, false); err != nil {
				l.closeErr = fmt.Errorf("events: release webhook leases: %w", err)
			}
		}
		l.log.Info("event log closed", "replica", l.cfg.Replica)
	})
	return l.closeErr
}

// Publish appends evs durably, in order and in one commit, and returns
// once they are committed, having woken this process's SSE streams and
// webhook deliverers (other replicas hear of them through NOTIFY). The
// log assigns their IDs; Time defaults to now. Several events at once
// share one transaction and its fsync: the manager hands over what queued
// while the last commit ran, which at a few hundred runs a second halves
// the log's commits. Publish ignores ctx's cancellation (the event of
// something that happened is not dropped because the request that caused
// it ended) but keeps its values; Config.WriteTimeout bounds it.
//
// An event it refuses wraps ErrInvalidEvent; the others are kept. Every
// failure is also logged (the event is lost), so a caller may ignore the
// error.
func (l *Log) Publish(ctx context.Context, evs ...Event) error {
	if l.closed.Load() {
		l.log.WarnContext(ctx, "events not recorded: the log is closed", "events", len(evs))
		return ErrClosed
	}
	var refused []error
	kept := make([]Event, 0, len(evs))
	now := time.Now()
	for _, ev := range evs {
		norm, err := normalize(ev, now)
		if err != nil {
			l.log.WarnContext(ctx, "event not recorded", "type", truncate(ev.Type, 64), "tenant", truncate(ev.Tenant, 64), "err", err)
			refused = append(refused, err)
			continue
		}
		kept = append(kept, norm)
	}
	if len(kept) == 0 {
		return errors.Join(refused...)
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.WriteTimeout)
	defer cancel()
	last, err := l.store.appendEvents(wctx, kept)
	if err != nil {
		err = fmt.Errorf("events: publish %s: %w", kept[0].Type, err)
		l.log.WarnContext(ctx, "events not recorded", "type", kept[0].Type, "tenant", kept[0].Tenant, "events", len(kept), "err", err)
		return errors.Join(append(refused, err)...)
	}
	l.advance(last)
	return errors.Join(refused...)
}

// Since returns up to limit events with an id above afterID, in id
// order, of tenant ("" for every tenant's, for admins). limit ≤ 0 means
// DefaultLimit; it is capped at MaxLimit.
func (l *Log) Since(ctx context.Context, tenant string, afterID int64, limit int) ([]Event, error) {
	return l.since(ctx, tenant == "", tenant, afterID, limit)
}

func (l *Log) since(ctx context.Context, all bool, tenant string, afterID int64, limit int) ([]Event, error) {
	if l.closed.Load() {
		return nil, ErrClosed
	}
	if limit <= 0 {
		limit = DefaultLimit
	}
	limit = min(limit, MaxLimit)
	evs, err := l.store.since(ctx, all, tenant, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("events: read: %w", err)
	}
	return evs, nil
}

// advance records that id is committed and wakes the waiters if it is
// news.
func (l *Log) advance(id int64) {
	for {
		cur := l.head.Load()
		if id <= cur {
			return
		}
		if l.head.CompareAndSwap(cur, id) {
			l.sig.broadcast()
			return
		}
	}
}

// signal wakes every waiter at once: wait returns a channel that the next
// broadcast closes. A waiter takes the channel before it reads the
// database, so that an event committed after the read wakes it.
type signal struct {
	mu sync.Mutex
	ch chan struct{}
}

func newSignal() *signal { return &signal{ch: make(chan struct{})} }

func (s *signal) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ch
}

func (s *signal) broadcast() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.ch)
	s.ch = make(chan struct{})
}

// pruneLoop removes what is older than MaxAge, at start and every
// PruneInterval. On PostgreSQL every replica prunes; the deletes are
// idempotent.
func (l *Log) pruneLoop() {
	for {
		n, err := l.store.prune(l.ctx, time.Now().Add(-l.cfg.MaxAge))
		switch {
		case err != nil && l.ctx.Err() == nil:
			l.log.Warn("pruning old events failed", "err", err)
		case n > 0:
			l.log.Info("pruned old events and delivery records", "rows", n, "max_age", l.cfg.MaxAge)
		}
		if !sleep(l.ctx, l.cfg.PruneInterval) {
			return
		}
	}
}

// pollLoop reads the log's head every PollInterval (PostgreSQL): events
// of other replicas whose NOTIFY was lost still wake the waiters.
func (l *Log) pollLoop() {
	for sleep(l.ctx, l.cfg.PollInterval) {
		if id, err := l.store.head(l.ctx); err == nil {
			l.advance(id)
		}
	}
}

// listen bounds.
const (
	listenBackoffMin = 100 * time.Millisecond
	listenBackoffMax = 5 * time.Second
)

// errNoListen: the pool's driver is not pgx's, so there is no LISTEN;
// polling alone wakes the waiters.
var errNoListen = errors.New("events: the database driver cannot LISTEN")

// listen holds a LISTEN on NotifyChannel until Close, on a connection of
// the database's pool (so it needs no DSN of its own), reconnecting with
// backoff.
func (l *Log) listen() {
	backoff := listenBackoffMin
	for l.ctx.Err() == nil {
		err := l.listenOnce(func() { backoff = listenBackoffMin })
		if l.ctx.Err() != nil {
			return
		}
		if errors.Is(err, errNoListen) {
			l.log.Warn("events LISTEN unavailable; other replicas' events are seen by polling", "poll_interval", l.cfg.PollInterval)
			return
		}
		l.log.Warn("events LISTEN connection lost; reconnecting", "err", err, "backoff", backoff)
		if !sleep(l.ctx, backoff) {
			return
		}
		backoff = min(2*backoff, listenBackoffMax)
	}
}

func (l *Log) listenOnce(connected func()) error {
	conn, err := l.db.DB().Conn(l.ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return errNoListen
		}
		pc := sc.Conn()
		if _, err := pc.Exec(l.ctx, "LISTEN "+pgx.Identifier{NotifyChannel}.Sanitize()); err != nil {
			return errors.Join(err, driver.ErrBadConn)
		}
		connected()
		// What was appended while no one listened.
		if id, err := l.store.head(l.ctx); err == nil {
			l.advance(id)
		}
		for {
			n, err := pc.WaitForNotification(l.ctx)
			if err != nil {
				// The connection still listens: never hand it back
				// to the pool.
				return errors.Join(err, driver.ErrBadConn)
			}
			if id, err := strconv.ParseInt(n.Payload, 10, 64); err == nil {
				l.advance(id)
			}
		}
	})
}
