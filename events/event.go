package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/sandgate/sandgate/errcode"
)

// The event types the gateway publishes. Any type of the form of
// [ValidType] is accepted; these are the ones DESIGN.md §13 names.
const (
	SessionCreated    = "session.created"
	SessionDeleted    = "session.deleted"
	SessionExpired    = "session.expired"
	SessionAdopted    = "session.adopted"
	RunStarted        = "run.started"
	RunFinished       = "run.finished"
	ApprovalRequested = "approval.requested"
	ApprovalResolved  = "approval.resolved"
	EgressDenied      = "egress.denied"
)

// Limits of one event.
const (
	// MaxDataBytes bounds an event's Data (compacted JSON). Standard
	// Webhooks recommends payloads under 20 kB; events carry digests and
	// outcomes, not content.
	MaxDataBytes = 16 << 10
	// maxFieldBytes bounds Type, Tenant and SessionID.
	maxFieldBytes = 256
)

// Event is one lifecycle event. Its JSON form is the body of a webhook
// delivery and the data of an SSE message, and follows the payload shape
// Standard Webhooks recommends (type, timestamp, data).
type Event struct {
	// ID is assigned by the log when the event is appended: increasing,
	// and visible to readers in that order. Publish ignores it.
	ID int64 `json:"id"`
	// Type is a full-stop delimited type such as "session.created"
	// ([ValidType]).
	Type string `json:"type"`
	// Tenant owns the event; "" for events of no tenant, which only
	// readers of every tenant see.
	Tenant    string `json:"tenant,omitempty"`
	SessionID string `json:"session_id,omitempty"`
	// Time is when the event happened; Publish sets it to now when zero.
	// It is stored with nanosecond precision, in UTC.
	Time time.Time `json:"timestamp"`
	// Data is a JSON object with the event's details: digests, outcomes,
	// ids. Never code or file content. nil (or JSON null) means {}.
	Data json.RawMessage `json:"data"`
}

// ErrInvalidEvent is returned (wrapped) by Publish for an event it refuses.
var ErrInvalidEvent = errcode.New(errcode.InvalidRequest, "events: invalid event")

// typePattern is Standard Webhooks' recommendation for event types:
// identifiers of [a-zA-Z0-9_], full-stop delimited.
var typePattern = regexp.MustCompile(`^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*$`)

// ValidType reports whether t is a well-formed event type: identifiers of
// [A-Za-z0-9_] separated by full stops, at most 256 bytes.
func ValidType(t string) bool {
	return len(t) <= maxFieldBytes && typePattern.MatchString(t)
}

// normalize checks ev and returns the form that is stored: Time set and in
// UTC, Data compacted ({} when empty).
func normalize(ev Event, now time.Time) (Event, error) {
	var errs []error
	if !ValidType(ev.Type) {
		errs = append(errs, fmt.Errorf("type %q: want identifiers of [A-Za-z0-9_] separated by '.'", truncate(ev.Type, 64)))
	}
	if len(ev.Tenant) > maxFieldBytes {
		errs = append(errs, fmt.Errorf("tenant: longer than %d bytes", maxFieldBytes))
	}
	if len(ev.SessionID) > maxFieldBytes {
		errs = append(errs, fmt.Errorf("session_id: longer than %d bytes", maxFieldBytes))
	}
	data, err := compactObject(ev.Data)
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return Event{}, fmt.Errorf("%w: %w", ErrInvalidEvent, errors.Join(errs...))
	}
	ev.ID = 0
	ev.Data = data
	if ev.Time.IsZero() {
		ev.Time = now
	}
	ev.Time = ev.Time.UTC()
	return ev, nil
}

func compactObject(raw json.RawMessage) (json.RawMessage, error) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || string(trimmed) == "null" { // json.Marshal of a nil map
		return json.RawMessage("{}"), nil
	}
	if trimmed[0] != '{' || !json.Valid(trimmed) {
		return nil, errors.New("data: want a JSON object")
	}
	var b bytes.Buffer
	if err := json.Compact(&b, trimmed); err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	if b.Len() > MaxDataBytes {
		return nil, fmt.Errorf("data: %d bytes, over the limit of %d", b.Len(), MaxDataBytes)
	}
	return json.RawMessage(b.Bytes()), nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
