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

const proposalsComponent = "confirm.proposals"

// proposalsMigrations is the proposals table's history, the same on SQLite
// and PostgreSQL. Append; never edit. A proposal is decided once: the
// UPDATE that decides it matches only a pending row.
var proposalsMigrations = []audit.Migration{{
	Version:  1,
	Name:     "create proposals",
	SQL:      proposalsTableV1 + " STRICT;\n" + proposalsIndexV1,
	Postgres: proposalsTableV1 + ";\n" + proposalsIndexV1,
}}

const proposalsTableV1 = `
CREATE TABLE proposals (
	id            TEXT NOT NULL PRIMARY KEY,
	tenant        TEXT NOT NULL,
	session_id    TEXT NOT NULL,
	kind          TEXT NOT NULL,
	value         TEXT NOT NULL,
	justification TEXT NOT NULL,
	principal     TEXT NOT NULL,
	status        TEXT NOT NULL CHECK (status IN ('pending', 'accepted', 'rejected', 'revoked')),
	created_at    TEXT NOT NULL,
	decided_by    TEXT NOT NULL DEFAULT '',
	decided_at    TEXT,
	reason        TEXT NOT NULL DEFAULT '',
	expires_at    TEXT,
	overlay       TEXT NOT NULL,
	effect        TEXT NOT NULL
)`

const proposalsIndexV1 = `CREATE INDEX proposals_status_tenant ON proposals (status, tenant)`

const proposalColumns = `id, tenant, session_id, kind, value, justification, principal, status, created_at, decided_by,
	decided_at, reason, expires_at, overlay, effect`

type proposalStore struct{ db Store }

func (s proposalStore) insert(ctx context.Context, p Proposal) error {
	overlay, err := json.Marshal(p.Overlay)
	if err != nil {
		return err
	}
	effect, err := json.Marshal(p.Effect)
	if err != nil {
		return err
	}
	return s.db.WriteTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, s.db.Rebind(`INSERT INTO proposals (id, tenant, session_id, kind, value, justification,
	principal, status, created_at, overlay, effect) VALUES (?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?)`),
			p.ID, p.Tenant, p.SessionID, p.Kind, p.Value, p.Justification, p.Principal, fmtTime(p.CreatedAt),
			string(overlay), string(effect))
		return err
	})
}

// decide moves id from fromStatus to p's status; errNotPending when it
// was not in fromStatus.
func (s proposalStore) decide(ctx context.Context, p Proposal, fromStatus string) error {
	var expires any
	if !p.ExpiresAt.IsZero() {
		expires = fmtTime(p.ExpiresAt)
	}
	return s.db.WriteTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.db.Rebind(`UPDATE proposals SET status = ?, decided_by = ?, decided_at = ?, reason = ?,
	expires_at = ? WHERE id = ? AND status = ?`), p.Status, p.DecidedBy, fmtTime(p.DecidedAt), p.Reason, expires, p.ID, fromStatus)
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

func (s proposalStore) get(ctx context.Context, id string) (Proposal, error) {
	row := s.db.DB().QueryRowContext(ctx, s.db.Rebind(`SELECT `+proposalColumns+` FROM proposals WHERE id = ?`), id)
	p, err := scanProposal(row)
	if errors.Is(err, sql.ErrNoRows) {
		return Proposal{}, ErrProposalNotFound
	}
	return p, err
}

// ProposalQuery selects proposals. Zero fields do not filter.
type ProposalQuery struct {
	Status    string
	Tenant    string
	SessionID string
	// LiveAt keeps accepted proposals not expired at that time.
	LiveAt time.Time
	Limit  int
}

func (s proposalStore) list(ctx context.Context, q ProposalQuery, tenants []string) ([]Proposal, error) {
	sqlq := `SELECT ` + proposalColumns + ` FROM proposals WHERE 1 = 1`
	var args []any
	for _, f := range []struct{ col, v string }{{"status", q.Status}, {"tenant", q.Tenant}, {"session_id", q.SessionID}} {
		if f.v != "" {
			sqlq += ` AND ` + f.col + ` = ?`
			args = append(args, f.v)
		}
	}
	if !q.LiveAt.IsZero() {
		sqlq += ` AND expires_at > ?`
		args = append(args, fmtTime(q.LiveAt))
	}
	if len(tenants) > 0 {
		sqlq += ` AND tenant IN (?` + strings.Repeat(`, ?`, len(tenants)-1) + `)`
		for _, t := range tenants {
			args = append(args, t)
		}
	}
	if q.Limit <= 0 || q.Limit > maxGrantList {
		q.Limit = maxGrantList
	}
	sqlq += ` ORDER BY created_at DESC, id DESC LIMIT ?`
	args = append(args, q.Limit)
	rows, err := s.db.DB().QueryContext(ctx, s.db.Rebind(sqlq), args...)
	if err != nil {
		return nil, fmt.Errorf("confirm: read proposals: %w", err)
	}
	defer rows.Close()
	out := []Proposal{}
	for rows.Next() {
		p, err := scanProposal(rows)
		if err != nil {
			return nil, fmt.Errorf("confirm: read proposals: %w", err)
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

func scanProposal(sc interface{ Scan(...any) error }) (Proposal, error) {
	var (
		p                Proposal
		created          string
		decided, expires sql.NullString
		overlay, effect  string
	)
	err := sc.Scan(&p.ID, &p.Tenant, &p.SessionID, &p.Kind, &p.Value, &p.Justification, &p.Principal, &p.Status, &created,
		&p.DecidedBy, &decided, &p.Reason, &expires, &overlay, &effect)
	if err != nil {
		return Proposal{}, err
	}
	p.CreatedAt = parseTime(created)
	if decided.Valid {
		p.DecidedAt = parseTime(decided.String)
	}
	if expires.Valid {
		p.ExpiresAt = parseTime(expires.String)
	}
	if err := json.Unmarshal([]byte(overlay), &p.Overlay); err != nil {
		return Proposal{}, err
	}
	if err := json.Unmarshal([]byte(effect), &p.Effect); err != nil {
		return Proposal{}, err
	}
	return p, nil
}
