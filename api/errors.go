package api

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/policy"
)

// errorBody is the one error shape of DESIGN.md §5.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code      errcode.Code         `json:"code"`
	Message   string               `json:"message"`
	Reasons   []policy.Reason      `json:"reasons,omitempty"`
	Fields    []manager.FieldError `json:"fields,omitempty"`
	RequestID string               `json:"request_id"`
	// Rule, AgentGuidance and Proposal are on a session request's denial:
	// how to ask for a narrow exception (denial.go).
	Rule          string        `json:"rule,omitempty"`
	AgentGuidance string        `json:"agent_guidance,omitempty"`
	Proposal      *proposalHint `json:"proposal,omitempty"`
}

// Errors raised by the HTTP layer itself.
var (
	errUnauthorized = errcode.New(errcode.Unauthorized, "a valid bearer token is required")
	errForbidden    = errcode.New(errcode.Forbidden, "this token's role may not do that")
	errNotFound     = errcode.New(errcode.NotFound, "no such endpoint")
	errMethod       = errcode.New(errcode.MethodNotAllowed, "method not allowed on this endpoint")
	errBadJSON      = errcode.New(errcode.InvalidRequest, "the body is not valid JSON for this endpoint")
	errTooLarge     = errcode.New(errcode.PayloadTooLarge, "the body exceeds the size limit")
)

// writeError renders err through errcode.Of, the single mapping from errors
// to code and status. Internal error text never reaches the client.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, body := s.errorResponse(r, err)
	if status == http.StatusUnauthorized && w.Header().Get("WWW-Authenticate") == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="sandgate"`)
	}
	if body.Error.Code == errcode.PoolExhausted || body.Error.Code == errcode.ReplicaUnavailable ||
		body.Error.Code == errcode.SessionUnavailable {
		w.Header().Set("Retry-After", "1") // busy, not broken: worth a retry
	}
	var limited *manager.RateLimitedError
	if errors.As(err, &limited) {
		w.Header().Set("Retry-After", strconv.Itoa(limited.RetryAfterSeconds()))
	}
	writeJSON(w, status, body)
}

// errorResponse is the status and body err is answered with (logging
// what a 5xx hides): an ordinary error answer, or a streamed error event.
func (s *Server) errorResponse(r *http.Request, err error) (int, errorBody) {
	code, status, msg := errcode.Of(err)
	body := errorBody{Error: errorDetail{Code: code, Message: msg, RequestID: requestID(r.Context())}}
	var denied *manager.DeniedError
	if errors.As(err, &denied) {
		body.Error.Reasons = denied.Reasons
	}
	withGuidance(r, &body.Error)
	var invalid *manager.ValidationError
	if errors.As(err, &invalid) {
		body.Error.Fields = invalid.Fields
	}
	var fe *fieldErr
	if errors.As(err, &fe) {
		body.Error.Fields = []manager.FieldError{fe.field}
	}
	if status >= 500 {
		s.log.ErrorContext(r.Context(), "request failed", "request_id", requestID(r.Context()), "status", status, "err", err)
	}
	return status, body
}

// fieldErr is a one-field validation error raised while decoding.
type fieldErr struct {
	field manager.FieldError
}

func (e *fieldErr) Error() string { return "invalid field " + e.field.Field }
func (e *fieldErr) Unwrap() error { return manager.ErrInvalidRequest }

func fieldErrorOf(name, msg string) manager.FieldError {
	return manager.FieldError{Field: name, Code: "invalid", Message: msg}
}
