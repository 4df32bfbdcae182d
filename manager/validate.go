package manager

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/go-playground/validator/v10"

	"github.com/sandgate/sandgate/workspace"
)

// newValidator builds the one validator instance: JSON names in field paths,
// and a sessionid tag that applies the workspace's own rule so the two can
// never disagree.
func newValidator() *validator.Validate {
	v := validator.New(validator.WithRequiredStructEnabled())
	v.RegisterTagNameFunc(func(f reflect.StructField) string {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			return ""
		}
		return name
	})
	// Registration only fails for an empty tag name or nil function. A
	// session id is a name or a qualified id (tenant~name); whose it is,
	// is ResolveSession's question.
	_ = v.RegisterValidation("sessionid", func(fl validator.FieldLevel) bool {
		return workspace.ValidateKey(fl.Field().String()) == nil
	})
	return v
}

// validate runs the struct tags and the byte-size cap, and reports every
// problem at once with the client's field names.
func (m *Manager) validate(req *RunRequest) error {
	var fields []FieldError
	if req.Kind != KindRunCode && req.Kind != KindExecute {
		// Only a caller bug gets here; refuse before anything runs.
		fields = append(fields, FieldError{Field: "kind", Code: "oneof", Message: "must be one of: run_code, execute"})
	}
	if err := m.validator.Struct(req); err != nil {
		var verrs validator.ValidationErrors
		if !errors.As(err, &verrs) {
			return fmt.Errorf("validate: %w", err) // a programming error, not bad input
		}
		for _, fe := range verrs {
			fields = append(fields, fieldError(fe))
		}
	}
	if req.Stateful && (req.Kind != KindRunCode || req.Language != "python") {
		fields = append(fields, FieldError{Field: "stateful", Code: "python_only",
			Message: "stateful runs are run_code with language python"})
	}
	if req.Kind == KindExecute {
		for i := range fields {
			if fields[i].Field == "code" {
				fields[i].Field = "command"
			}
		}
	}
	if len(fields) > 0 {
		return invalidFields(fields...)
	}
	if len(req.Code) > m.cfg.MaxCodeBytes {
		return fmt.Errorf("%w: code is %d bytes, the limit is %d", ErrTooLarge, len(req.Code), m.cfg.MaxCodeBytes)
	}
	return nil
}

// fieldError turns a validator error into a stable code and a message that
// never echoes the value (it may be code or a secret).
func fieldError(fe validator.FieldError) FieldError {
	ns := fe.Namespace()
	if _, rest, ok := strings.Cut(ns, "."); ok {
		ns = rest // drop the struct name
	}
	code, msg := "invalid", "is invalid"
	switch fe.Tag() {
	case "required":
		code, msg = "required", "is required"
	case "oneof":
		code, msg = "oneof", "must be one of: "+strings.ReplaceAll(fe.Param(), " ", ", ")
	case "min":
		code, msg = "min", "must be at least "+fe.Param()
	case "max":
		code, msg = "max", "must be at most "+fe.Param()
	case "sessionid":
		code, msg = sessionIDField.Code, sessionIDField.Message
	}
	return FieldError{Field: ns, Code: code, Message: msg}
}
