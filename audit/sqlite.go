package audit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

// Defaults for Options.
const (
	DefaultBusyTimeout  = 5 * time.Second
	DefaultWriteTimeout = 10 * time.Second
	// readPoolSize is the number of read-only connections. Reads are the
	// admin audit API only, so a handful is plenty.
	readPoolSize = 4
)

// Options configures Open. The zero value is valid.
type Options struct {
	// Logger receives lifecycle events (open, migrations). Nil discards them.
	Logger *slog.Logger
	// BusyTimeout is how long a connection waits for a database lock held
	// by another connection before failing with SQLITE_BUSY. Default 5s.
	BusyTimeout time.Duration
	// WriteTimeout bounds one Append, which otherwise ignores its caller's
	// cancellation (see SQLite.Append). Default 10s.
	WriteTimeout time.Duration
	// MaxQueryLimit is the largest page Query returns. Default 1000; the
	// default page size is DefaultQueryLimit (100).
	MaxQueryLimit int
	// Synchronous is SQLite's synchronous setting for the WAL: "full"
	// (default, see SQLite) or "normal", which skips the fsync per commit
	// and can lose the newest records on a power or kernel failure (never
	// on a process crash).
	Synchronous string
	// Replica names this process's hash chain (see chain.go) and the
	// write-ahead records ResolveStarted may close. Every process writing
	// one database needs its own; default DefaultReplica.
	Replica string
}

// DefaultReplica is the chain name of a lone gateway.
const DefaultReplica = "local"

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.BusyTimeout <= 0 {
		o.BusyTimeout = DefaultBusyTimeout
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.MaxQueryLimit <= 0 {
		o.MaxQueryLimit = DefaultMaxQueryLimit
	}
	if o.Synchronous == "" {
		o.Synchronous = "full"
	}
	if o.Replica == "" {
		o.Replica = DefaultReplica
	}
	return o
}

// SQLite is the durable Store: an embedded SQLite database file.
//
// Durability. The database runs in WAL mode with synchronous=FULL: the WAL
// is fsynced at every commit, before Append returns. With synchronous=NORMAL
// a WAL commit is only fsynced at checkpoints, so a power cut or kernel crash
// can roll back the last committed records even though the gateway already
// answered the requests they describe. For an audit trail that is the wrong
// trade: an attacker who can crash the host right after a denied (or
// approved) request could erase its trace. FULL costs one fsync per commit:
// about 0.2 ms per lone record on the development VM (BenchmarkAppend), small
// next to running code in a sandbox, and group commit (below) shares it
// between concurrent records. (A process crash alone loses nothing under
// either setting; the difference is power or OS failure.)
// The one exception is the completion of a write-ahead record, whose trace
// is already durable: see Complete.
//
// Concurrency. SQLite admits one writer at a time, so all writes go through
// a single connection guarded by a token that serialises them in-process;
// they never contend for the lock and never see SQLITE_BUSY. Appends are
// queued to one writer goroutine that commits whatever has queued up in one
// transaction (group commit): under load many records share one fsync, and
// a lone record costs one transaction as it would anyway. WriteTx and
// Migrate take the token directly. Reads use a separate pool of query_only
// connections, which WAL lets run concurrently with the writer.
//
// Immutability. There is no update or delete API, and triggers abort any
// UPDATE, DELETE or replacing INSERT (INSERT OR REPLACE, which would
// otherwise delete the old row without firing DELETE triggers) on the
// records table, whatever connection issues it.
// Triggers guard against mistakes and SQL reaching the wrong table; they are
// not tamper-proofing against someone who can write the file itself.
type SQLite struct {
	path         string
	log          *slog.Logger
	writeTimeout time.Duration
	maxLimit     int
	synchronous  string // validated: "FULL" or "NORMAL"
	replica      string
	last         string // the chain's last hash; the writer goroutine's alone after Open

	w      *sql.DB       // exactly one connection; use only while holding wtoken
	r      *sql.DB       // read-only pool
	wtoken chan struct{} // holds one token; taking it is the write lock
	insert *sql.Stmt     // prepared on w
	stmts  stmtCache     // Prepare's, on w

	// Appends queue here for the group-commit writer (writeLoop). queueMu
	// makes closing the queue safe against concurrent sends: senders hold
	// it shared, Close holds it exclusively.
	queue       chan *appendReq
	queueMu     sync.RWMutex
	queueClosed bool // guarded by queueMu
	writerDone  chan struct{}

	closeOnce sync.Once
	closed    atomic.Bool // set under wtoken
	closeErr  error
}

