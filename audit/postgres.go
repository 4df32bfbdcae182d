package audit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// DefaultPostgresConns is the size of the PostgreSQL connection pool.
const DefaultPostgresConns = 16

// Postgres is the Database of a fleet: the audit records and the shared
// tables of every replica in one PostgreSQL database, reached through pgx
// (its database/sql driver, so package confirm's queries serve both
// drivers).
//
// Durability. Append commits one INSERT per record with PostgreSQL's
// default synchronous_commit=on: the WAL is flushed before Append returns,
// as SQLite's synchronous=FULL does. The server may group concurrent
// commits into one flush by itself, so no group-commit queue is kept here.
//
// The DSN's password is never logged: Describe and the log lines name the
// host, port, database and user only, and pgx's own parse errors redact it.
type Postgres struct {
	db           *sql.DB
	log          *slog.Logger
	desc         string
	writeTimeout time.Duration
	maxLimit     int
	insert       string
	stmts        stmtCache
	closed       atomic.Bool
	replica      string

	// chainMu serialises this replica's appends, so that each record
	// links to the one before it; last is the chain's head.
	chainMu sync.Mutex
	last    string
}

// OpenPostgres connects to the database dsn names (a libpq keyword/value
// string or a postgres:// URL), checks that it answers and applies pending
// migrations. Replicas may call it concurrently against one database: the
// migrations run under a transaction-scoped advisory lock.
func OpenPostgres(ctx context.Context, dsn string, opts Options) (*Postgres, error) {
	opts = opts.withDefaults()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		// pgx redacts the password in the error it returns.
		return nil, fmt.Errorf("audit: postgres dsn: %w", err)
	}
	p := &Postgres{
		log:          opts.Logger,
		desc:         describe(cfg),
		writeTimeout: opts.WriteTimeout,
		maxLimit:     opts.MaxQueryLimit,
		insert:       rebindDollar(insertSQL) + " RETURNING id",
		replica:      opts.Replica,
	}
	p.db = stdlib.OpenDB(*cfg)
	p.db.SetMaxOpenConns(DefaultPostgresConns)
	p.db.SetMaxIdleConns(DefaultPostgresConns)
	p.db.SetConnMaxIdleTime(5 * time.Minute)
	if err := p.db.PingContext(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("audit: connect to postgres %s: %w", p.desc, err), p.db.Close())
	}
	if err := p.Migrate(ctx, auditComponent, auditMigrations); err != nil {
		return nil, errors.Join(err, p.db.Close())
	}
	if p.last, err = chainHead(ctx, p.db, p.Rebind, p.replica); err != nil {
		return nil, errors.Join(err, p.db.Close())
	}
	p.log.InfoContext(ctx, "audit database open", "driver", DriverPostgres, "database", p.desc)
	return p, nil
}

// describe names a connection without its password.
func describe(cfg *pgx.ConnConfig) string {
	return fmt.Sprintf("host=%s port=%d dbname=%s user=%s", cfg.Host, cfg.Port, cfg.Database, cfg.User)
}

// Describe names the database (host, port, database, user), never the
// password.
func (p *Postgres) Describe() string { return p.desc }

// Driver is DriverPostgres.
func (p *Postgres) Driver() string { return DriverPostgres }

// Rebind rewrites '?' placeholders as $1, $2, ...
func (p *Postgres) Rebind(query string) string { return rebindDollar(query) }

// DB is the connection pool. Do not close it.
func (p *Postgres) DB() *sql.DB { return p.db }

// Ping reports whether the database answers.
func (p *Postgres) Ping(ctx context.Context) error {
	if p.closed.Load() {
		return ErrClosed
	}
	return p.db.PingContext(ctx)
}

// WriteTx runs fn in a transaction and commits it if fn returns nil.
func (p *Postgres) WriteTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	if p.closed.Load() {
		return ErrClosed
	}
	tx, err := p.db.BeginTx(ctx, nil)
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

