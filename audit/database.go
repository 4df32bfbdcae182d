package audit

import (
	"context"
	"database/sql"
	"io"
	"strconv"
	"strings"
)

// Driver names, as storage.driver spells them.
const (
	DriverSQLite   = "sqlite"
	DriverPostgres = "postgres"
)

// Database is the one store interface the gateway wires: the audit records
// (Store) plus the shared tables other packages keep beside them (the
// approvals of package confirm). [SQLite] and [Postgres] implement it, and
// one test suite runs against both.
//
// Other packages write SQL with '?' placeholders and pass it through Rebind,
// which turns them into the driver's own ('$1', '$2', ... on PostgreSQL), so
// one query text serves both drivers. Their migrations carry the schema in
// both dialects (Migration.SQL and Migration.Postgres) under the same
// version numbers.
type Database interface {
	Store
	Completer
	io.Closer
	// ResolveStarted closes this replica's started (write-ahead) records
	// as interrupted; the gateway calls it at start.
	ResolveStarted(ctx context.Context) (int, error)
	// Driver is DriverSQLite or DriverPostgres.
	Driver() string
	// Migrate applies component's pending migrations in order.
	Migrate(ctx context.Context, component string, migs []Migration) error
	// DB is a pool for reads; write through WriteTx.
	DB() *sql.DB
	// WriteTx runs fn in one transaction and commits it if fn returns nil.
	WriteTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error
	// Prepare returns query's statement, compiled on its first use and
	// kept until Close, for WriteTx's transactions to run with
	// tx.StmtContext: a fixed query that every run writes is then not
	// compiled again for each. query must be a constant text (the store
	// keeps every one it is given). Call it before WriteTx, never inside
	// fn: SQLite's writer is one connection.
	Prepare(ctx context.Context, query string) (*sql.Stmt, error)
	// Rebind rewrites a query's '?' placeholders for this driver. Queries
	// passed to it must not hold '?' anywhere else (in a string literal,
	// say).
	Rebind(query string) string
	// Ping reports whether the database answers (/readyz).
	Ping(ctx context.Context) error
}

// Interface guards.
var (
	_ Database = (*SQLite)(nil)
	_ Database = (*Postgres)(nil)
)

// Driver is DriverSQLite.
func (s *SQLite) Driver() string { return DriverSQLite }

// Rebind returns query unchanged: SQLite takes '?' placeholders.
func (s *SQLite) Rebind(query string) string { return query }

// Ping checks that the read pool reaches the database file.
func (s *SQLite) Ping(ctx context.Context) error {
	if s.closed.Load() {
		return ErrClosed
	}
	return s.r.PingContext(ctx)
}

// rebindDollar rewrites '?' placeholders as PostgreSQL's $1, $2, ...
func rebindDollar(query string) string {
	if !strings.Contains(query, "?") {
		return query
	}
	var b strings.Builder
	b.Grow(len(query) + 8)
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
