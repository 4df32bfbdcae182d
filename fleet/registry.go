// Package fleet is the replica registry of gateways sharing one PostgreSQL
// database: each replica holds a lease it renews by heartbeat, and the
// others clean up after a replica whose lease expired (it died, or lost
// the database for longer than the lease): its pending approvals end as
// interrupted and its write-ahead audit records as interrupted, instead of
// hanging forever.
//
// A replica that was only cut off, not dead, finds its approvals
// interrupted when it comes back: its waiting requests are denied (fail
// closed), and it registers again with its next heartbeat.
package fleet

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandgate/sandgate/audit"
)

// DefaultLease is how long a replica stays alive without a heartbeat.
const DefaultLease = 15 * time.Second

const component = "fleet"

// migrations: PostgreSQL only (a registry is for a fleet; the SQLite
// gateway is one process and never opens one).
var migrations = []audit.Migration{{
	Version: 1,
	Name:    "create replicas",
	Postgres: `CREATE TABLE replicas (
	name         TEXT PRIMARY KEY,
	started_at   TIMESTAMPTZ NOT NULL,
	heartbeat_at TIMESTAMPTZ NOT NULL,
	lease_until  TIMESTAMPTZ NOT NULL
)`,
}, {
	Version:  2,
	Name:     "create markers",
	Postgres: `CREATE TABLE markers (name TEXT PRIMARY KEY, token TEXT NOT NULL)`,
}, {
	Version:  3,
	Name:     "replica url",
	Postgres: `ALTER TABLE replicas ADD COLUMN url TEXT NOT NULL DEFAULT ''`,
}, {
	Version: 4,
	Name:    "create sessions",
	Postgres: `CREATE TABLE sessions (
	key        TEXT PRIMARY KEY,
	replica    TEXT NOT NULL,
	claimed_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX sessions_replica ON sessions (replica)`,
}}

// Options configures Start.
type Options struct {
	// Replica is this process's name (storage.replica).
	Replica string
	// Lease is how long the replica counts as alive after a heartbeat.
	// Heartbeats go every Lease/3, expiry checks every Lease/2. Default
	// DefaultLease.
	Lease time.Duration
	// OnExpired (set by Run) cleans up after a dead replica (its
	// approvals and write-ahead records). It runs on one surviving
	// replica, once per expiry: the replica's row is removed in the same
	// transaction only if OnExpired succeeds.
	OnExpired func(ctx context.Context, replica string) error
	Logger    *slog.Logger
}

// Registry is this replica's membership. Stop ends it.
type Registry struct {
	db     audit.Database
	url    atomic.Pointer[string]
	opts   Options
	log    *slog.Logger
	bg     context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// ErrReplicaAlive is returned by Start when another live process holds
// this replica name.
var ErrReplicaAlive = errors.New("fleet: another live process holds this replica name")

// Register claims the replica's name and starts the heartbeat. A name
// whose lease has not expired is held by another process, or by this
// replica's previous run that died (kill -9): Register waits for the lease
// to run out, up to twice its length (a live duplicate keeps renewing it,
// and is refused with ErrReplicaAlive). Call Run once the cleanup the
// sweeper needs (OnExpired) is wired.
func Register(ctx context.Context, db audit.Database, opts Options) (*Registry, error) {
	if db.Driver() != audit.DriverPostgres {
		return nil, errors.New("fleet: the replica registry needs storage.driver postgres")
	}
	if opts.Lease <= 0 {
		opts.Lease = DefaultLease
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if err := db.Migrate(ctx, component, migrations); err != nil {
		return nil, err
	}
	r := &Registry{db: db, opts: opts, log: opts.Logger}
	deadline := time.Now().Add(2 * opts.Lease)
	for {
		err := r.register(ctx)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrReplicaAlive) || time.Now().After(deadline) {
			return nil, err
		}
		r.log.Warn("replica name held by an unexpired lease; waiting for it (a previous run that died, or a duplicate)",
			"replica", opts.Replica)
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-time.After(opts.Lease / 10):
		}
	}
	bg, cancel := context.WithCancel(context.Background())
	r.bg, r.cancel = bg, cancel
	r.wg.Add(1)
	go r.every(bg, opts.Lease/3, r.heartbeat)
	return r, nil
}

