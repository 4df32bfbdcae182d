package errcode

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
)

func TestOf(t *testing.T) {
	denied := New(PolicyDenied, "denied by policy")
	cases := []struct {
		name   string
		err    error
		code   Code
		status int
		msg    string
	}{
		{"nil", nil, "", 200, ""},
		{"plain error is internal and hides its text", errors.New("open /var/lib/secret: permission denied"), Internal, 500, "internal error"},
		{"sentinel", denied, PolicyDenied, 403, "denied by policy"},
		{"wrapped sentinel", fmt.Errorf("step decide: %w", denied), PolicyDenied, 403, "denied by policy"},
		{"joined: first coded wins", errors.Join(errors.New("x"), New(NotFound, "no such session")), NotFound, 404, "no such session"},
		{"invalid", New(InvalidRequest, "bad"), InvalidRequest, 400, "bad"},
		{"traversal", New(PathTraversal, "p"), PathTraversal, 400, "p"},
		{"unauthorized", New(Unauthorized, "u"), Unauthorized, 401, "u"},
		{"forbidden", New(Forbidden, "f"), Forbidden, 403, "f"},
		{"approval denied", New(ApprovalDenied, "a"), ApprovalDenied, 403, "a"},
		{"approval timeout", New(ApprovalTimeout, "a"), ApprovalTimeout, 403, "a"},
		{"approval unavailable", New(ApprovalUnavailable, "a"), ApprovalUnavailable, 403, "a"},
		{"executor unavailable", New(ExecutorUnavailable, "e"), ExecutorUnavailable, 503, "e"},
		{"pool exhausted", New(PoolExhausted, "e"), PoolExhausted, 503, "e"},
		{"too large", New(PayloadTooLarge, "t"), PayloadTooLarge, 413, "t"},
		{"conflict", New(Conflict, "c"), Conflict, 409, "c"},
		{"method", New(MethodNotAllowed, "m"), MethodNotAllowed, 405, "m"},
		{"unknown code", New("made_up", "m"), "made_up", 500, "m"},
		{"cancelled", New(Cancelled, "c"), Cancelled, 499, "c"},
		{"edit no match", New(EditNoMatch, "e"), EditNoMatch, 409, "e"},
		{"edit ambiguous", New(EditAmbiguous, "e"), EditAmbiguous, 409, "e"},
		{"file too large", New(FileTooLarge, "f"), FileTooLarge, 413, "f"},
		{"quota exceeded", New(QuotaExceeded, "q"), QuotaExceeded, 429, "q"},
		{"rate limited", New(RateLimited, "r"), RateLimited, 429, "r"},
		{"binary file", New(BinaryFile, "b"), BinaryFile, 422, "b"},
		{"insufficient storage", New(InsufficientStorage, "s"), InsufficientStorage, 507, "s"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, status, msg := Of(c.err)
			if code != c.code || status != c.status || msg != c.msg {
				t.Fatalf("Of = %q %d %q, want %q %d %q", code, status, msg, c.code, c.status, c.msg)
			}
		})
	}
}

func TestEveryCodeHasAStatus(t *testing.T) {
	for code, status := range statuses {
		if status < 400 || (http.StatusText(status) == "" && code != Cancelled) {
			t.Errorf("%s maps to %d", code, status)
		}
	}
}

// TestValidationError: a ValidationError is an invalid_request whatever
// its Kind, and errors.Is finds its Kind.
func TestValidationError(t *testing.T) {
	mine := New(InvalidRequest, "the widget request is invalid")
	for _, tc := range []struct {
		name    string
		err     *ValidationError
		is      error
		wantMsg string
	}{
		{"with kind", &ValidationError{Kind: mine, Fields: []FieldError{{Field: "url", Code: "required"}}}, mine, "the widget request is invalid: url required"},
		{"without kind", &ValidationError{Fields: []FieldError{{Field: "a", Code: "min"}, {Field: "b", Code: "max"}}}, errInvalid, "the request is invalid: a min"},
		{"no fields", &ValidationError{Kind: mine}, mine, "the widget request is invalid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error = tc.err
			if code, status, _ := Of(err); code != InvalidRequest || status != 400 {
				t.Errorf("Of = %s %d, want invalid_request 400", code, status)
			}
			if !errors.Is(err, tc.is) {
				t.Errorf("errors.Is(err, kind) is false")
			}
			if err.Error() != tc.wantMsg {
				t.Errorf("Error() = %q, want %q", err.Error(), tc.wantMsg)
			}
		})
	}
}