// Open opens (creating if needed) the audit database at path, a filesystem
// path to a file. Missing parent directories are created with mode 0700 and
// the file with mode 0600; an existing file readable by others is tightened
// to 0600. It applies pending migrations before returning.
func Open(ctx context.Context, path string, opts Options) (*SQLite, error) {
	opts = opts.withDefaults()
	sync := strings.ToUpper(opts.Synchronous)
	if sync != "FULL" && sync != "NORMAL" {
		return nil, fmt.Errorf("audit: synchronous %q: want full or normal", opts.Synchronous)
	}
	if err := checkPath(path); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("audit: database path %q: %w", path, err)
	}
	if err := prepareFile(abs, opts.Logger); err != nil {
		return nil, err
	}

	s := &SQLite{
		synchronous:  sync,
		replica:      opts.Replica,
		path:         abs,
		log:          opts.Logger,
		writeTimeout: opts.WriteTimeout,
		maxLimit:     opts.MaxQueryLimit,
		wtoken:       make(chan struct{}, 1),
		queue:        make(chan *appendReq, maxBatch),
		writerDone:   make(chan struct{}),
	}
	s.wtoken <- struct{}{}
	if err := s.open(ctx, opts.BusyTimeout); err != nil {
		return nil, errors.Join(err, s.closeDBs())
	}
	go s.writeLoop()
	s.log.InfoContext(ctx, "audit database open", "path", abs, "journal_mode", "wal", "synchronous", strings.ToLower(s.synchronous))
	return s, nil
}

func checkPath(path string) error {
	switch {
	case path == "":
		return errors.New("audit: empty database path")
	case strings.HasPrefix(path, ":") || strings.HasPrefix(path, "file:"):
		// ":memory:" would give every pooled connection its own empty
		// database, and URIs could smuggle in options.
		return fmt.Errorf("audit: database path %q: want a filesystem path", path)
	case strings.ContainsAny(path, "?#\x00"):
		return fmt.Errorf("audit: database path %q: must not contain '?', '#' or NUL", path)
	}
	return nil
}

// prepareFile creates the directory (0700) and the database file (0600)
// before SQLite touches them, so that permissions are ours and an unusable
// path fails with a plain filesystem error instead of SQLITE_CANTOPEN.
// SQLite gives the -wal and -shm files the database file's mode.
func prepareFile(path string, log *slog.Logger) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("audit: create database directory %q: %w", dir, err)
	}
	if fi, err := os.Stat(dir); err == nil && fi.Mode().Perm()&0o077 != 0 {
		// Not ours to change (it may be shared); say so and carry on,
		// the file itself is 0600.
		log.Warn("audit database directory is accessible to other users", "dir", dir, "mode", fi.Mode().Perm().String())
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("audit: open database file %q: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("audit: stat database file %q: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("audit: database file %q: not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		if err := f.Chmod(0o600); err != nil {
			return fmt.Errorf("audit: restrict database file %q to 0600: %w", path, err)
		}
		log.Warn("audit database file was accessible to other users; restricted to 0600", "path", path, "was", perm.String())
	}
	return nil
}

// dsn builds a modernc.org/sqlite data source name for path.
func dsn(path string, busy time.Duration, extra ...string) string {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout("+strconv.FormatInt(busy.Milliseconds(), 10)+")")
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "trusted_schema(0)")
	for _, p := range extra {
		q.Add("_pragma", p)
	}
	return path + "?" + q.Encode()
}

