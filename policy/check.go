package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/open-policy-agent/opa/v1/ast"
)

// The decisions a raw input document can be checked against (CheckInput):
// each has its input schema, policy/schemas/<kind>_input.json.
const (
	CheckExec    = "exec"
	CheckBrowser = "browser"
	CheckEgress  = "egress"
)

// CheckKinds lists them in the order detection tries them.
var CheckKinds = []string{CheckExec, CheckBrowser, CheckEgress}

// ErrBadInput wraps every reason a raw input document is refused: not
// JSON, not an object, or not valid under the input schema.
var ErrBadInput = errors.New("policy: invalid input document")

// CheckedInput is the decision for one raw input document.
type CheckedInput struct {
	// Kind is the decision asked: exec, browser or egress.
	Kind string `json:"kind"`
	// Decision is a Decision, BrowserDecision or EgressDecision.
	Decision any `json:"decision"`
}

// CheckInput decides a raw input document, as the gateway would have
// built it, against the policy in force, with no side effect: it is not
// logged, not shadowed, and its decision_id is empty. kind names the
// decision; empty detects it as the one schema the document is valid
// under. The document must be valid under the schema the gateway's own
// inputs follow (policy/schemas), so a check cannot pass on an input the
// gateway could never send.
func (e *Engine) CheckInput(ctx context.Context, kind string, doc []byte) (CheckedInput, error) {
	var input map[string]any
	dec := json.NewDecoder(bytes.NewReader(doc))
	if err := dec.Decode(&input); err != nil {
		return CheckedInput{}, fmt.Errorf("%w: %w", ErrBadInput, err)
	}
	if dec.More() {
		return CheckedInput{}, fmt.Errorf("%w: more than one JSON value", ErrBadInput)
	}
	if input == nil {
		return CheckedInput{}, fmt.Errorf("%w: want a JSON object", ErrBadInput)
	}
	kind, err := inputKind(kind, input)
	if err != nil {
		return CheckedInput{}, err
	}
	c := e.cur.Load()
	if c == nil {
		return CheckedInput{}, errors.New("policy: no policy is loaded")
	}
	out := CheckedInput{Kind: kind}
	switch kind {
	case CheckExec:
		v, err := ast.InterfaceToValue(input)
		if err != nil {
			return CheckedInput{}, fmt.Errorf("%w: %w", ErrBadInput, err)
		}
		out.Decision = e.decideValue(ctx, c, v)
	case CheckBrowser:
		out.Decision = e.decideBrowser(ctx, c, input)
	case CheckEgress:
		out.Decision = e.decideEgress(ctx, c, input)
	}
	return out, nil
}

// inputKind validates input under kind's schema, or, without a kind,
// finds the one schema it is valid under.
func inputKind(kind string, input map[string]any) (string, error) {
	if kind != "" {
		return kind, ValidateInput(kind, input)
	}
	var valid []string
	var errs []string
	for _, k := range CheckKinds {
		if err := ValidateInput(k, input); err != nil {
			errs = append(errs, err.Error())
			continue
		}
		valid = append(valid, k)
	}
	switch len(valid) {
	case 1:
		return valid[0], nil
	case 0:
		return "", fmt.Errorf("%w: valid under no input schema:\n  %s", ErrBadInput, strings.Join(errs, "\n  "))
	}
	return "", fmt.Errorf("%w: valid under the %s schemas: name the decision", ErrBadInput, strings.Join(valid, " and "))
}

// ValidateInput checks a decoded JSON document (encoding/json's types)
// against the input schema of kind.
func ValidateInput(kind string, input any) error {
	rs, err := inputSchema(kind)
	if err != nil {
		return err
	}
	if err := rs.Validate(input); err != nil {
		return fmt.Errorf("%w: %s input: %w", ErrBadInput, kind, err)
	}
	return nil
}

func inputSchema(kind string) (*jsonschema.Resolved, error) {
	switch kind {
	case CheckExec, CheckBrowser, CheckEgress:
	default:
		return nil, fmt.Errorf("%w: unknown decision %q (want %s)", ErrBadInput, kind, strings.Join(CheckKinds, ", "))
	}
	b, err := schemaFiles.ReadFile("schemas/" + kind + "_input.json")
	if err != nil {
		return nil, fmt.Errorf("policy: %s input schema: %w", kind, err)
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("policy: %s input schema: %w", kind, err)
	}
	rs, err := s.Resolve(nil)
	if err != nil {
		return nil, fmt.Errorf("policy: %s input schema: %w", kind, err)
	}
	return rs, nil
}
