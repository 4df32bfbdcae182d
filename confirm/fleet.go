package confirm

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Replicas. On PostgreSQL several gateways share the approvals table. The
// replica whose agent waits holds the approval in memory (with the code);
// any replica can decide it through the database: a conditional UPDATE
// that only matches a pending row (first decision wins fleet-wide, a
// second gets 409) and a NOTIFY with the id in the same transaction. Every
// hub LISTENs; hearing the id of an approval it holds, it reads the row
// and releases its waiting request with the decision found there.

// listenBackoff bounds the wait between LISTEN reconnections.
const (
	listenBackoffMin = 100 * time.Millisecond
	listenBackoffMax = 5 * time.Second
)

// decideRemote decides an approval another replica holds (v, read from the
// database, is pending there).
func (h *Hub) decideRemote(ctx context.Context, v View, status, by string, d Decision) (View, error) {
	if d.Digest != "" && d.Digest != v.Digest {
		return View{}, ErrDigestMismatch
	}
	now := time.Now()
	fin := v
	fin.Code = ""
	fin.Status, fin.DecidedBy, fin.Reason, fin.DecidedAt, fin.Scope = status, by, d.Reason, now, d.Scope
	fin.TimeToDecideMS = now.Sub(fin.RequestedAt).Milliseconds()
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.opts.WriteTimeout)
	defer cancel()
	err := h.store.decideRemote(wctx, &fin)
	if errors.Is(err, errNotPending) {
		cur, gerr := h.store.get(wctx, v.ID)
		if gerr != nil {
			return View{}, gerr
		}
		if cur.Status == StatusPending { // pending but past its deadline: the holder times it out
			cur.Status, cur.Reason = StatusTimeout, "no approver decided in time"
		}
		return View{}, &ConflictError{Approval: cur}
	}
	if err != nil {
		return View{}, fmt.Errorf("confirm: record decision: %w", err)
	}
	h.log.InfoContext(ctx, "approval decided for another replica", "approval_id", fin.ID, "status", fin.Status, "decided_by", by)
	return fin, nil
}

// winner reads p's row and returns the final view another replica wrote,
// if the row is resolved.
func (h *Hub) winner(ctx context.Context, p *pending) (View, bool) {
	v, err := h.store.get(ctx, p.view.ID)
	if err != nil || v.Status == StatusPending {
		return View{}, false
	}
	fin := p.view
	fin.Code = ""
	fin.Status, fin.DecidedBy, fin.Reason, fin.DecidedAt, fin.TimeToDecideMS = v.Status, v.DecidedBy, v.Reason, v.DecidedAt, v.TimeToDecideMS
	fin.Scope = v.Scope
	return fin, true
}

// release settles the approval id if this hub holds it and the database
// says it is resolved: another replica's decision.
func (h *Hub) release(ctx context.Context, id string) {
	h.mu.Lock()
	p := h.pending[id]
	h.mu.Unlock()
	if p == nil {
		return
	}
	won, ok := h.winner(ctx, p)
	if !ok {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.resolved {
		h.settleLocked(p, won)
	}
}

// listen holds the LISTEN connection until Close, reconnecting with
// backoff. After each (re)connection it re-reads every approval it holds,
// since decisions made while it was disconnected were announced to nobody.
func (h *Hub) listen(dsn string) {
	defer close(h.listenDone)
	backoff := listenBackoffMin
	for h.base.Err() == nil {
		err := h.listenOnce(dsn, func() { backoff = listenBackoffMin })
		if h.base.Err() != nil {
			return
		}
		h.log.Warn("approval LISTEN connection lost; reconnecting", "err", err, "backoff", backoff)
		select {
		case <-time.After(backoff):
		case <-h.base.Done():
			return
		}
		backoff = min(2*backoff, listenBackoffMax)
	}
}

func (h *Hub) listenOnce(dsn string, connected func()) error {
	ctx := h.base
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err // pgx's errors never carry the password
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{NotifyChannel}.Sanitize()); err != nil {
		return err
	}
	connected()
	h.mu.Lock()
	ids := make([]string, 0, len(h.pending))
	for id := range h.pending {
		ids = append(ids, id)
	}
	h.mu.Unlock()
	for _, id := range ids {
		h.release(ctx, id)
	}
	if err := h.resync(ctx); err != nil {
		h.log.Warn("other replicas' pending approvals not read", "err", err)
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		h.release(ctx, n.Payload)
		h.follow(ctx, n.Payload)
	}
}

// InterruptReplica resolves the pending approvals of another replica, one
// whose lease expired (package fleet), as interrupted: nobody waits for
// them any more. Returns how many there were.
func (h *Hub) InterruptReplica(ctx context.Context, replica string) (int64, error) {
	return h.store.interruptOf(ctx, replica, time.Now(), "the replica holding this request stopped (lease expired)")
}
