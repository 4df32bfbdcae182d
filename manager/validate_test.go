package manager_test

import (
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/manager"
)

// TestRunValidation: bad input is reported field by field with the client's
// field names, never echoes the value, reaches no later step and is audited
// once as invalid.
func TestRunValidation(t *testing.T) {
	const secret = "s3cr3t-value"
	cases := []struct {
		name string
		edit func(*manager.RunRequest)
		want []manager.FieldError // Message not compared
	}{
		{
			name: "everything missing",
			edit: func(r *manager.RunRequest) { r.SessionID, r.Language, r.Code = "", "", "" },
			want: []manager.FieldError{{Field: "session_id", Code: "session_id"}, {Field: "language", Code: "required"}, {Field: "code", Code: "required"}},
		},
		{
			name: "unknown language",
			edit: func(r *manager.RunRequest) { r.Language = "ruby-" + secret },
			want: []manager.FieldError{{Field: "language", Code: "oneof"}},
		},
		{
			name: "session id with a slash",
			edit: func(r *manager.RunRequest) { r.SessionID = "../" + secret },
			want: []manager.FieldError{{Field: "session_id", Code: "session_id"}},
		},
		{
			name: "session id dot-dot",
			edit: func(r *manager.RunRequest) { r.SessionID = ".." },
			want: []manager.FieldError{{Field: "session_id", Code: "session_id"}},
		},
		{
			name: "session id too long",
			edit: func(r *manager.RunRequest) { r.SessionID = strings.Repeat("a", 129) },
			want: []manager.FieldError{{Field: "session_id", Code: "session_id"}},
		},
		{
			name: "negative timeout",
			edit: func(r *manager.RunRequest) { r.TimeoutS = -1 },
			want: []manager.FieldError{{Field: "timeout_s", Code: "min"}},
		},
		{
			name: "timeout above an hour",
			edit: func(r *manager.RunRequest) { r.TimeoutS = 3601 },
			want: []manager.FieldError{{Field: "timeout_s", Code: "max"}},
		},
		{
			name: "execute names its code field command",
			edit: func(r *manager.RunRequest) { r.Kind, r.Language, r.Code = manager.KindExecute, "bash", "" },
			want: []manager.FieldError{{Field: "command", Code: "required"}},
		},
		{
			name: "execute reports every field",
			edit: func(r *manager.RunRequest) {
				r.Kind, r.Language, r.Code, r.TimeoutS = manager.KindExecute, "", "", 4000
			},
			want: []manager.FieldError{{Field: "language", Code: "required"}, {Field: "command", Code: "required"}, {Field: "timeout_s", Code: "max"}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, hopts{})
			req := request("python", safePython)
			tc.edit(&req)
			_, err := h.m.Run(t.Context(), req)
			var ve *manager.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Run: %v, want a *ValidationError", err)
			}
			if !errors.Is(err, manager.ErrInvalidRequest) {
				t.Errorf("errors.Is(err, ErrInvalidRequest) is false")
			}
			if code, status, _ := errcode.Of(err); code != errcode.InvalidRequest || status != http.StatusBadRequest {
				t.Errorf("errcode.Of = %s/%d, want invalid_request/400", code, status)
			}
			got := make([]manager.FieldError, len(ve.Fields))
			for i, f := range ve.Fields {
				if f.Message == "" || strings.Contains(f.Message, secret) {
					t.Errorf("field %s message %q: empty or echoes the value", f.Field, f.Message)
				}
				got[i] = manager.FieldError{Field: f.Field, Code: f.Code}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("fields %+v, want %+v", got, tc.want)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error text echoes the value: %v", err)
			}
			if n := len(h.decider.Inputs()) + len(h.sub.Calls()) + len(h.docker.Calls()) + len(h.confirm.Requests()); n != 0 {
				t.Errorf("invalid request reached %d later steps", n)
			}
			rec := h.oneRecord(t)
			if rec.Outcome != manager.OutcomeInvalid || rec.ErrorCode != string(errcode.InvalidRequest) || rec.HTTPStatus != http.StatusBadRequest {
				t.Errorf("record outcome %q code %q status %d", rec.Outcome, rec.ErrorCode, rec.HTTPStatus)
			}
			if rec.RiskLevel != "" || rec.Action != "" || rec.ExitCode != nil {
				t.Errorf("record of an invalid request has risk %q action %q exit %v", rec.RiskLevel, rec.Action, rec.ExitCode)
			}
		})
	}
}

// TestRunSizeLimit: MaxCodeBytes is inclusive, applies to commands too,
// and is 256 KiB by default.
func TestRunSizeLimit(t *testing.T) {
	cases := []struct {
		name     string
		max      int
		kind     string
		size     int
		tooLarge bool
	}{
		{name: "at the limit", max: 64, kind: manager.KindRunCode, size: 64},
		{name: "one byte over", max: 64, kind: manager.KindRunCode, size: 65, tooLarge: true},
		{name: "command one byte over", max: 64, kind: manager.KindExecute, size: 65, tooLarge: true},
		{name: "default limit", kind: manager.KindRunCode, size: 256 << 10},
		{name: "over the default limit", kind: manager.KindRunCode, size: 256<<10 + 1, tooLarge: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, hopts{cfg: manager.Config{MaxCodeBytes: tc.max}})
			req := request("bash", "echo "+strings.Repeat("a", tc.size-5))
			req.Kind = tc.kind
			_, err := h.m.Run(t.Context(), req)
			if got := errors.Is(err, manager.ErrTooLarge); got != tc.tooLarge {
				t.Fatalf("Run: %v; too large %v, want %v", err, got, tc.tooLarge)
			}
			rec := h.oneRecord(t)
			if !tc.tooLarge {
				if rec.Outcome == manager.OutcomeInvalid {
					t.Errorf("a request within the limit was recorded invalid")
				}
				return
			}
			if code, status, _ := errcode.Of(err); code != errcode.PayloadTooLarge || status != http.StatusRequestEntityTooLarge {
				t.Errorf("errcode.Of = %s/%d, want payload_too_large/413", code, status)
			}
			if n := len(h.decider.Inputs()) + len(h.sub.Calls()) + len(h.docker.Calls()); n != 0 {
				t.Errorf("oversize request reached %d later steps", n)
			}
			if rec.Outcome != manager.OutcomeInvalid || rec.ErrorCode != string(errcode.PayloadTooLarge) || rec.CodeBytes != tc.size {
				t.Errorf("record outcome %q code %q bytes %d", rec.Outcome, rec.ErrorCode, rec.CodeBytes)
			}
		})
	}
}

// TestRunRequiresKind: the audit store refuses a record without a kind, so
// a request without one must be refused before anything runs; otherwise it
// runs and leaves no audit record.
func TestRunRequiresKind(t *testing.T) {
	h := newHarness(t, hopts{})
	req := request("python", safePython)
	req.Kind = ""
	_, err := h.m.Run(t.Context(), req)
	if !errors.Is(err, manager.ErrInvalidRequest) {
		t.Errorf("Run without a kind: %v, want ErrInvalidRequest", err)
	}
	if n := len(h.sub.Calls()); n != 0 {
		t.Errorf("a request without a kind ran %d times", n)
	}
	if n := len(h.audit.Records()); n != 1 {
		t.Errorf("%d audit records, want 1", n)
	}
}
