package confirm

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/sandgate/sandgate/audit"
)

// A proposal in Slack: a Block Kit message with what the agent asks
// (kind, value, its justification) and the replayed effect (how many
// recent decisions it would change, the first few of them), with Accept
// and Reject buttons. A click is verified as every callback is (Slack's
// signature, five-minute window, a mapped user) and decides through
// Proposals.Decide: first decision wins, and a click after it is refused
// and audited. The message is rewritten when the proposal is decided
// anywhere, and when an accepted one is revoked.

const (
	slackProposalBlock  = "sandgate_proposal"
	slackProposalAccept = "proposal_accept"
	slackProposalReject = "proposal_reject"
	// slackProposalChanges is how many changed decisions the message lists.
	slackProposalChanges = 5
)

// ProposalLink is the approval page's link to proposal id under base (the
// page lists the pending proposals; the fragment names this one).
func ProposalLink(base, id string) string {
	if base == "" {
		return ""
	}
	return strings.TrimRight(base, "/") + "/#proposal=" + url.QueryEscape(id)
}

// RoutesProposal routes a proposal by its tenant (a proposal has no risk
// level: a channel's risk levels do not filter proposals).
func (s *Slack) RoutesProposal(pr Proposal) bool {
	return len(s.opts.Route.Tenants) == 0 || slices.Contains(s.opts.Route.Tenants, pr.Tenant)
}

// PostProposal sends chat.postMessage.
func (s *Slack) PostProposal(ctx context.Context, pr Proposal) (string, error) {
	return s.postMessage(ctx, proposalText(pr), s.proposalBlocks(pr))
}

// ProposalDecided sends chat.update: the message without its buttons,
// saying how the proposal was decided.
func (s *Slack) ProposalDecided(ctx context.Context, ref string, pr Proposal) error {
	return s.updateMessage(ctx, ref, proposalText(pr), s.proposalBlocks(pr))
}

// proposalOutcome says how a proposal stands.
func proposalOutcome(pr Proposal) string {
	switch pr.Status {
	case ProposalAccepted:
		return "accepted by " + pr.DecidedBy + " until " + pr.ExpiresAt.UTC().Format("2006-01-02 15:04 UTC")
	case ProposalRejected:
		return "rejected by " + pr.DecidedBy
	case ProposalRevoked:
		return "revoked by " + pr.DecidedBy
	}
	return "waiting for a decision"
}

func proposalText(pr Proposal) string {
	return fmt.Sprintf("Proposal %s %s for session %s (tenant %s): %s", pr.Kind, pr.Value, pr.SessionID, pr.Tenant, proposalOutcome(pr))
}

// proposalBlocks is the Block Kit message of pr, within Block Kit's limits.
func (s *Slack) proposalBlocks(pr Proposal) []any {
	title := "Proposal waiting for a decision"
	if pr.Status != ProposalPending {
		o := proposalOutcome(pr)
		title = "Proposal " + o
	}
	var fields []any
	add := func(k, val string) {
		if val != "" {
			fields = append(fields, mrkdwn("*"+k+"*\n"+mrkdwnEscape(clip(val, 500))))
		}
	}
	add("Tenant", pr.Tenant)
	add("Session", pr.SessionID)
	add("Agent", pr.Principal)
	add("Kind", pr.Kind)
	add("Value", pr.Value)
	out := []any{
		map[string]any{"type": "header", "text": plain(clip(title, 140))},
		map[string]any{"type": "section", "fields": fields},
		map[string]any{"type": "section", "text": mrkdwn("*The agent says*\n" + escapeClip(pr.Justification, 2000))},
		map[string]any{"type": "section", "text": mrkdwn(clip(effectText(pr.Effect), 2900))},
	}
	if pr.Reason != "" && pr.Status != ProposalPending {
		out = append(out, map[string]any{"type": "section", "text": mrkdwn("*Reason*\n" + escapeClip(pr.Reason, 2000))})
	}
	ctx := "proposal `" + pr.ID + "`"
	if link := ProposalLink(s.opts.PageURL, pr.ID); link != "" {
		ctx += " · <" + link + "|open in the approval page>"
	}
	out = append(out, map[string]any{"type": "context", "elements": []any{mrkdwn(ctx)}})
	if pr.Status == ProposalPending {
		out = append(out, map[string]any{"type": "actions", "block_id": slackProposalBlock, "elements": []any{
			map[string]any{"type": "button", "action_id": slackProposalAccept, "text": plain("Accept for 24 h"), "style": "primary", "value": pr.ID},
			map[string]any{"type": "button", "action_id": slackProposalReject, "text": plain("Reject"), "style": "danger", "value": pr.ID},
		}})
	}
	return out
}

