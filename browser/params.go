package browser

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Action names.
const (
	ActionNavigate   = "navigate"
	ActionClick      = "click"
	ActionType       = "type"
	ActionWaitFor    = "wait_for"
	ActionContent    = "content"
	ActionScreenshot = "screenshot"
	ActionScroll     = "scroll"
	ActionBack       = "back"
	ActionClose      = "close"
)

// Actions lists the action names, in the order the API documents them.
var Actions = []string{ActionNavigate, ActionClick, ActionType, ActionWaitFor, ActionContent,
	ActionScreenshot, ActionScroll, ActionBack, ActionClose}

// Input limits.
const (
	maxURLBytes      = 8 << 10
	maxSelectorBytes = 4 << 10
	maxTypeBytes     = 64 << 10
	maxScrollPixels  = 1_000_000
)

// common are the parameters every timed action takes.
type common struct {
	// TimeoutS bounds the action, in seconds; 0 is the configured default.
	TimeoutS int `json:"timeout_s"`
}

func (c common) timeout(cfg *Config) time.Duration {
	if c.TimeoutS <= 0 {
		return cfg.ActionTimeout
	}
	return time.Duration(c.TimeoutS) * time.Second
}

func (c common) check(cfg *Config, fs *[]FieldError) {
	max := int(cfg.MaxActionTimeout / time.Second)
	if c.TimeoutS < 0 || c.TimeoutS > max {
		*fs = append(*fs, FieldError{Field: "params.timeout_s", Code: "range", Message: fmt.Sprintf("must be between 0 and %d", max)})
	}
}

// parseAction decodes and validates the parameters of the named action. It
// reports every invalid field at once.
func parseAction(cfg *Config, name string, raw json.RawMessage) (action, error) {
	var a action
	switch name {
	case "":
		return nil, invalid("action", "required", "an action is required: one of "+strings.Join(Actions, ", "))
	case ActionNavigate:
		a = &navigateAction{}
	case ActionClick:
		a = &clickAction{}
	case ActionType:
		a = &typeAction{}
	case ActionWaitFor:
		a = &waitForAction{}
	case ActionContent:
		a = &contentAction{}
	case ActionScreenshot:
		a = &screenshotAction{}
	case ActionScroll:
		a = &scrollAction{}
	case ActionBack:
		a = &backAction{}
	case ActionClose:
		a = closeAction{}
		if err := decodeParams(raw, &struct{}{}); err != nil {
			return nil, err
		}
		return a, nil
	default:
		return nil, invalid("action", "oneof", "must be one of: "+strings.Join(Actions, ", "))
	}
	if err := decodeParams(raw, a); err != nil {
		return nil, err
	}
	var fs []FieldError
	a.(interface{ validate(*Config, *[]FieldError) }).validate(cfg, &fs)
	if len(fs) > 0 {
		return nil, invalidFields(fs...)
	}
	return a, nil
}

// decodeParams decodes a JSON object into v, refusing unknown keys and
// wrong types with the field named. Absent or null params are empty.
func decodeParams(raw json.RawMessage, v any) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return invalid("params", "type", "must be a JSON object")
	}
	known := jsonFields(reflect.TypeOf(v))
	var fs []FieldError
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !known[k] {
			fs = append(fs, FieldError{Field: "params." + k, Code: "unknown", Message: "is not a parameter of this action"})
		}
	}
	if len(fs) > 0 {
		return invalidFields(fs...)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) {
			return invalid("params."+ute.Field, "type", "must be a JSON "+jsonType(ute.Type))
		}
		return invalid("params", "invalid", "could not be decoded")
	}
	return nil
}

// jsonFields lists the JSON names of a struct's fields, embedded structs
// included.
func jsonFields(t reflect.Type) map[string]bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	out := map[string]bool{}
	if t.Kind() != reflect.Struct {
		return out
	}
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			for k := range jsonFields(f.Type) {
				out[k] = true
			}
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" {
			out[name] = true
		}
	}
	return out
}

func jsonType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int64, reflect.Float64:
		return "number"
	}
	return t.String()
}

func checkSelector(sel string, required bool, fs *[]FieldError) {
	switch {
	case sel == "" && required:
		*fs = append(*fs, FieldError{Field: "params.selector", Code: "required", Message: "a CSS selector is required"})
	case len(sel) > maxSelectorBytes:
		*fs = append(*fs, FieldError{Field: "params.selector", Code: "max", Message: fmt.Sprintf("must be at most %d bytes", maxSelectorBytes)})
	case !utf8.ValidString(sel) || strings.ContainsRune(sel, 0):
		*fs = append(*fs, FieldError{Field: "params.selector", Code: "invalid", Message: "must be valid UTF-8 without NUL"})
	}
}

func oneOf(field, v string, allowed []string, fs *[]FieldError) {
	if v != "" && !slices.Contains(allowed, v) {
		*fs = append(*fs, FieldError{Field: field, Code: "oneof", Message: "must be one of: " + strings.Join(allowed, ", ")})
	}
}
