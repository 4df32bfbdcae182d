package deerflow

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/errcode"
)

// Store is the database the registry lives in: the audit database
// (*audit.SQLite or *audit.Postgres, see audit.Database), as for approvals
// and session records. On PostgreSQL every replica of a fleet reads the
// same rows, so a sandbox made through one replica is found through any.
type Store interface {
	Migrate(ctx context.Context, component string, migs []audit.Migration) error
	DB() *sql.DB
	WriteTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error
	Rebind(query string) string
}

// registryComponent names the registry's migrations in schema_migrations.
const registryComponent = "deerflow"

// registryMigrations is the sandboxes table's history. Append; never edit.
//
// A row is one sandbox: its ids, its session, the agent that made it and
// its capability. The capability is kept as it is, not only as a digest,
// because any replica must be able to show a sandbox's sandbox_url again
// (DeerFlow's GET, a repeated create), and the replica asked may not be
// the one that minted it. That puts no new secret in the database: whoever
// reads it already holds the fleet's forwarding key (markers), with which
// requests can be signed as any replica's, and every approval's code. A
// capability found there authorises its one sandbox's AIO calls, which go
// through policy, approval and audit like any other. Lookups go through
// cap_sha256, the capability's SHA-256, so that no index compares a
// client's guess against the secret itself, byte by byte.
var registryMigrations = []audit.Migration{{
	Version:  1,
	Name:     "create deerflow sandboxes",
	SQL:      sandboxesV1 + " STRICT;\n" + sandboxesV1Index,
	Postgres: sandboxesV1 + ";\n" + sandboxesV1Index,
}}

const sandboxesV1 = `CREATE TABLE deerflow_sandboxes (
	tenant      TEXT NOT NULL,
	sandbox_id  TEXT NOT NULL,
	thread_id   TEXT NOT NULL,
	user_id     TEXT NOT NULL,
	session     TEXT NOT NULL,
	session_key TEXT NOT NULL,
	owner_role  TEXT NOT NULL,
	owner_name  TEXT NOT NULL,
	capability  TEXT NOT NULL,
	cap_sha256  TEXT NOT NULL UNIQUE,
	created_at  TEXT NOT NULL,
	PRIMARY KEY (tenant, sandbox_id)
)`

const sandboxesV1Index = `CREATE INDEX deerflow_sandboxes_session_key ON deerflow_sandboxes (session_key);`

// capPrefix marks sandgate's DeerFlow capabilities, so that one found in a
// log or a leak report is recognisable (as GitHub's token prefixes are).
const capPrefix = "sgdf_"

// Registry is the sandboxes DeerFlow created, in the store: one table
// every replica shares, so that a sandbox id and its URL work through any
// replica, a delete through any replica ends it everywhere, and the
// sandboxes survive a restart of the gateway. Its Release is a durable
// manager.SessionResource (wired in main): a session deleted or expired
// through any API takes its sandboxes with it; a shutdown leaves them.
type Registry struct {
	db Store
}

// OpenRegistry brings the registry's table up to date in db.
func OpenRegistry(ctx context.Context, db Store) (*Registry, error) {
	if err := db.Migrate(ctx, registryComponent, registryMigrations); err != nil {
		return nil, fmt.Errorf("deerflow: sandbox registry: %w", err)
	}
	return &Registry{db: db}, nil
}

// sandbox is one provisioned sandbox.
type sandbox struct {
	tenant, id       string
	threadID, userID string
	// session is the session's name in the tenant; sessionKey its key
	// (what Release is called with, and what the fleet routes by).
	session, sessionKey string
	// ownerRole and ownerName are the agent that created the sandbox;
	// AIO calls run as it.
	ownerRole, ownerName string
	cap                  string
	created              time.Time
}

// errSandboxConflict is a create of an existing sandbox id for another
// thread or user.
var errSandboxConflict = errcode.New(errcode.Conflict, "this sandbox_id exists for another thread or user")

// newCapability returns a fresh capability.
func newCapability() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	return capPrefix + base64.RawURLEncoding.EncodeToString(b[:])
}

func capDigest(c string) string {
	h := sha256.Sum256([]byte(c))
	return hex.EncodeToString(h[:])
}

const timeLayout = "2006-01-02T15:04:05.000000000Z07:00"

const sandboxColumns = `tenant, sandbox_id, thread_id, user_id, session, session_key, owner_role, owner_name, capability, created_at`

type scanner interface{ Scan(dest ...any) error }

func scanSandbox(row scanner) (*sandbox, error) {
	sb := &sandbox{}
	var created string
	if err := row.Scan(&sb.tenant, &sb.id, &sb.threadID, &sb.userID, &sb.session, &sb.sessionKey,
		&sb.ownerRole, &sb.ownerName, &sb.cap, &created); err != nil {
		return nil, err
	}
	sb.created, _ = time.Parse(timeLayout, created)
	return sb, nil
}