// Close closes the pool. Operations after Close fail with ErrClosed.
func (p *Postgres) Close() error {
	if p.closed.Swap(true) {
		return nil
	}
	if err := p.db.Close(); err != nil {
		return fmt.Errorf("audit: close postgres %s: %w", p.desc, err)
	}
	p.log.Info("audit database closed", "driver", DriverPostgres, "database", p.desc)
	return nil
}

// Append stores rec; see SQLite.Append for the contract, which is the same
// (the caller's cancellation is ignored, Options.WriteTimeout bounds it).
func (p *Postgres) Append(ctx context.Context, rec *Record) error {
	if err := rec.validate(); err != nil {
		return err
	}
	if p.closed.Load() {
		return ErrClosed
	}
	cols, err := encodeJSONColumns(rec)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.writeTimeout)
	defer cancel()
	p.chainMu.Lock()
	defer p.chainMu.Unlock()
	t := (&appendReq{rec: rec}).stamp()
	row := rowOf(rec, cols, formatTime(t), p.replica)
	row.seal(p.last)
	var id int64
	if err := p.db.QueryRowContext(ctx, p.insert, rowArgs(&row)...).Scan(&id); err != nil {
		return fmt.Errorf("audit: append %s record for request %q: %w", rec.Kind, rec.RequestID, err)
	}
	p.last = row.Hash
	rec.ID, rec.Time = id, t
	return nil
}

// Query returns one page of records, newest first; see SQLite.Query.
func (p *Postgres) Query(ctx context.Context, q Query) (Page, error) {
	if p.closed.Load() {
		return Page{}, ErrClosed
	}
	q, err := q.normalize(p.maxLimit)
	if err != nil {
		return Page{}, err
	}
	stmt, args := buildSelect(q)
	rows, err := p.db.QueryContext(ctx, rebindDollar(stmt), args...)
	if err != nil {
		return Page{}, fmt.Errorf("audit: query: %w", err)
	}
	return readPage(rows, q.Limit)
}

// Migrate applies component's pending migrations (their Postgres SQL) in
// one transaction, under an advisory lock so that replicas starting
// together apply each migration once.
func (p *Postgres) Migrate(ctx context.Context, component string, migs []Migration) error {
	if err := checkMigrations(component, migs, func(m Migration) string { return m.Postgres }); err != nil {
		return err
	}
	h := fnv.New64a()
	h.Write([]byte("sandgate.schema_migrations"))
	lock := int64(h.Sum64())
	var applied []Migration
	err := p.WriteTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, lock); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		if _, err := tx.ExecContext(ctx, pgSchemaMigrationsDDL); err != nil {
			return fmt.Errorf("create schema_migrations: %w", err)
		}
		done, err := appliedMigrations(ctx, tx, component, rebindDollar)
		if err != nil {
			return err
		}
		if err := checkApplied(component, migs, done); err != nil {
			return err
		}
		for _, m := range migs {
			if _, ok := done[m.Version]; ok {
				continue
			}
			if err := applyPG(ctx, tx, component, m); err != nil {
				return fmt.Errorf("to version %d (%s): %w", m.Version, m.Name, err)
			}
			applied = append(applied, m)
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrSchemaTooNew) {
			return err
		}
		return fmt.Errorf("audit: migrate %s: %w", component, err)
	}
	for _, m := range applied {
		p.log.InfoContext(ctx, "applied schema migration", "component", component, "version", m.Version, "name", m.Name, "driver", DriverPostgres)
	}
	return nil
}

func applyPG(ctx context.Context, tx *sql.Tx, component string, m Migration) error {
	if m.Postgres != "" {
		if _, err := tx.ExecContext(ctx, m.Postgres); err != nil {
			return err
		}
	}
	if m.Func != nil {
		if err := m.Func(ctx, tx); err != nil {
			return err
		}
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (component, version, name, applied_at) VALUES ($1, $2, $3, $4)`,
		component, m.Version, m.Name, formatTime(time.Now()))
	return err
}
