// Package errcode is the single table of stable error codes of the HTTP API
// (DESIGN.md §5) and the one function that maps any error to its code and
// status. Packages anywhere in the flow declare their sentinel errors with
// New, so the manager's audit record and the api's error body always agree
// on the code, and an error that carries no code maps to "internal".
package errcode

import (
	"errors"
	"net/http"
	"slices"
)

// Code is a stable, documented error code.
type Code string

// The codes of DESIGN.md §5, plus the ones issues add.
const (
	InvalidRequest      Code = "invalid_request"
	PathTraversal       Code = "path_traversal"
	NotFound            Code = "not_found"
	Conflict            Code = "conflict"
	Unauthorized        Code = "unauthorized"
	Forbidden           Code = "forbidden"
	PolicyDenied        Code = "policy_denied"
	ApprovalDenied      Code = "approval_denied"
	ApprovalTimeout     Code = "approval_timeout"
	ApprovalUnavailable Code = "approval_unavailable"
	ExecutorUnavailable Code = "executor_unavailable"
	PoolExhausted       Code = "pool_exhausted"
	PayloadTooLarge     Code = "payload_too_large"
	MethodNotAllowed    Code = "method_not_allowed"
	// Cancelled is recorded when the client went away (or the gateway shut
	// down) while the request was in flight; 499 is nginx's "client closed
	// request", which no client will ever read.
	Cancelled Code = "cancelled"
	Internal  Code = "internal"

	// Workspace file codes (issue 4).
	//
	// EditNoMatch and EditAmbiguous are 409 rather than 422: the request is
	// well formed and would succeed against another version of the file;
	// what it conflicts with is the file's current content, which is the
	// case RFC 9110 §15.5.10 gives 409 for ("the user might be able to
	// resolve the conflict and resubmit").
	EditNoMatch   Code = "edit_no_match"
	EditAmbiguous Code = "edit_ambiguous"
	// FileTooLarge is a write (or an edit's result) over the per-file limit,
	// or a file too large for an operation that loads it whole.
	FileTooLarge Code = "file_too_large"
	// QuotaExceeded is 429 (DESIGN.md §5), for a session's workspace quota
	// and a tenant's quotas alike (live sessions, runs in flight,
	// workspace bytes): the limit is the client's own and so is the remedy
	// (finish or delete something, send less). Not 507: a 5xx would blame
	// the server and invite blind retries.
	QuotaExceeded Code = "quota_exceeded"
	// BinaryFile is 422, not 415: 415 describes the request's own body
	// format, and the numbered-line read is a GET with no body; the request
	// is valid, the target just cannot be rendered as text (raw get can).
	BinaryFile Code = "binary_file"
	// Browser codes (issue 8). BrowserTimeout is 504: the action waited on
	// a page (an upstream server, or the page's own scripts) that did not
	// answer in time. NavigationFailed is 502: the page's server could not
	// be reached or answered with a network error.
	BrowserTimeout   Code = "browser_timeout"
	NavigationFailed Code = "navigation_failed"
	// RateLimited is a tenant over its request rate (issue 14): 429 with
	// Retry-After, the seconds until its token bucket has a token again.
	RateLimited Code = "rate_limited"
	// ReplicaUnavailable is 503 with Retry-After (issue 15): in a fleet,
	// the replica that serves the session could not be reached, or the
	// session registry could not be read (the request did not run), or
	// that replica failed while answering a forwarded request (it may
	// have run: its audit record says).
	ReplicaUnavailable Code = "replica_unavailable"
	// SessionUnavailable is 503 with Retry-After (issue 27): the replica
	// that serves the session holds a live lease but does not answer, or
	// the session registry cannot be read. Nothing ran, and no second
	// copy of the session was started; the same request succeeds once
	// the replica answers or its lease lapses and the session is adopted.
	SessionUnavailable Code = "session_unavailable"
	// InsufficientStorage is 507: the filesystem holding the workspaces
	// is full (ENOSPC, issue 21). Not quota_exceeded: no limit of the
	// client's was reached, the operator's disk was; the same request
	// succeeds once there is space again.
	InsufficientStorage Code = "insufficient_storage"
)

var statuses = map[Code]int{
	InvalidRequest:      http.StatusBadRequest,
	PathTraversal:       http.StatusBadRequest,
	NotFound:            http.StatusNotFound,
	Conflict:            http.StatusConflict,
	Unauthorized:        http.StatusUnauthorized,
	Forbidden:           http.StatusForbidden,
	PolicyDenied:        http.StatusForbidden,
	ApprovalDenied:      http.StatusForbidden,
	ApprovalTimeout:     http.StatusForbidden,
	ApprovalUnavailable: http.StatusForbidden,
	ExecutorUnavailable: http.StatusServiceUnavailable,
	PoolExhausted:       http.StatusServiceUnavailable,
	PayloadTooLarge:     http.StatusRequestEntityTooLarge,
	MethodNotAllowed:    http.StatusMethodNotAllowed,
	Cancelled:           499,
	Internal:            http.StatusInternalServerError,
	EditNoMatch:         http.StatusConflict,
	EditAmbiguous:       http.StatusConflict,
	FileTooLarge:        http.StatusRequestEntityTooLarge,
	QuotaExceeded:       http.StatusTooManyRequests,
	RateLimited:         http.StatusTooManyRequests,
	InsufficientStorage: http.StatusInsufficientStorage,
	BinaryFile:          http.StatusUnprocessableEntity,
	BrowserTimeout:      http.StatusGatewayTimeout,
	NavigationFailed:    http.StatusBadGateway,
	ReplicaUnavailable:  http.StatusServiceUnavailable,
	SessionUnavailable:  http.StatusServiceUnavailable,
}

// Status is the HTTP status of c; unknown codes are 500.
func (c Code) Status() int {
	if s, ok := statuses[c]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// Error is a sentinel carrying a code. Its message is a short, fixed phrase
// that is safe to show a client.
type Error struct {
	Code    Code
	Message string
}

func (e *Error) Error() string { return e.Message }

// New declares a sentinel with a code.
func New(code Code, message string) *Error { return &Error{Code: code, Message: message} }

// Of maps err to its code, status and client-safe message. The first coded
// error in the chain wins; anything else is internal, and its text is never
// returned, only the fixed message "internal error".
func Of(err error) (code Code, status int, message string) {
	if err == nil {
		return "", http.StatusOK, ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code, e.Code.Status(), e.Message
	}
	return Internal, http.StatusInternalServerError, "internal error"
}

// Codes returns every code, sorted: the enum of the error object's code in
// the OpenAPI document (api/openapi.go).
func Codes() []Code {
	out := make([]Code, 0, len(statuses))
	for c := range statuses {
		out = append(out, c)
	}
	slices.Sort(out)
	return out
}
