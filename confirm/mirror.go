package confirm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Mirrors. In a fleet an approver's page is connected to one replica, but
// the request may wait on another. The database holds every pending
// approval, but not its code (only its SHA-256), so a hub with a Peer
// fetches each pending approval of another replica, code included, from
// the replica holding it, checks the code against the hash and the
// digest the database binds, and shows it to its own approvers as if it
// were held here. A decision on it goes through the database (Decide's
// conditional update), which releases the request on its replica; the
// NOTIFY of that decision removes the mirror everywhere.

// Peer fetches a pending approval, with its code, from the replica that
// holds it. The gateway sets it in a fleet (HubOptions.Peer).
type Peer func(ctx context.Context, replica, id string) (View, error)

// mirror is another replica's pending approval shown here.
type mirror struct {
	view View
	raw  []byte
}

// errMirror is a peer's answer that does not match the database.
var errMirror = errors.New("confirm: the peer's approval does not match the database")

// follow reacts to a notification about id, an approval this hub does
// not hold: a new pending approval of another replica is mirrored, a
// resolved mirror is removed.
func (h *Hub) follow(ctx context.Context, id string) {
	if h.opts.Peer == nil {
		return
	}
	h.mu.Lock()
	_, local := h.pending[id]
	_, known := h.remote[id]
	h.mu.Unlock()
	if local {
		return
	}
	v, replica, err := h.store.getWithReplica(ctx, id)
	if err != nil {
		return
	}
	if v.Status != StatusPending {
		if known {
			h.unmirror(v)
		}
		return
	}
	if known || replica == h.opts.Replica {
		return
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		if err := h.fetchMirror(ctx, v, replica); err != nil && ctx.Err() == nil {
			h.log.Warn("another replica's pending approval not shown here", "approval_id", id, "replica", replica, "err", err)
		}
	}()
}

// fetchMirror asks replica for v (read from the database, pending) and
// publishes it to this hub's approvers.
func (h *Hub) fetchMirror(ctx context.Context, v View, replica string) error {
	full, err := h.askPeer(ctx, v, replica)
	if err != nil {
		return err
	}
	sum := sha256.Sum256([]byte(full.Code))
	if full.ID != v.ID || full.Digest != v.Digest || full.Tenant != v.Tenant ||
		strings.TrimPrefix(v.CodeSHA256, "sha256:") != hex.EncodeToString(sum[:]) {
		return errMirror
	}
	full.Status = StatusPending
	m := mirror{view: full, raw: mustJSON(full)}
	h.mu.Lock()
	if h.closed || h.remote[v.ID] != nil {
		h.mu.Unlock()
		return nil
	}
	h.remote[v.ID] = &m
	h.broadcastLocked(full.Tenant, mustJSON(event{Type: EventRequested, ServerTime: time.Now(), Approval: m.raw}))
	h.mu.Unlock()
	// A decision announced while the peer was asked went unseen: read the
	// row again.
	if cur, err := h.store.get(ctx, v.ID); err == nil && cur.Status != StatusPending {
		h.unmirror(cur)
	}
	return nil
}

// askPeer asks replica for v. The holder records an approval (and so
// announces it) a moment before it serves it, so a miss is tried again
// with backoff while the row stays pending, for a few seconds.
func (h *Hub) askPeer(ctx context.Context, v View, replica string) (View, error) {
	wait := 20 * time.Millisecond
	for try := 0; ; try++ {
		fctx, cancel := context.WithTimeout(ctx, h.opts.WriteTimeout)
		full, err := h.opts.Peer(fctx, replica, v.ID)
		cancel()
		if err == nil || try == 7 {
			return full, err
		}
		select {
		case <-ctx.Done():
			return View{}, context.Cause(ctx)
		case <-time.After(wait):
		}
		wait *= 2
		if cur, gerr := h.store.get(ctx, v.ID); gerr == nil && cur.Status != StatusPending {
			return View{}, fmt.Errorf("confirm: approval %s resolved before its replica answered: %w", v.ID, err)
		}
	}
}

// unmirror removes a resolved mirror and tells the approvers.
func (h *Hub) unmirror(fin View) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.remote[fin.ID]
	if m == nil {
		return
	}
	delete(h.remote, fin.ID)
	fin.Patterns, fin.Reasons, fin.Principal, fin.Context, fin.Via = m.view.Patterns, m.view.Reasons, m.view.Principal, m.view.Context, m.view.Via
	fin.Code = ""
	h.history = append(h.history, fin)
	if over := len(h.history) - h.opts.HistorySize; over > 0 {
		h.history = slices.Delete(h.history, 0, over)
	}
	h.broadcastLocked(fin.Tenant, mustJSON(event{Type: EventResolved, ServerTime: time.Now(), Approval: mustJSON(fin)}))
}

// resync, after each (re)connection of the LISTEN loop, mirrors the
// pending approvals announced while it was away and removes the mirrors
// resolved meanwhile.
func (h *Hub) resync(ctx context.Context) error {
	if h.opts.Peer == nil {
		return nil
	}
	ids, err := h.store.pendingOthers(ctx, h.opts.Replica)
	if err != nil {
		return err
	}
	h.mu.Lock()
	var stale []string
	for id := range h.remote {
		if !slices.Contains(ids, id) {
			stale = append(stale, id)
		}
	}
	h.mu.Unlock()
	for _, id := range append(ids, stale...) {
		h.follow(ctx, id)
	}
	return nil
}

// remoteViews are the mirrors who may see.
func (h *Hub) remoteViewsLocked(who Approver) []*mirror {
	out := make([]*mirror, 0, len(h.remote))
	for _, m := range h.remote {
		if who.Sees(m.view.Tenant) {
			out = append(out, m)
		}
	}
	return out
}

// getWithReplica reads approval id and the replica holding it.
func (s *store) getWithReplica(ctx context.Context, id string) (View, string, error) {
	var replica string
	row := s.db.DB().QueryRowContext(ctx, s.db.Rebind(`SELECT replica, `+viewColumns+` FROM approvals WHERE id = ?`), id)
	v, err := scanView(scanPrefix{row, &replica})
	if err != nil {
		return View{}, "", fmt.Errorf("confirm: read approval: %w", err)
	}
	return v, replica, nil
}

// pendingOthers lists the pending approvals other replicas hold.
func (s *store) pendingOthers(ctx context.Context, replica string) ([]string, error) {
	rows, err := s.db.DB().QueryContext(ctx, s.db.Rebind(`SELECT id FROM approvals WHERE status = 'pending' AND replica NOT IN (?, '')`), replica)
	if err != nil {
		return nil, fmt.Errorf("confirm: list pending approvals: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// scanPrefix scans one leading column into first, the rest into the
// caller's destinations.
type scanPrefix struct {
	sc    interface{ Scan(...any) error }
	first any
}

func (p scanPrefix) Scan(dest ...any) error { return p.sc.Scan(append([]any{p.first}, dest...)...) }

// PeerView is what a Peer serves: approval id with its code, if this hub
// holds it pending.
func (h *Hub) PeerView(id string) (View, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.pending[id]
	if p == nil {
		return View{}, false
	}
	var v View
	if err := json.Unmarshal(p.raw, &v); err != nil {
		return View{}, false
	}
	return v, true
}
