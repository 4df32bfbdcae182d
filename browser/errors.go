package browser

import (
	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/policy"
)

// Sentinel errors. Each carries its stable API code; messages are fixed
// phrases safe to show a client.
var (
	ErrInvalidRequest = errcode.New(errcode.InvalidRequest, "the browser request is invalid")
	ErrPolicyDenied   = errcode.New(errcode.PolicyDenied, "the policy denied the browser request")
	ErrUnavailable    = errcode.New(errcode.ExecutorUnavailable, "the browser backend is not available")
	ErrCrashed        = errcode.New(errcode.ExecutorUnavailable, "the browser stopped during the action; the next action starts a new one")
	ErrTooMany        = errcode.New(errcode.PoolExhausted, "too many browsers are open; close one or retry later")
	ErrTimeout        = errcode.New(errcode.BrowserTimeout, "the browser action did not finish in time")
	ErrNavigation     = errcode.New(errcode.NavigationFailed, "the page could not be loaded")
	ErrNoElement      = errcode.New(errcode.NotFound, "no element matches the selector")
	ErrNoHistory      = errcode.New(errcode.Conflict, "there is no previous page")
	ErrTooLarge       = errcode.New(errcode.PayloadTooLarge, "the screenshot exceeds the size limit")
	ErrClosed         = errcode.New(errcode.ExecutorUnavailable, "the browser router is shut down")
	ErrCancelled      = errcode.New(errcode.Cancelled, "the browser action was cancelled")
)

// FieldError is one invalid field of a browser request, named as the
// client sent it ("action", "params.url", ...).
type FieldError = errcode.FieldError

// ValidationError lists the invalid fields of a request. Built by
// invalidFields or invalid, it unwraps to ErrInvalidRequest.
type ValidationError = errcode.ValidationError

// invalidFields is the ValidationError of a request with these fields.
func invalidFields(fields ...FieldError) *ValidationError {
	return &ValidationError{Kind: ErrInvalidRequest, Fields: fields}
}

func invalid(field, code, msg string) *ValidationError {
	return invalidFields(FieldError{Field: field, Code: code, Message: msg})
}

// DeniedError is a request the policy refused. Reasons are the policy's and
// safe to show.
type DeniedError struct {
	Reasons        []policy.Reason
	PolicyRevision string
}

func (e *DeniedError) Error() string { return ErrPolicyDenied.Error() }

// Unwrap gives the error its code.
func (e *DeniedError) Unwrap() error { return ErrPolicyDenied }

func errcodeOf(err error) (errcode.Code, int, string) { return errcode.Of(err) }

// outcomeOf is the audit outcome of an action's error.
func outcomeOf(err error) string {
	if err == nil {
		return audit.OutcomeOK
	}
	code, _, _ := errcode.Of(err)
	switch code {
	case errcode.InvalidRequest, errcode.PathTraversal, errcode.PayloadTooLarge:
		return audit.OutcomeInvalid
	case errcode.PolicyDenied:
		return audit.OutcomeDenied
	case errcode.ExecutorUnavailable, errcode.PoolExhausted:
		return audit.OutcomeUnavailable
	case errcode.BrowserTimeout:
		return audit.OutcomeTimedOut
	case errcode.Cancelled:
		return "cancelled"
	case errcode.NavigationFailed, errcode.NotFound, errcode.Conflict:
		return audit.OutcomeFailed
	}
	return audit.OutcomeError
}
