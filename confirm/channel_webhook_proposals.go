package confirm

import (
	"context"
	"encoding/json"
	"slices"
	"time"
)

// Webhook channel event types of proposals: a new proposal, and its
// decision (accepted, rejected), and the revocation of an accepted one.
const (
	WebhookProposalRequested = "proposal.requested"
	WebhookProposalAccepted  = "proposal.accepted"
	WebhookProposalRejected  = "proposal.rejected"
	WebhookProposalRevoked   = "proposal.revoked"
	// webhookProposalChanges bounds the changed decisions a webhook
	// carries (Effect.ChangedCount counts them all).
	webhookProposalChanges = 20
)

// WebhookProposalData is the data of a proposal's webhook request: the
// proposal with its effect (the first changes), and the page's link to
// it, where an approver decides (authenticated there).
type WebhookProposalData struct {
	Proposal    Proposal `json:"proposal"`
	DecisionURL string   `json:"decision_url"`
}

// WebhookProposalPayload is the body of a proposal's webhook request.
type WebhookProposalPayload struct {
	Type      string              `json:"type"`
	Timestamp time.Time           `json:"timestamp"`
	Data      WebhookProposalData `json:"data"`
}

// RoutesProposal routes a proposal by its tenant (a channel's risk levels
// do not filter proposals, which have none).
func (w *Webhook) RoutesProposal(pr Proposal) bool {
	return len(w.opts.Route.Tenants) == 0 || slices.Contains(w.opts.Route.Tenants, pr.Tenant)
}

// PostProposal sends proposal.requested.
func (w *Webhook) PostProposal(ctx context.Context, pr Proposal) (string, error) {
	return "", w.sendProposal(ctx, WebhookProposalRequested, pr)
}

// ProposalDecided sends proposal.accepted, .rejected or .revoked.
func (w *Webhook) ProposalDecided(ctx context.Context, _ string, pr Proposal) error {
	return w.sendProposal(ctx, "proposal."+pr.Status, pr)
}

// sendProposal makes one attempt. The webhook-id is the proposal's id and
// the type's last word, the same across retries.
func (w *Webhook) sendProposal(ctx context.Context, typ string, pr Proposal) error {
	if len(pr.Effect.Changed) > webhookProposalChanges {
		pr.Effect.Changed = pr.Effect.Changed[:webhookProposalChanges]
	}
	body, err := json.Marshal(WebhookProposalPayload{Type: typ, Timestamp: time.Now().UTC(),
		Data: WebhookProposalData{Proposal: pr, DecisionURL: ProposalLink(w.opts.PageURL, pr.ID)}})
	if err != nil {
		return Permanent(err)
	}
	return w.deliver(ctx, pr.ID+"."+typ[len("proposal."):], body)
}

var _ ProposalChannel = (*Webhook)(nil)