func (s *SQLite) open(ctx context.Context, busy time.Duration) error {
	var err error
	// The writer sets the persistent journal mode; BEGIN IMMEDIATE takes
	// the write lock up front so a transaction cannot fail halfway on a
	// read-to-write upgrade.
	s.w, err = sql.Open("sqlite", dsn(s.path, busy, "journal_mode(WAL)", "synchronous("+s.synchronous+")", "journal_size_limit(67108864)")+"&_txlock=immediate")
	if err != nil {
		return fmt.Errorf("audit: open %q: %w", s.path, err)
	}
	s.w.SetMaxOpenConns(1)
	s.w.SetMaxIdleConns(1)
	s.w.SetConnMaxLifetime(0)
	s.w.SetConnMaxIdleTime(0)

	var mode string
	if err := s.w.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fmt.Errorf("audit: open %q: %w", s.path, err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("audit: open %q: journal mode is %q, want wal (does the filesystem support it?)", s.path, mode)
	}
	if err := s.Migrate(ctx, auditComponent, auditMigrations); err != nil {
		return err
	}
	if s.last, err = chainHead(ctx, s.w, s.Rebind, s.replica); err != nil {
		return err
	}
	if s.insert, err = s.w.PrepareContext(ctx, insertSQL); err != nil {
		return fmt.Errorf("audit: prepare insert: %w", err)
	}

	s.r, err = sql.Open("sqlite", dsn(s.path, busy, "query_only(1)"))
	if err != nil {
		return fmt.Errorf("audit: open %q for reading: %w", s.path, err)
	}
	s.r.SetMaxOpenConns(readPoolSize)
	s.r.SetMaxIdleConns(readPoolSize)
	if err := s.r.PingContext(ctx); err != nil {
		return fmt.Errorf("audit: open %q for reading: %w", s.path, err)
	}
	return nil
}

// Path is the absolute path of the database file.
func (s *SQLite) Path() string { return s.path }

// DB is the read-only connection pool (every connection has query_only
// set), for packages that keep their own tables in this database and query
// them. Write through WriteTx instead. Do not close it.
func (s *SQLite) DB() *sql.DB { return s.r }

// WriteTx runs fn in a transaction on the single writer connection,
// serialised with Append and every other WriteTx, and commits it if fn
// returns nil. It is how other packages write their own tables (created with
// Migrate) without contending with audit appends for SQLite's write lock.
// fn must use tx only, not DB, and must not call back into the store.
// Unlike Append, WriteTx honours ctx.
func (s *SQLite) WriteTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	if err := s.lockWriter(ctx); err != nil {
		return err
	}
	defer s.unlockWriter()
	tx, err := s.w.BeginTx(ctx, nil)
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

func rollback(tx *sql.Tx) error {
	if err := tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("audit: rollback: %w", err)
	}
	return nil
}

// lockWriter takes the write token, or fails when ctx ends first or the
// store is closed.
func (s *SQLite) lockWriter(ctx context.Context) error {
	select {
	case <-s.wtoken:
	case <-ctx.Done():
		return fmt.Errorf("audit: waiting for the writer: %w", context.Cause(ctx))
	}
	if s.closed.Load() {
		s.unlockWriter()
		return ErrClosed
	}
	return nil
}

func (s *SQLite) unlockWriter() { s.wtoken <- struct{}{} }

// Close stops accepting appends, waits until those already queued and any
// write in progress are committed, and closes the database.
// Later calls return the first call's result; operations after Close fail
// with ErrClosed.
func (s *SQLite) Close() error {
	s.closeOnce.Do(func() {
		s.queueMu.Lock()
		s.queueClosed = true
		close(s.queue)
		s.queueMu.Unlock()
		<-s.writerDone // the writer drains what was queued first
		<-s.wtoken
		s.closed.Store(true)
		s.closeErr = s.closeDBs()
		s.unlockWriter()
		s.log.Info("audit database closed", "path", s.path)
	})
	return s.closeErr
}

func (s *SQLite) closeDBs() error {
	var errs []error
	if s.insert != nil {
		errs = append(errs, s.insert.Close())
	}
	if s.r != nil {
		errs = append(errs, s.r.Close())
	}
	if s.w != nil {
		errs = append(errs, s.w.Close())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("audit: close %q: %w", s.path, err)
	}
	return nil
}