// create returns the tenant's sandbox sb.id, made now (created) or before.
// An existing sandbox is returned as it is when it has the same thread and
// user (the provisioner's create is idempotent, also when two replicas
// race), and is a conflict otherwise. A new one gets a fresh capability.
func (g *Registry) create(ctx context.Context, want sandbox) (_ *sandbox, created bool, err error) {
	want.cap, want.created = newCapability(), time.Now()
	err = g.db.WriteTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, g.db.Rebind(`INSERT INTO deerflow_sandboxes (`+sandboxColumns+`, cap_sha256)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tenant, sandbox_id) DO NOTHING`),
			want.tenant, want.id, want.threadID, want.userID, want.session, want.sessionKey, want.ownerRole, want.ownerName,
			want.cap, want.created.UTC().Format(timeLayout), capDigest(want.cap))
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		created = n == 1
		return err
	})
	if err != nil {
		return nil, false, fmt.Errorf("deerflow: register a sandbox: %w", err)
	}
	if created {
		return &want, true, nil
	}
	sb, ok, err := g.get(ctx, want.tenant, want.id)
	switch {
	case err != nil:
		return nil, false, err
	case !ok:
		// Deleted between the insert and the read: as if the create had
		// come first and the delete after it.
		return nil, false, errSandboxNotFound
	case sb.threadID != want.threadID || sb.userID != want.userID:
		return nil, false, errSandboxConflict
	}
	return sb, false, nil
}

// get returns the tenant's sandbox id.
func (g *Registry) get(ctx context.Context, tenant, id string) (*sandbox, bool, error) {
	row := g.db.DB().QueryRowContext(ctx, g.db.Rebind(`SELECT `+sandboxColumns+` FROM deerflow_sandboxes
	WHERE tenant = ? AND sandbox_id = ?`), tenant, id)
	return found(scanSandbox(row))
}

// byCapability returns the sandbox capability c belongs to.
func (g *Registry) byCapability(ctx context.Context, c string) (*sandbox, bool, error) {
	if !strings.HasPrefix(c, capPrefix) {
		return nil, false, nil
	}
	row := g.db.DB().QueryRowContext(ctx, g.db.Rebind(`SELECT `+sandboxColumns+` FROM deerflow_sandboxes
	WHERE cap_sha256 = ?`), capDigest(c))
	sb, ok, err := found(scanSandbox(row))
	if ok && subtle.ConstantTimeCompare([]byte(sb.cap), []byte(c)) != 1 {
		return nil, false, nil // a SHA-256 collision: not in this universe
	}
	return sb, ok, err
}

func found(sb *sandbox, err error) (*sandbox, bool, error) {
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("deerflow: read the sandbox registry: %w", err)
	}
	return sb, true, nil
}

// list returns the tenant's sandboxes, oldest first.
func (g *Registry) list(ctx context.Context, tenant string) ([]*sandbox, error) {
	rows, err := g.db.DB().QueryContext(ctx, g.db.Rebind(`SELECT `+sandboxColumns+` FROM deerflow_sandboxes
	WHERE tenant = ? ORDER BY created_at, sandbox_id`), tenant)
	if err != nil {
		return nil, fmt.Errorf("deerflow: list sandboxes: %w", err)
	}
	defer rows.Close()
	var out []*sandbox
	for rows.Next() {
		sb, err := scanSandbox(rows)
		if err != nil {
			return nil, fmt.Errorf("deerflow: list sandboxes: %w", err)
		}
		out = append(out, sb)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("deerflow: list sandboxes: %w", err)
	}
	return out, nil
}

// remove forgets the tenant's sandbox id and so kills its capability, on
// every replica at once.
func (g *Registry) remove(ctx context.Context, tenant, id string) error {
	return g.exec(ctx, `DELETE FROM deerflow_sandboxes WHERE tenant = ? AND sandbox_id = ?`, tenant, id)
}

// Release forgets every sandbox on the session whose key is sessionKey,
// killing their capabilities. It is a durable manager.SessionResource's
// Release: a session deleted or expired through any API, on any replica,
// takes its sandboxes with it.
func (g *Registry) Release(ctx context.Context, sessionKey string) error {
	return g.exec(ctx, `DELETE FROM deerflow_sandboxes WHERE session_key = ?`, sessionKey)
}

func (g *Registry) exec(ctx context.Context, query string, args ...any) error {
	err := g.db.WriteTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, g.db.Rebind(query), args...)
		return err
	})
	if err != nil {
		return fmt.Errorf("deerflow: forget sandboxes: %w", err)
	}
	return nil
}
