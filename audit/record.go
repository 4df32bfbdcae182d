package audit

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Outcome values. The set is open (later request kinds may add their own),
// but these are the ones the execution pipeline uses.
const (
	OutcomeOK          = "ok"          // the work ran and succeeded
	OutcomeFailed      = "failed"      // the work ran and failed (non-zero exit)
	OutcomeTimedOut    = "timed_out"   // the work ran and hit its time limit
	OutcomeDenied      = "denied"      // policy or an approver refused it; nothing ran
	OutcomeInvalid     = "invalid"     // the request was rejected by validation
	OutcomeError       = "error"       // the gateway failed internally
	OutcomeUnavailable = "unavailable" // the chosen executor was unavailable
)

// Query limits.
const (
	// DefaultQueryLimit is the page size used when Query.Limit is zero.
	DefaultQueryLimit = 100
	// DefaultMaxQueryLimit is the largest page Query returns unless
	// Options.MaxQueryLimit says otherwise.
	DefaultMaxQueryLimit = 1000
)

var (
	// ErrInvalidRecord is returned by Append for a record that lacks a
	// required field.
	ErrInvalidRecord = errors.New("audit: invalid record")
	// ErrInvalidQuery is returned by Query for a malformed query.
	ErrInvalidQuery = errors.New("audit: invalid query")
	// ErrClosed is returned by operations on a closed store.
	ErrClosed = errors.New("audit: store closed")
)

// Record is one audited request. The store assigns ID (strictly increasing)
// and, when it is zero, Time.
//
// Record deliberately has no field for the code, the shell command, program
// output or any credential: only their digest and size are kept. Principal is
// the role and token name, never the token. Tenant is the tenant the
// request concerns: the owner of its session when the session was resolved,
// else the caller's; SessionID is the session's name within that tenant. Detail is for a few small extra
// fields (a browser URL's host, say) and must not carry secrets or payloads.
type Record struct {
	ID             int64             `json:"id"`
	RequestID      string            `json:"request_id"`
	Time           time.Time         `json:"time"`
	Kind           string            `json:"kind"` // run_code | execute | file.write | policy.reload | ...
	Tenant         string            `json:"tenant,omitempty"`
	SessionID      string            `json:"session_id,omitempty"`
	Principal      string            `json:"principal,omitempty"`
	Language       string            `json:"language,omitempty"`
	CodeSHA256     string            `json:"code_sha256,omitempty"`
	CodeBytes      int               `json:"code_bytes,omitempty"`
	RiskLevel      string            `json:"risk_level,omitempty"`
	RiskPatterns   []string          `json:"risk_patterns,omitempty"` // pattern ids
	Action         string            `json:"action,omitempty"`        // allow | require_approval | deny
	Executor       string            `json:"executor,omitempty"`
	Reasons        []Reason          `json:"reasons,omitempty"`
	PolicyRevision string            `json:"policy_revision,omitempty"`
	Approval       *Approval         `json:"approval,omitempty"`
	Outcome        string            `json:"outcome"`              // see the Outcome constants
	ErrorCode      string            `json:"error_code,omitempty"` // stable API error code when not ok
	ExitCode       *int              `json:"exit_code,omitempty"`
	DurationMS     int64             `json:"duration_ms"`
	HTTPStatus     int               `json:"http_status,omitempty"`
	Path           string            `json:"path,omitempty"`  // workspace path for file operations (/workspace/...)
	Bytes          int64             `json:"bytes,omitempty"` // bytes read or written by file operations
	Detail         map[string]string `json:"detail,omitempty"`
	// DecisionID is the policy decision's decision_id: OPA's decision log
	// names the same decision with it, so the chained audit and the
	// decision log join on it. Empty for a record no decision was made
	// for, and in records written before it was kept.
	DecisionID string `json:"decision_id,omitempty"`
	// WouldBe is the action the decision would have had if its dryrun and
	// warn reasons were enforced (policy.Decision.WouldBe); empty when
	// that is Action.
	WouldBe string `json:"would_be,omitempty"`
}

