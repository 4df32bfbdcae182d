package confirm

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/sandgate/sandgate/errcode"
)

// StatusPending is the status of an approval nobody has resolved yet. It is
// never an Outcome's status.
const StatusPending = "pending"

// View is an approval as approvers see it, in the API and on the socket. The
// same JSON shape is used everywhere, so the page renders a REST answer and
// a socket event with the same code.
//
// Code is present only while the approval is pending and held in memory:
// the database keeps the code's SHA-256, never the code (as audit records
// do), so a resolved approval read back from the store has no code.
type View struct {
	ID string `json:"id"`
	// Kind is KindRun or KindEgress; Target the host:port of an egress
	// approval, and Scope what an approved one covers.
	Kind           string          `json:"kind"`
	Target         string          `json:"target,omitempty"`
	Scope          string          `json:"scope,omitempty"`
	RequestID      string          `json:"request_id"`
	Tenant         string          `json:"tenant"`
	SessionID      string          `json:"session_id"`
	Language       string          `json:"language"`
	Code           string          `json:"code,omitempty"`
	CodeSHA256     string          `json:"code_sha256"`
	Digest         string          `json:"digest"`
	RiskLevel      string          `json:"risk_level"`
	Patterns       []Pattern       `json:"patterns"`
	Reasons        []Reason        `json:"reasons"`
	Executor       string          `json:"executor"`
	PolicyRevision string          `json:"policy_revision"`
	Principal      string          `json:"principal"`
	Context        map[string]bool `json:"context,omitempty"`
	// Via is the request's channel when it was not the HTTP API (shown on
	// the page next to the principal). Like Code, it is held in memory
	// only: a resolved approval read back from the store has none.
	Via string `json:"via,omitempty"`
	// Intent is the agent's stated reason, shown like Via, held in
	// memory only.
	Intent         string    `json:"intent,omitempty"`
	Status         string    `json:"status"`
	RequestedAt    time.Time `json:"requested_at"`
	Deadline       time.Time `json:"deadline"`
	DecidedBy      string    `json:"decided_by,omitempty"`
	Reason         string    `json:"reason,omitempty"`
	DecidedAt      time.Time `json:"decided_at,omitzero"`
	TimeToDecideMS int64     `json:"time_to_decide_ms,omitempty"`
	// Grant is the grant this decision gave (scope session or pattern);
	// only in the answer to the decision.
	Grant *Grant `json:"grant,omitempty"`
}

// Approver is who decides: the token's name and role, never the token.
// Tenants limits the approvals it sees and decides to those tenants';
// empty means every tenant (an unrestricted approver).
type Approver struct {
	Name    string   `json:"name"`
	Role    string   `json:"role"`
	Tenants []string `json:"tenants,omitempty"`
}

// Sees reports whether a may see and decide an approval of tenant.
func (a Approver) Sees(tenant string) bool {
	return len(a.Tenants) == 0 || slices.Contains(a.Tenants, tenant)
}

// Decision is an approver's answer to one approval.
type Decision struct {
	// Decision is "approve" or "deny".
	Decision string `json:"decision"`
	// Reason is optional free text, at most MaxReasonBytes.
	Reason string `json:"reason"`
	// Digest, when set, must equal the approval's digest: the page sends
	// the digest of the request it displayed, so a decision can never land
	// on a request the approver did not see.
	Digest string `json:"digest,omitempty"`
	// Scope is, for approving an egress approval, "once" (the default) or
	// "session". A run approval accepts only "once" or nothing.
	Scope string `json:"scope,omitempty"`
	// ForS is how long, in seconds, a run approval's grant lasts when
	// Scope is "session" (this session) or "pattern" (this tenant's
	// requests with these risk patterns); see grants.go.
	ForS int `json:"for_s,omitempty"`
	// PathPrefix, on an egress request approval approved for the session
	// with ForS, is the path prefix the grant covers (grants_egress.go);
	// empty: the held request's path.
	PathPrefix string `json:"path_prefix,omitempty"`
}

// MaxReasonBytes caps a decision's reason.
const MaxReasonBytes = 1000

// Event types the hub sends.
const (
	EventSnapshot  = "snapshot"
	EventRequested = "approval.requested"
	EventResolved  = "approval.resolved"
	EventResult    = "decision.result"
	EventError     = "error"
)

// event is every server-to-client message. ServerTime lets the page correct
// its countdowns for clock skew (and lets tests measure delivery latency).
type event struct {
	Type       string            `json:"type"`
	ServerTime time.Time         `json:"server_time"`
	Approval   json.RawMessage   `json:"approval,omitempty"`
	Approver   *Approver         `json:"approver,omitempty"`
	Pending    []json.RawMessage `json:"pending,omitempty"`
	History    []View            `json:"history,omitempty"`
	TimeoutS   int               `json:"timeout_s,omitempty"`
	// Ref echoes the client's reference on a decision.result.
	Ref   string    `json:"ref,omitempty"`
	OK    *bool     `json:"ok,omitempty"`
	Error *eventErr `json:"error,omitempty"`
}

type eventErr struct {
	Code    errcode.Code `json:"code"`
	Message string       `json:"message"`
}

// clientMessage is every client-to-server message: today only "decide".
type clientMessage struct {
	Type string `json:"type"`
	Ref  string `json:"ref"`
	ID   string `json:"id"`
	Decision
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		// Every value marshalled here is built from strings, ints,
		// bools and times: an error is a programming mistake.
		panic("confirm: marshal: " + err.Error())
	}
	return b
}
