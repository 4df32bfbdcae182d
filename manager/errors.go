package manager

import (
	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/policy"
)

// Sentinel errors of the pipeline. Each carries its stable code (errcode),
// so the audit record and the API's error body name the same code.
var (
	ErrInvalidRequest      = errcode.New(errcode.InvalidRequest, "the request is invalid")
	ErrTooLarge            = errcode.New(errcode.PayloadTooLarge, "the code exceeds the size limit")
	ErrPolicyDenied        = errcode.New(errcode.PolicyDenied, "the policy denied the request")
	ErrApprovalDenied      = errcode.New(errcode.ApprovalDenied, "an approver denied the request")
	ErrApprovalTimeout     = errcode.New(errcode.ApprovalTimeout, "no approver decided in time")
	ErrApprovalUnavailable = errcode.New(errcode.ApprovalUnavailable, "the request needs approval and no approval service can give it")
	ErrExecutorUnavailable = errcode.New(errcode.ExecutorUnavailable, "the executor the policy chose is not available")
	ErrNotFound            = errcode.New(errcode.NotFound, "not found")
	ErrCancelled           = errcode.New(errcode.Cancelled, "the request was cancelled")
)

// FieldError is one invalid field, named as the client sent it (JSON name).
type FieldError = errcode.FieldError

// ValidationError lists every invalid field of a request. Built by
// invalidFields, it unwraps to ErrInvalidRequest.
type ValidationError = errcode.ValidationError

// invalidFields is the ValidationError of a request with these fields.
func invalidFields(fields ...FieldError) *ValidationError {
	return &ValidationError{Kind: ErrInvalidRequest, Fields: fields}
}

// DeniedError is a request the pipeline refused after judging it: by policy,
// by an approver, by a timeout, or because the chosen executor is missing.
// Reasons are the policy's (or the approval's) and are safe to show.
type DeniedError struct {
	Kind     error
	Reasons  []policy.Reason
	Decision policy.Decision
}

func (e *DeniedError) Error() string { return e.Kind.Error() }

// Unwrap exposes Kind to errors.Is.
func (e *DeniedError) Unwrap() error { return e.Kind }

func denied(kind error, d policy.Decision, reasons ...policy.Reason) *DeniedError {
	if len(reasons) == 0 {
		reasons = d.Reasons
	}
	return &DeniedError{Kind: kind, Reasons: reasons, Decision: d}
}
