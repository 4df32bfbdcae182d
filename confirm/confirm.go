// Package confirm asks a human (or, in development, nobody) whether a request
// the policy marked require_approval may run.
//
// The manager depends only on Service. This package ships AutoApprove, which
// exists for PERMISSIVE development setups; the WebSocket approval hub and
// its web page implement the same interface.
package confirm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/sandgate/sandgate/policy"
)

// Statuses of an approval.
const (
	StatusApproved    = "approved"
	StatusDenied      = "denied"
	StatusTimeout     = "timeout"
	StatusWithdrawn   = "withdrawn"
	StatusInterrupted = "interrupted"
)

// ErrNotPermissive is returned when AutoApprove is requested outside
// PERMISSIVE mode: auto-approval in production would turn every
// require_approval into allow.
var ErrNotPermissive = errors.New("auto-approve is allowed only in PERMISSIVE mode")

// Kinds of approval. A run approval judges code; an egress approval judges
// one host:port a run wants to connect to (DESIGN.md §9).
const (
	KindRun    = "run"
	KindEgress = "egress"
)

// Scopes of an egress approval: the answer covers this one connection, or
// every later connection of the same session to the same host:port. A run
// approval is always once (it is bound to its code).
const (
	ScopeOnce    = "once"
	ScopeSession = "session"
)

// Request is what an approver is asked to judge. It carries the code for
// display, and the Digest that binds the answer to exactly this request.
type Request struct {
	// Kind is KindRun ("" means run) or KindEgress.
	Kind string
	// Target is the host:port an egress approval is about; bound by the
	// digest. Empty for a run.
	Target    string
	RequestID string
	// Tenant owns the session; only approvers who see that tenant are
	// shown the request and may decide it.
	Tenant         string
	SessionID      string
	Language       string
	Code           string
	CodeSHA256     string
	RiskLevel      string
	Patterns       []Pattern
	Reasons        []Reason
	Executor       string
	PolicyRevision string
	Principal      string
	// Context is the request's routing flags, part of the digest.
	Context map[string]bool
	// Deadline is when the approval times out (a deny).
	Deadline time.Time
	// Via says how the request reached the gateway when it was not the
	// HTTP API (for example "MCP, client claude-code 1.0.3"), so the
	// approver knows which agent is waiting. It is shown, not bound: it is
	// not part of the digest, and like Code it is not stored.
	Via string
	// Intent is the agent's stated reason for the request (the API's
	// context.intent), shown to the approver like Via: not bound by the
	// digest, not stored.
	Intent string
	// Published, when set, is called with the approval's id once approvers
	// can see it, before Confirm starts waiting. A caller that waits on
	// Confirm uses it to tell its own client what it is waiting for (MCP
	// progress notifications, a streamed approval_pending event). It must
	// not block; it is not called when no approval is published (a
	// service that decides at once, or one that fails before publishing).
	Published func(approvalID string)
	// Egress is a held egress request's decision input (the egress
	// proxy's), which the egress grant policy is asked with
	// (grants_egress.go). Like Via it is not bound by the digest (the
	// Target is, and names the same request) and not stored.
	Egress *policy.EgressInput
}

// Pattern is a risk hit to highlight in the code.
type Pattern struct {
	ID      string `json:"id"`
	Message string `json:"message"`
	Line    int    `json:"line"`
}

// Reason is why the policy asked for approval.
type Reason struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Digest binds an approval to the request's tenant, session, language,
// code, context and policy revision, so an approval can never be replayed
// for other code, or for the same session name under another tenant.
func (r Request) Digest() string {
	h := sha256.New()
	if r.Kind == KindEgress {
		// An egress approval binds its target too; a run's digest is
		// unchanged from before kinds existed.
		fmt.Fprintf(h, "kind=egress\x00target=%s\x00", r.Target)
	}
	fmt.Fprintf(h, "tenant=%s\x00session=%s\x00language=%s\x00code=%s\x00revision=%s\x00executor=%s\x00",
		r.Tenant, r.SessionID, r.Language, r.CodeSHA256, r.PolicyRevision, r.Executor)
	for _, k := range []string{"needs_browser", "needs_persistent_fs"} {
		fmt.Fprintf(h, "%s=%t\x00", k, r.Context[k])
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// Outcome is the answer.
type Outcome struct {
	ApprovalID string
	Status     string
	// Scope is what an approved egress approval covers (ScopeOnce or
	// ScopeSession); ScopeOnce for every other approval.
	Scope     string
	DecidedBy string
	Reason    string
	// DecidedAt is when the approval was resolved, and TimeToDecide how
	// long it was pending (from the request to the decision, the timeout,
	// the withdrawal or the interruption). Zero for AutoApprove.
	DecidedAt    time.Time
	TimeToDecide time.Duration
}

// Approved reports whether the request may run.
func (o Outcome) Approved() bool { return o.Status == StatusApproved }

// Service obtains a decision for one request. Confirm blocks until a decision,
// the approval's timeout (an Outcome with StatusTimeout) or ctx is done
// (StatusWithdrawn). An error means the service could not ask at all; the
// manager treats it as a deny.
type Service interface {
	Confirm(ctx context.Context, req Request) (Outcome, error)
}

// AutoApprove approves everything. It is for PERMISSIVE development setups
// only, and NewAutoApprove refuses any other mode.
type AutoApprove struct{}

// NewAutoApprove returns AutoApprove when mode is PERMISSIVE.
func NewAutoApprove(mode string) (*AutoApprove, error) {
	if mode != "PERMISSIVE" {
		return nil, fmt.Errorf("%w (mode is %q)", ErrNotPermissive, mode)
	}
	return &AutoApprove{}, nil
}

// Confirm approves at once, recording who "decided".
func (*AutoApprove) Confirm(_ context.Context, req Request) (Outcome, error) {
	return Outcome{ApprovalID: "auto-" + req.RequestID, Status: StatusApproved, DecidedBy: "auto-approve"}, nil
}

// Interface guards.
var _ Service = (*AutoApprove)(nil)
