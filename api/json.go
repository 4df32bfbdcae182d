package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"sort"
	"strings"

	"github.com/sandgate/sandgate/manager"
)

// decodeJSON reads exactly one JSON object with no unknown fields. A body
// over the cap is 413; anything malformed is invalid_request, naming the
// field when it can.
func decodeJSON(r *http.Request, v any) error {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return errTooLarge
		}
		return errBadJSON
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return &fieldErr{field: manager.FieldError{Field: "body", Code: "required", Message: "a JSON body is required"}}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err, body, v)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errBadJSON // trailing data after the object
	}
	return nil
}

func decodeError(err error, body []byte, v any) error {
	var ute *json.UnmarshalTypeError
	if errors.As(err, &ute) {
		return &fieldErr{field: manager.FieldError{Field: ute.Field, Code: "type", Message: "must be a JSON " + ute.Type.String()}}
	}
	if name := unknownKey(body, v); name != "" {
		return &fieldErr{field: manager.FieldError{Field: name, Code: "unknown", Message: "is not a field of this request"}}
	}
	return errBadJSON
}

// unknownKey finds a top-level key of body that v does not declare.
// encoding/json has no typed error for unknown fields, so the check is
// redone structurally here, on the error path only.
func unknownKey(body []byte, v any) string {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return ""
	}
	known := map[string]bool{}
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return ""
	}
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		known[name] = true
	}
	var unknown []string
	for k := range m {
		if !known[k] {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	if len(unknown) == 0 {
		return ""
	}
	return unknown[0]
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client may be gone; nothing to do
}
