package confirm

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// Proposals reach the approval channels as held requests do: each new
// proposal is posted to every channel that takes proposals
// (ProposalChannel) and routes its tenant, and the message is updated when
// the proposal is decided (accepted, rejected) and again when an accepted
// one is revoked, wherever that happened: the replica that posted it looks
// at the proposals it posted on each refresh, so a decision made on
// another replica (or in the database) reaches the message too. A channel
// that carries decisions back (Slack's buttons) decides through
// Proposals.Decide, like the page and the API: first decision wins.
//
// Delivery never stands in the agent's way: the POST that made the
// proposal has answered before any channel hears of it, a failure is
// retried with backoff, and nothing a channel does decides a proposal.

// ProposalChannel is an approval channel that is told of proposals too.
type ProposalChannel interface {
	Channel
	// RoutesProposal reports whether pr is routed to the channel (by its
	// tenant: a proposal has no risk level).
	RoutesProposal(pr Proposal) bool
	// PostProposal tells the channel of a new proposal (with its effect);
	// ref is what it needs to update its message.
	PostProposal(ctx context.Context, pr Proposal) (ref string, err error)
	// ProposalDecided tells it that pr's status changed (accepted,
	// rejected, revoked).
	ProposalDecided(ctx context.Context, ref string, pr Proposal) error
}

// proposalPostAttempts bounds the attempts at posting a proposal: unlike
// a held request nobody waits on it, and the page lists it anyway.
const proposalPostAttempts = 12

// postedProposal is a proposal's message in one channel.
type postedProposal struct {
	ch      ProposalChannel
	ref     string
	status  string    // the status the message shows
	busy    bool      // an update is in flight
	expires time.Time // an accepted proposal's expiry, once seen
}

