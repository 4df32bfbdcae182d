package fleet

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// The session registry. A session (its key, tenant~name) is served by one
// replica at a time, its owner, because the per-session state that is not
// in the shared workspace (warm interpreters and zygotes, kernels, the
// browser, in-flight runs) lives in that process. The sessions table maps
// each key to its owner; a session's lease is its owner's replica lease,
// renewed by the one replica heartbeat, so a replica with thousands of
// sessions writes once per heartbeat, not once per session.
//
// A request for a session another live replica owns is forwarded to it
// (Router). A session whose owner's lease expired, or that has no owner,
// is claimed by the replica that receives its next request: it adopts
// the session, whose files are on the workspace storage every replica
// mounts (CheckShared).

// Owner is where a session is served.
type Owner struct {
	// Local: this replica serves the session (it owns it, or just claimed
	// it).
	Local bool
	// Replica and URL name the live replica that owns it when it is not
	// this one. URL is empty while that replica has not published its
	// address yet (it is starting).
	Replica, URL string
	// AdoptedFrom names the expired replica this one just took the
	// session from ("" if none).
	AdoptedFrom string
}

// SetURL publishes the address the other replicas forward this replica's
// sessions to (its listener, or storage.advertise_url).
func (r *Registry) SetURL(ctx context.Context, url string) error {
	r.url.Store(&url)
	_, err := r.db.DB().ExecContext(ctx, `UPDATE replicas SET url = $2 WHERE name = $1`, r.opts.Replica, url)
	if err != nil {
		return fmt.Errorf("fleet: publish the replica's address: %w", err)
	}
	return nil
}

// URL is this replica's published address ("" before SetURL).
func (r *Registry) URL() string {
	if p := r.url.Load(); p != nil {
		return *p
	}
	return ""
}

// Name is this replica's name.
func (r *Registry) Name() string { return r.opts.Replica }

// Claim returns the owner of session key, making this replica its owner
// when it has none or its owner's lease expired. A session owned by this
// replica is served here even when this replica is leaving the fleet (it
// finishes what reaches it); a replica that is not a live member (it left,
// or was cut off past its lease) serves an unowned session without
// claiming it, so that whichever live replica gets the next request
// claims it.
func (r *Registry) Claim(ctx context.Context, key string) (Owner, error) {
	for range 3 {
		cur, found, err := r.owner(ctx, key)
		if err != nil {
			return Owner{}, err
		}
		switch {
		case found && cur.Replica == r.opts.Replica:
			return Owner{Local: true}, nil
		case found && cur.alive:
			return Owner{Replica: cur.Replica, URL: cur.URL}, nil
		}
		claimed, err := r.claim(ctx, key)
		if err != nil {
			return Owner{}, err
		}
		if claimed == claimOK {
			o := Owner{Local: true}
			if found {
				o.AdoptedFrom = cur.Replica
			}
			return o, nil
		}
		if claimed == claimNotMember {
			return Owner{Local: true}, nil
		}
		// Another replica claimed it between the read and the write:
		// read again.
	}
	return Owner{}, errors.New("fleet: session ownership kept changing; giving up")
}

type current struct {
	Replica, URL string
	alive        bool
}

func (r *Registry) owner(ctx context.Context, key string) (current, bool, error) {
	var c current
	err := r.db.DB().QueryRowContext(ctx, `SELECT s.replica, coalesce(r.url, ''), coalesce(r.lease_until > now(), false)
	FROM sessions s LEFT JOIN replicas r ON r.name = s.replica WHERE s.key = $1`, key).Scan(&c.Replica, &c.URL, &c.alive)
	if errors.Is(err, sql.ErrNoRows) {
		return c, false, nil
	}
	if err != nil {
		return c, false, fmt.Errorf("fleet: read the owner of a session: %w", err)
	}
	return c, true, nil
}

type claimResult int

const (
	claimOK claimResult = iota
	claimLost
	claimNotMember
)

// claim takes key for this replica if this replica is a live member and
// the session has no live owner, in one statement.
func (r *Registry) claim(ctx context.Context, key string) (claimResult, error) {
	var member bool
	err := r.db.DB().QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM replicas WHERE name = $1 AND lease_until > now())`,
		r.opts.Replica).Scan(&member)
	if err != nil {
		return 0, fmt.Errorf("fleet: claim a session: %w", err)
	}
	if !member {
		return claimNotMember, nil
	}
	res, err := r.db.DB().ExecContext(ctx, `INSERT INTO sessions (key, replica, claimed_at) VALUES ($1, $2, now())
	ON CONFLICT (key) DO UPDATE SET replica = EXCLUDED.replica, claimed_at = now()
	WHERE sessions.replica = EXCLUDED.replica
	   OR NOT EXISTS (SELECT 1 FROM replicas p WHERE p.name = sessions.replica AND p.lease_until > now())`,
		key, r.opts.Replica)
	if err != nil {
		return 0, fmt.Errorf("fleet: claim a session: %w", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return claimLost, nil
	}
	return claimOK, nil
}

// Release forgets this replica's ownership of key (the session was
// deleted): its next request, wherever it lands, claims it afresh.
func (r *Registry) Release(ctx context.Context, key string) error {
	_, err := r.db.DB().ExecContext(ctx, `DELETE FROM sessions WHERE key = $1 AND replica = $2`, key, r.opts.Replica)
	if err != nil {
		return fmt.Errorf("fleet: release a session: %w", err)
	}
	return nil
}
