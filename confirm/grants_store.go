package confirm

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sandgate/sandgate/audit"
)

// grantsComponent names the grants table's migrations in schema_migrations.
const grantsComponent = "confirm.grants"

// grantsMigrations is the grants table's history, the same on SQLite and
// PostgreSQL. Append; never edit. A grant's binding columns are written
// once; only its use count and its revocation change afterwards.
var grantsMigrations = []audit.Migration{{
	Version:  1,
	Name:     "create grants",
	SQL:      grantsTableV1 + " STRICT;\n" + grantsIndexV1,
	Postgres: grantsTableV1 + ";\n" + grantsIndexV1,
}, {
	// An egress grant (kind egress) names the requests it covers: the
	// method, host, port and path prefix of the held request it was given
	// on (grants_egress.go). A run grant leaves them empty.
	Version:  2,
	Name:     "add egress request columns",
	SQL:      grantsEgressV2,
	Postgres: grantsEgressV2,
}}

const grantsEgressV2 = `
ALTER TABLE grants ADD COLUMN method TEXT NOT NULL DEFAULT '';
ALTER TABLE grants ADD COLUMN host TEXT NOT NULL DEFAULT '';
ALTER TABLE grants ADD COLUMN port INTEGER NOT NULL DEFAULT 0;
ALTER TABLE grants ADD COLUMN path_prefix TEXT NOT NULL DEFAULT '';`

const grantsTableV1 = `
CREATE TABLE grants (
	id           TEXT    PRIMARY KEY,
	kind         TEXT    NOT NULL,
	scope        TEXT    NOT NULL CHECK (scope IN ('session', 'tenant')),
	tenant       TEXT    NOT NULL,
	session_id   TEXT    NOT NULL,
	language     TEXT    NOT NULL,
	risk_level   TEXT    NOT NULL,
	patterns     TEXT    NOT NULL,
	approval_id  TEXT    NOT NULL,
	created_by   TEXT    NOT NULL,
	created_at   TEXT    NOT NULL,
	expires_at   TEXT    NOT NULL,
	revoked_by   TEXT    NOT NULL DEFAULT '',
	revoked_at   TEXT,
	uses         INTEGER NOT NULL DEFAULT 0,
	last_used_at TEXT
)`

const grantsIndexV1 = `CREATE INDEX grants_tenant_expires ON grants (tenant, expires_at)`

const grantColumns = `id, kind, scope, tenant, session_id, language, risk_level, patterns, approval_id, created_by,
	created_at, expires_at, revoked_by, revoked_at, uses, last_used_at, method, host, port, path_prefix`

type grantStore struct{ db Store }

func (s grantStore) insert(ctx context.Context, g Grant) error {
	pats, err := json.Marshal(nonNil(g.Patterns))
	if err != nil {
		return err
	}
	return s.db.WriteTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, s.db.Rebind(`INSERT INTO grants (id, kind, scope, tenant, session_id, language, risk_level,
	patterns, approval_id, created_by, created_at, expires_at, method, host, port, path_prefix)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
			g.ID, g.Kind, g.Scope, g.Tenant, g.SessionID, g.Language, g.Level, string(pats), g.ApprovalID, g.CreatedBy,
			fmtTime(g.CreatedAt), fmtTime(g.ExpiresAt), g.Method, g.Host, g.Port, g.PathPrefix)
		return err
	})
}

// used counts one use of id; a use is also in the run's audit record, so a
// failure here is logged, not fatal.
func (s grantStore) used(ctx context.Context, id string, at time.Time) error {
	return s.db.WriteTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, s.db.Rebind(`UPDATE grants SET uses = uses + 1, last_used_at = ? WHERE id = ?`), fmtTime(at), id)
		return err
	})
}

// revoke ends id now; errNotPending when it was already revoked.
func (s grantStore) revoke(ctx context.Context, id, by string, at time.Time) error {
	return s.db.WriteTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.db.Rebind(`UPDATE grants SET revoked_by = ?, revoked_at = ? WHERE id = ? AND revoked_at IS NULL`),
			by, fmtTime(at), id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n != 1 {
			return errNotPending
		}
		return nil
	})
}

func (s grantStore) get(ctx context.Context, id string) (Grant, error) {
	row := s.db.DB().QueryRowContext(ctx, s.db.Rebind(`SELECT `+grantColumns+` FROM grants WHERE id = ?`), id)
	g, err := scanGrant(row)
	if errors.Is(err, sql.ErrNoRows) {
		return Grant{}, ErrGrantNotFound
	}
	return g, err
}

// GrantQuery selects grants to list. Zero fields do not filter.
type GrantQuery struct {
	Tenant    string
	SessionID string
	// Live keeps only grants neither expired nor revoked at Now.
	Live bool
	Now  time.Time
	// Limit caps the answer (default and maximum 500), newest first.
	Limit int
}

const maxGrantList = 500

func (s grantStore) list(ctx context.Context, q GrantQuery, tenants []string) ([]Grant, error) {
	sqlq := `SELECT ` + grantColumns + ` FROM grants WHERE 1 = 1`
	var args []any
	if q.Tenant != "" {
		sqlq += ` AND tenant = ?`
		args = append(args, q.Tenant)
	}
	if q.SessionID != "" {
		// A tenant-wide grant applies to the session too.
		sqlq += ` AND (session_id = ? OR scope = 'tenant')`
		args = append(args, q.SessionID)
	}
	if len(tenants) > 0 {
		sqlq += ` AND tenant IN (?` + strings.Repeat(`, ?`, len(tenants)-1) + `)`
		for _, t := range tenants {
			args = append(args, t)
		}
	}
	if q.Live {
		sqlq += ` AND revoked_at IS NULL AND expires_at > ?`
		args = append(args, fmtTime(q.Now))
	}
	if q.Limit <= 0 || q.Limit > maxGrantList {
		q.Limit = maxGrantList
	}
	sqlq += ` ORDER BY created_at DESC, id DESC LIMIT ?`
	args = append(args, q.Limit)
	rows, err := s.db.DB().QueryContext(ctx, s.db.Rebind(sqlq), args...)
	if err != nil {
		return nil, fmt.Errorf("confirm: read grants: %w", err)
	}
	defer rows.Close()
	out := []Grant{}
	for rows.Next() {
		g, err := scanGrant(rows)
		if err != nil {
			return nil, fmt.Errorf("confirm: read grants: %w", err)
		}
		out = append(out, g)
	}
	return out, rows.Err()
}

func scanGrant(sc interface{ Scan(...any) error }) (Grant, error) {
	var (
		g                 Grant
		pats              string
		created, expires  string
		revoked, lastUsed sql.NullString
	)
	err := sc.Scan(&g.ID, &g.Kind, &g.Scope, &g.Tenant, &g.SessionID, &g.Language, &g.Level, &pats, &g.ApprovalID,
		&g.CreatedBy, &created, &expires, &g.RevokedBy, &revoked, &g.Uses, &lastUsed, &g.Method, &g.Host, &g.Port, &g.PathPrefix)
	if err != nil {
		return Grant{}, err
	}
	if err := json.Unmarshal([]byte(pats), &g.Patterns); err != nil {
		return Grant{}, err
	}
	g.CreatedAt, g.ExpiresAt = parseTime(created), parseTime(expires)
	if revoked.Valid {
		g.RevokedAt = parseTime(revoked.String)
	}
	if lastUsed.Valid {
		g.LastUsedAt = parseTime(lastUsed.String)
	}
	return g, nil
}