// proposalDelivery is the channels' side of Proposals.
type proposalDelivery struct {
	mu       sync.Mutex
	channels []ProposalChannel
	posted   map[string][]*postedProposal // proposal id -> its messages
	retryMin time.Duration
	retryMax time.Duration
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// useChannels gives p the hub's channels that take proposals (NewHub
// calls it).
func (p *Proposals) useChannels(chs []Channel, retryMin, retryMax time.Duration) {
	d := &p.delivery
	d.mu.Lock()
	defer d.mu.Unlock()
	d.channels = nil
	for _, ch := range chs {
		if pc, ok := ch.(ProposalChannel); ok {
			d.channels = append(d.channels, pc)
		}
	}
	d.retryMin, d.retryMax = retryMin, retryMax
}

func (d *proposalDelivery) init() {
	d.posted = map[string][]*postedProposal{}
	d.ctx, d.cancel = context.WithCancel(context.Background())
}

// closeDelivery abandons the deliveries in flight and waits for them.
func (d *proposalDelivery) closeDelivery() {
	d.cancel()
	d.wg.Wait()
}

// notifyProposal starts posting a new proposal to its channels.
func (p *Proposals) notifyProposal(pr Proposal) {
	d := &p.delivery
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, ch := range d.channels {
		if !ch.RoutesProposal(pr) {
			continue
		}
		d.wg.Add(1)
		go p.postProposal(ch, pr)
	}
}

func (p *Proposals) postProposal(ch ProposalChannel, pr Proposal) {
	d := &p.delivery
	defer d.wg.Done()
	log := p.log.With("channel", ch.Name(), "proposal_id", pr.ID)
	for n := 1; n <= proposalPostAttempts; n++ {
		ref, err := ch.PostProposal(d.ctx, pr)
		if err == nil {
			d.mu.Lock()
			d.posted[pr.ID] = append(d.posted[pr.ID], &postedProposal{ch: ch, ref: ref, status: pr.Status})
			d.mu.Unlock()
			// Decided while it was being posted: the next look updates it.
			p.syncPosted(d.ctx, pr.ID)
			return
		}
		if d.ctx.Err() != nil || !retryWait(d.ctx, log, "post proposal", n, err, d.retryMin, d.retryMax, nil) {
			return
		}
	}
	log.Warn("proposal not posted to the approval channel; giving up", "attempts", proposalPostAttempts)
}

// syncPosted updates the messages of proposal id to its current status.
func (p *Proposals) syncPosted(ctx context.Context, id string) {
	d := &p.delivery
	d.mu.Lock()
	msgs := d.posted[id]
	d.mu.Unlock()
	if len(msgs) == 0 {
		return
	}
	pr, err := p.store.get(ctx, id)
	if err != nil {
		p.log.WarnContext(ctx, "posted proposal not read", "proposal_id", id, "err", err)
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, m := range msgs {
		m.expires = pr.ExpiresAt
		// A status read before a later decision landed must not undo the
		// message: a proposal only moves forward (pending, then accepted
		// or rejected, then revoked).
		if m.busy || proposalStage(pr.Status) <= proposalStage(m.status) {
			continue
		}
		m.busy = true
		d.wg.Add(1)
		go p.updateProposal(m, pr)
	}
	// A rejected or revoked proposal's messages are final; an accepted
	// one's change once more when it is revoked (an expiry leaves it).
	if pr.Status == ProposalRejected || pr.Status == ProposalRevoked {
		delete(d.posted, id)
	}
}

// proposalStage orders a proposal's statuses as they can follow each
// other.
func proposalStage(status string) int {
	switch status {
	case ProposalAccepted, ProposalRejected:
		return 1
	case ProposalRevoked:
		return 2
	}
	return 0
}

func (p *Proposals) updateProposal(m *postedProposal, pr Proposal) {
	d := &p.delivery
	defer d.wg.Done()
	log := p.log.With("channel", m.ch.Name(), "proposal_id", pr.ID)
	defer func() {
		d.mu.Lock()
		m.busy = false
		d.mu.Unlock()
	}()
	for n := 1; n <= channelResolvedAttempts; n++ {
		err := m.ch.ProposalDecided(d.ctx, m.ref, pr)
		if err == nil {
			d.mu.Lock()
			m.status = pr.Status
			d.mu.Unlock()
			return
		}
		if d.ctx.Err() != nil || !retryWait(d.ctx, log, "update proposal", n, err, d.retryMin, d.retryMax, nil) {
			return
		}
	}
	log.Warn("approval channel not told of the proposal's decision; giving up", "attempts", channelResolvedAttempts)
}

// syncAllPosted updates every posted proposal whose status changed (the
// refresh calls it: decisions made on other replicas, or expiries).
func (p *Proposals) syncAllPosted(ctx context.Context) {
	d := &p.delivery
	d.mu.Lock()
	ids := make([]string, 0, len(d.posted))
	for id := range d.posted {
		ids = append(ids, id)
	}
	d.mu.Unlock()
	slices.Sort(ids)
	for _, id := range ids {
		p.syncPosted(ctx, id)
	}
	// Accepted proposals that expired keep their message as it is; drop
	// them once past their expiry, so the map stays bounded.
	now := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	for id, msgs := range d.posted {
		if len(msgs) > 0 && !msgs[0].expires.IsZero() && now.After(msgs[0].expires) {
			delete(d.posted, id)
		}
	}
}

// retryWait logs the n-th failure and waits before the next attempt; false
// when there should be none (a permanent failure, ctx ended, or stop
// closed; a nil stop never closes). Request and proposal deliveries retry
// through it, so both back off and log alike.
func retryWait(ctx context.Context, log *slog.Logger, what string, n int, err error, lo, hi time.Duration, stop <-chan struct{}) bool {
	var pe *PermanentError
	if errors.As(err, &pe) {
		log.Error("approval channel failed; not retrying", "op", what, "err", err)
		return false
	}
	var ra time.Duration
	if re := (*RetryAfterError)(nil); errors.As(err, &re) {
		ra = re.After
	}
	wait := channelBackoff(lo, hi, n, ra)
	level := slog.LevelDebug
	if n == 1 {
		level = slog.LevelWarn
	}
	log.Log(ctx, level, "approval channel failed; retrying", "op", what, "attempt", n, "err", err, "retry_in", wait.Round(time.Millisecond))
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-stop:
		return false
	case <-ctx.Done():
		return false
	}
}