// Reason is one policy reason, as in the decision document.
type Reason struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Enforcement is the reason's mode when it did not decide: dryrun or
	// warn (policy.Reason.Enforcement); empty for an enforced reason.
	Enforcement string `json:"enforcement,omitempty"`
}

// Approval is the human approval attached to a request, if one was asked for.
type Approval struct {
	ID        string `json:"id"`
	Status    string `json:"status"`
	DecidedBy string `json:"decided_by,omitempty"`
	Reason    string `json:"reason,omitempty"`
	// TimeToDecideMS is how long the request waited for the decision.
	TimeToDecideMS int64 `json:"time_to_decide_ms,omitempty"`
}

// Query selects records, newest first. Zero fields do not filter.
type Query struct {
	Tenant    string
	SessionID string
	Kind      string
	// DecisionID selects the record of one policy decision (the
	// decision_id of a decision-log event or a shadow disagreement).
	DecisionID string
	// Limit is the page size: 0 or less means DefaultQueryLimit, values above
	// the store's maximum are clamped to it.
	Limit int
	// Before is the pagination cursor: only records with ID < Before are
	// returned. 0 starts at the newest record. Pass Page.NextCursor here to
	// get the next page.
	Before int64
	// Since keeps only records whose Time is at or after it.
	Since time.Time
	// Until keeps only records whose Time is before it (exclusive, so
	// consecutive windows [Since, Until) never count a record twice).
	Until time.Time
	// Outcome keeps only records with this outcome (ok, denied, ...).
	Outcome string
}

// Page is one page of query results.
type Page struct {
	Records []Record `json:"records"`
	// NextCursor is set when older matching records remain; pass it as
	// Query.Before to fetch them.
	NextCursor int64 `json:"next_cursor,omitempty"`
}

// Store is what the manager and the API depend on.
type Store interface {
	// Append stores rec and sets rec.ID, and rec.Time when it is zero.
	Append(ctx context.Context, rec *Record) error
	// Query returns one page of records, newest first.
	Query(ctx context.Context, q Query) (Page, error)
}

// Interface guards.
var (
	_ Store = (*SQLite)(nil)
	_ Store = (*Memory)(nil)
)

// validate reports what is missing from a record about to be appended.
func (r *Record) validate() error {
	if r == nil {
		return fmt.Errorf("%w: nil record", ErrInvalidRecord)
	}
	var errs []error
	if r.Kind == "" {
		errs = append(errs, fmt.Errorf("%w: kind is required", ErrInvalidRecord))
	}
	if r.Outcome == "" {
		errs = append(errs, fmt.Errorf("%w: outcome is required", ErrInvalidRecord))
	}
	if r.ID != 0 {
		errs = append(errs, fmt.Errorf("%w: id is assigned by the store, got %d", ErrInvalidRecord, r.ID))
	}
	return errors.Join(errs...)
}

// clone returns a deep copy, so a store never shares slices or maps with its
// callers.
func (r *Record) clone() Record {
	c := *r
	c.RiskPatterns = slices.Clone(r.RiskPatterns)
	c.Reasons = slices.Clone(r.Reasons)
	c.Detail = maps.Clone(r.Detail)
	if r.Approval != nil {
		a := *r.Approval
		c.Approval = &a
	}
	if r.ExitCode != nil {
		e := *r.ExitCode
		c.ExitCode = &e
	}
	return c
}

// normalize checks q and applies the limit defaults.
func (q Query) normalize(maxLimit int) (Query, error) {
	if q.Before < 0 {
		return q, fmt.Errorf("%w: negative cursor %d", ErrInvalidQuery, q.Before)
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && !q.Since.Before(q.Until) {
		return q, fmt.Errorf("%w: since %s is not before until %s", ErrInvalidQuery, formatTime(q.Since), formatTime(q.Until))
	}
	if q.Limit <= 0 {
		q.Limit = DefaultQueryLimit
	}
	q.Limit = min(q.Limit, maxLimit)
	return q, nil
}