// effectText is the replay's summary and its first changed decisions.
func effectText(e Effect) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*Effect* (replayed %d recent decisions): ", e.Replayed)
	if e.ChangedCount == 0 {
		b.WriteString("no recorded decision would change")
	} else {
		fmt.Fprintf(&b, "%d would change", e.ChangedCount)
	}
	if e.Truncated {
		b.WriteString(" (partial: the replay stopped at its time budget)")
	}
	for i, c := range e.Changed {
		if i == slackProposalChanges {
			fmt.Fprintf(&b, "\n… and %d more on the page", e.ChangedCount-i)
			break
		}
		fmt.Fprintf(&b, "\n• %s %s in %s: %s → %s", c.Time.UTC().Format("15:04"), mrkdwnEscape(clip(c.What, 100)),
			mrkdwnEscape(clip(c.SessionID, 60)), mrkdwnEscape(c.Now), mrkdwnEscape(c.Candidate))
	}
	return b.String()
}

// isProposalClick reports whether in is a click on a proposal's buttons.
func isProposalClick(in SlackInteraction) bool {
	return len(in.Actions) == 1 && in.Actions[0].BlockID == slackProposalBlock &&
		(in.Actions[0].ActionID == slackProposalAccept || in.Actions[0].ActionID == slackProposalReject)
}

// serveProposalClick decides a proposal from a verified click: a mapped
// user (and the channel's workspace), through Proposals.Decide. A click
// on a proposal already decided is refused in the audit and answered 200,
// as for a held request.
func (s *Slack) serveProposalClick(w http.ResponseWriter, r *http.Request, hub *Hub, in SlackInteraction, rec *audit.Record, team string) error {
	act := in.Actions[0]
	id := act.Value
	rec.Kind = "proposal.callback"
	rec.Detail["slack_user"], rec.Detail["slack_team"], rec.Detail["action"], rec.Detail["proposal_id"] = in.User.ID, team, act.ActionID, id
	rec.Principal = "slack:" + in.User.ID
	ps := hub.Proposals()
	if ps == nil {
		s.refuse(r.Context(), rec, ErrSlackPayload)
		return ErrSlackPayload
	}
	who, err := s.clicker(r.Context(), rec, in, team, "proposal_id", id)
	if err != nil {
		return err
	}
	approver := s.opts.Route.Approver(who)
	if pr, err := ps.Get(r.Context(), approver, id); err == nil {
		rec.Tenant, rec.SessionID = pr.Tenant, pr.SessionID
	}
	d := ProposalDecision{Decision: "reject", Reason: "rejected in Slack"}
	if act.ActionID == slackProposalAccept {
		d = ProposalDecision{Decision: "accept", Reason: "accepted in Slack"}
	}
	pr, err := ps.Decide(r.Context(), approver, id, d)
	switch {
	case errors.Is(err, ErrProposalDecided):
		s.refuse(r.Context(), rec, err)
		w.WriteHeader(http.StatusOK) // Slack shows no error; the message says how it was decided
		return nil
	case err != nil:
		s.refuse(r.Context(), rec, err)
		return err
	}
	rec.Outcome = audit.OutcomeOK
	rec.Detail["status"] = pr.Status
	s.append(r.Context(), rec)
	s.log.Info("proposal decided in slack", "proposal_id", pr.ID, "status", pr.Status, "decided_by", who, "slack_user", in.User.ID)
	w.WriteHeader(http.StatusOK)
	return nil
}

var _ ProposalChannel = (*Slack)(nil)
