package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
)

// envelope is the AIO Response[T] (aio-api.md §1.2). Optional fields are
// pointers without omitempty, so unset ones serialise as explicit nulls, as
// the FastAPI server does.
type envelope struct {
	Success bool    `json:"success"`
	Message *string `json:"message"`
	Data    any     `json:"data"`
	Hint    *string `json:"hint"`
}

func ptr[T any](v T) *T { return &v }

const msgOK = "Operation successful"

// writeJSON writes v without HTML escaping (FastAPI does not escape '<').
func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		http.Error(w, `{"detail":"Internal Server Error"}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
}

// writeOK answers 200 with success:true and data.
func writeOK(w http.ResponseWriter, data any) {
	writeJSON(w, http.StatusOK, envelope{Success: true, Message: ptr(msgOK), Data: data})
}

// writeFail answers a handled failure: success:false, the message, data
// (usually nil) and the HTTP status the real server uses for it.
func writeFail(w http.ResponseWriter, status int, msg string, data any) {
	writeJSON(w, status, envelope{Success: false, Message: ptr(msg), Data: data})
}

// validationItem is one entry of FastAPI's 422 body.
type validationItem struct {
	Type  string         `json:"type"`
	Loc   []any          `json:"loc"`
	Msg   string         `json:"msg"`
	Input any            `json:"input"`
	Ctx   map[string]any `json:"ctx,omitempty"`
}

// validationError is a 422 in the making.
type validationError struct {
	items []validationItem
}

func (e *validationError) Error() string {
	if len(e.items) == 0 {
		return "validation error"
	}
	return fmt.Sprintf("%v: %s", e.items[0].Loc, e.items[0].Msg)
}

func (e *validationError) add(typ, msg string, input any, loc ...any) {
	e.items = append(e.items, validationItem{Type: typ, Loc: append([]any{"body"}, loc...), Msg: msg, Input: input})
}

func writeValidation(w http.ResponseWriter, e *validationError) {
	writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"detail": e.items})
}

// maxBody bounds a JSON request body (a base64 file write is the largest).
const maxBody = 64 << 20

// decodeBody reads a JSON object into dst, checking that every name in
// required is present and not null, and that fields have the right JSON
// types. Fields dst does not know are ignored, as pydantic does. On failure
// it writes the 422 and returns false.
func decodeBody(w http.ResponseWriter, r *http.Request, dst any, required ...string) bool {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		if !tooLarge(w, err) {
			writeJSON(w, http.StatusBadRequest, map[string]string{"detail": "Could not read the request body"})
		}
		return false
	}
	if verr := decodeJSON(raw, dst, required); verr != nil {
		writeValidation(w, verr)
		return false
	}
	return true
}

// tooLarge answers 413 when err is a body over maxBody, and reports
// whether it did.
func tooLarge(w http.ResponseWriter, err error) bool {
	var mbe *http.MaxBytesError
	if !errors.As(err, &mbe) {
		return false
	}
	writeJSON(w, http.StatusRequestEntityTooLarge, map[string]string{"detail": "Request body too large"})
	return true
}

// missingBody is the 422 of an empty body.
func missingBody() *validationError {
	return &validationError{items: []validationItem{{Type: "missing", Loc: []any{"body"}, Msg: "Field required"}}}
}

// jsonInvalid is the 422 of a body that is not JSON, pos bytes in.
func jsonInvalid(pos int) *validationError {
	return &validationError{items: []validationItem{{Type: "json_invalid", Loc: []any{"body", pos},
		Msg: "JSON decode error", Input: map[string]any{}, Ctx: map[string]any{"error": "Expecting value"}}}}
}

// decodeJSON checks raw and decodes it into dst as decodeBody does, and
// returns the 422's items, or nil.
func decodeJSON(raw []byte, dst any, required []string) *validationError {
	verr := &validationError{}
	if len(bytes.TrimSpace(raw)) == 0 {
		return missingBody()
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) || !json.Valid(raw) {
			pos := 0
			if se != nil {
				pos = int(se.Offset)
			}
			return jsonInvalid(pos)
		}
		verr.items = append(verr.items, validationItem{Type: "model_attributes_type", Loc: []any{"body"},
			Msg: "Input should be a valid dictionary or object to extract fields from", Input: rawValue(raw)})
		return verr
	}
	if obj == nil { // the body was the JSON literal null
		verr.items = append(verr.items, validationItem{Type: "model_attributes_type", Loc: []any{"body"},
			Msg: "Input should be a valid dictionary or object to extract fields from"})
		return verr
	}
	for _, name := range required {
		v, ok := obj[name]
		switch {
		case !ok:
			verr.add("missing", "Field required", rawValue(raw), name)
		case string(bytes.TrimSpace(v)) == "null":
			typ, msg := typeMessage(fieldKind(dst, name))
			verr.add(typ, msg, nil, name)
		}
	}
	// Decode field by field so that every type error is reported, not
	// only the first one encoding/json stops at.
	typ := reflect.TypeOf(dst).Elem()
	val := reflect.ValueOf(dst).Elem()
	for i := range typ.NumField() {
		f := typ.Field(i)
		name := jsonName(f)
		v, ok := obj[name]
		if !ok || name == "-" {
			continue
		}
		if err := json.Unmarshal(v, val.Field(i).Addr().Interface()); err != nil {
			kind := f.Type
			var ute *json.UnmarshalTypeError
			if errors.As(err, &ute) && ute.Type != nil {
				kind = ute.Type
			}
			typ, msg := typeMessage(kind)
			loc := []any{name}
			if ute != nil && ute.Field != "" {
				for _, p := range strings.Split(ute.Field, ".") {
					loc = append(loc, p)
				}
			}
			verr.add(typ, msg, rawValue(v), loc...)
		}
	}
	if len(verr.items) > 0 {
		return verr
	}
	return nil
}

func rawValue(raw []byte) any {
	var v any
	_ = json.Unmarshal(raw, &v)
	return v
}

func jsonName(f reflect.StructField) string {
	tag := f.Tag.Get("json")
	if tag == "" {
		return f.Name
	}
	name, _, _ := strings.Cut(tag, ",")
	return name
}

func fieldKind(dst any, name string) reflect.Type {
	typ := reflect.TypeOf(dst).Elem()
	for i := range typ.NumField() {
		if jsonName(typ.Field(i)) == name {
			return typ.Field(i).Type
		}
	}
	return reflect.TypeOf("")
}

// typeMessage names a Go type the way pydantic reports a wrong input type.
func typeMessage(t reflect.Type) (typ, msg string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Bool:
		return "bool_type", "Input should be a valid boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "int_type", "Input should be a valid integer"
	case reflect.Float32, reflect.Float64:
		return "float_type", "Input should be a valid number"
	case reflect.Slice, reflect.Array:
		return "list_type", "Input should be a valid list"
	case reflect.Map, reflect.Struct:
		return "dict_type", "Input should be a valid dictionary"
	default:
		return "string_type", "Input should be a valid string"
	}
}

// literal checks that *v (when set) is one of allowed, adding pydantic's
// literal_error otherwise.
func literal(verr *validationError, field string, v *string, allowed ...string) {
	if v == nil {
		return
	}
	for _, a := range allowed {
		if *v == a {
			return
		}
	}
	quoted := make([]string, len(allowed))
	for i, a := range allowed {
		quoted[i] = "'" + a + "'"
	}
	expected := strings.Join(quoted[:len(quoted)-1], ", ")
	if expected != "" {
		expected += " or "
	}
	expected += quoted[len(quoted)-1]
	verr.items = append(verr.items, validationItem{Type: "literal_error", Loc: []any{"body", field},
		Msg: "Input should be " + expected, Input: *v, Ctx: map[string]any{"expected": expected}})
}

// check writes the 422 when verr has items.
func check(w http.ResponseWriter, verr *validationError) bool {
	if len(verr.items) > 0 {
		writeValidation(w, verr)
		return false
	}
	return true
}