// Run starts watching for expired replicas, cleaning up after each with
// onExpired (see Options.OnExpired).
func (r *Registry) Run(onExpired func(ctx context.Context, replica string) error) {
	r.opts.OnExpired = onExpired
	r.wg.Add(1)
	go r.every(r.bg, r.opts.Lease/2, r.sweep)
}

// Stop ends the heartbeat and removes the replica's row (a clean stop:
// its approvals were already resolved by the hub's Close).
func (r *Registry) Stop(ctx context.Context) error {
	r.cancel()
	r.wg.Wait()
	_, err := r.db.DB().ExecContext(ctx, `DELETE FROM replicas WHERE name = $1`, r.opts.Replica)
	return err
}

func (r *Registry) register(ctx context.Context) error {
	res, err := r.db.DB().ExecContext(ctx, `INSERT INTO replicas (name, started_at, heartbeat_at, lease_until)
	VALUES ($1, now(), now(), now() + $2 * interval '1 millisecond')
	ON CONFLICT (name) DO UPDATE SET started_at = now(), heartbeat_at = now(), lease_until = EXCLUDED.lease_until, url = ''
	WHERE replicas.lease_until < now()`, r.opts.Replica, r.opts.Lease.Milliseconds())
	if err != nil {
		return fmt.Errorf("fleet: register replica %q: %w", r.opts.Replica, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("%w: %q (its lease has not expired; wait %s or pick another name)", ErrReplicaAlive, r.opts.Replica, r.opts.Lease)
	}
	return nil
}

func (r *Registry) every(ctx context.Context, d time.Duration, fn func(context.Context) error) {
	defer r.wg.Done()
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := fn(ctx); err != nil && ctx.Err() == nil {
				r.log.Warn("fleet registry", "replica", r.opts.Replica, "err", err)
			}
		}
	}
}

// heartbeat renews the lease (and re-registers a replica swept while it
// was cut off).
func (r *Registry) heartbeat(ctx context.Context) error {
	_, err := r.db.DB().ExecContext(ctx, `INSERT INTO replicas (name, started_at, heartbeat_at, lease_until, url)
	VALUES ($1, now(), now(), now() + $2 * interval '1 millisecond', $3)
	ON CONFLICT (name) DO UPDATE SET heartbeat_at = now(), lease_until = EXCLUDED.lease_until, url = EXCLUDED.url`,
		r.opts.Replica, r.opts.Lease.Milliseconds(), r.URL())
	return err
}

// sweep cleans up after each replica whose lease expired. The row is
// locked (SKIP LOCKED: one sweeper per dead replica) and deleted in the
// same transaction once OnExpired succeeded.
func (r *Registry) sweep(ctx context.Context) error {
	for {
		done, err := r.sweepOne(ctx)
		if err != nil || done {
			return err
		}
	}
}

func (r *Registry) sweepOne(ctx context.Context) (done bool, err error) {
	err = r.db.WriteTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var name string
		err := tx.QueryRowContext(ctx, `SELECT name FROM replicas WHERE lease_until < now() AND name <> $1
	ORDER BY lease_until LIMIT 1 FOR UPDATE SKIP LOCKED`, r.opts.Replica).Scan(&name)
		if errors.Is(err, sql.ErrNoRows) {
			done = true
			return nil
		}
		if err != nil {
			return err
		}
		if r.opts.OnExpired != nil {
			if err := r.opts.OnExpired(ctx, name); err != nil {
				return fmt.Errorf("clean up after replica %q: %w", name, err)
			}
		}
		r.log.Warn("replica lease expired; its pending approvals and started audit records were resolved as interrupted",
			"dead_replica", name, "by", r.opts.Replica)
		_, err = tx.ExecContext(ctx, `DELETE FROM replicas WHERE name = $1`, name)
		return err
	})
	return done, err
}

// Kill stops the heartbeat and the sweeper without leaving the registry,
// as a process killed with SIGKILL would. For tests.
func (r *Registry) Kill() {
	r.cancel()
	r.wg.Wait()
}
