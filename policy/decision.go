package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
)

var errBadDecision = errors.New("decision does not match the decision document")

// knownExecutors are the executors an allow or require_approval may name.
var knownExecutors = map[string]bool{"subprocess": true, "docker": true, "gvisor": true, "aio": true, "kubernetes": true}

// parseDecision checks an evaluated value against the decision document of
// DESIGN.md §4 and converts it. It is strict on purpose: a decision with an
// unknown action, an unknown executor or an unexpected field is an
// administrator's mistake, and the engine turns it into a deny rather than
// guessing what was meant.
func parseDecision(v any) (Decision, error) {
	obj, ok := v.(map[string]any)
	if !ok {
		return Decision{}, fmt.Errorf("%w: not an object", errBadDecision)
	}
	for k := range obj {
		switch k {
		case "action", "executor", "reasons", "obligations", "policy_revision", "would_be":
		default:
			return Decision{}, fmt.Errorf("%w: unexpected field %q", errBadDecision, k)
		}
	}
	var d Decision
	var err error
	if d.Action, err = str(obj, "action"); err != nil {
		return Decision{}, err
	}
	if d.Executor, err = str(obj, "executor"); err != nil {
		return Decision{}, err
	}
	switch d.Action {
	case ActionAllow, ActionRequireApproval:
		if !knownExecutors[d.Executor] {
			return Decision{}, fmt.Errorf("%w: unknown executor %q", errBadDecision, d.Executor)
		}
	case ActionDeny:
	default:
		return Decision{}, fmt.Errorf("%w: unknown action %q", errBadDecision, d.Action)
	}
	if d.Reasons, err = reasons(obj["reasons"]); err != nil {
		return Decision{}, err
	}
	if v, ok := obj["would_be"]; ok {
		if d.WouldBe, ok = v.(string); !ok {
			return Decision{}, fmt.Errorf("%w: would_be must be a string", errBadDecision)
		}
		switch d.WouldBe {
		case ActionAllow, ActionRequireApproval, ActionDeny:
		default:
			return Decision{}, fmt.Errorf("%w: unknown would_be action %q", errBadDecision, d.WouldBe)
		}
		if d.WouldBe == d.Action {
			d.WouldBe = ""
		}
	}
	if d.Obligations, err = obligations(obj["obligations"]); err != nil {
		return Decision{}, err
	}
	if d.Action == ActionAllow && d.Obligations.TimeoutS < 1 {
		return Decision{}, fmt.Errorf("%w: allow without a positive timeout_s", errBadDecision)
	}
	return d, nil
}

func str(obj map[string]any, key string) (string, error) {
	s, ok := obj[key].(string)
	if !ok {
		return "", fmt.Errorf("%w: %s must be a string", errBadDecision, key)
	}
	return s, nil
}

func reasons(v any) ([]Reason, error) {
	arr, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%w: reasons must be an array", errBadDecision)
	}
	out := make([]Reason, 0, len(arr))
	for _, item := range arr {
		obj, ok := item.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%w: reason must be an object", errBadDecision)
		}
		code, err := str(obj, "code")
		if err != nil || code == "" {
			return nil, fmt.Errorf("%w: reason needs a code", errBadDecision)
		}
		msg, err := str(obj, "message")
		if err != nil {
			return nil, err
		}
		mode, err := enforcementOf(obj)
		if err != nil {
			return nil, err
		}
		// Other fields of a reason are ignored, as they always were.
		out = append(out, Reason{Code: code, Message: msg, Enforcement: mode})
	}
	return out, nil
}

// enforcementOf is a reason's optional enforcement mode, "" for enforce.
func enforcementOf(obj map[string]any) (string, error) {
	v, ok := obj["enforcement"]
	if !ok {
		return "", nil
	}
	switch mode, _ := v.(string); mode {
	case EnforcementEnforce:
		return "", nil
	case EnforcementDryrun, EnforcementWarn:
		return mode, nil
	default:
		return "", fmt.Errorf("%w: unknown enforcement %v", errBadDecision, v)
	}
}

func obligations(v any) (Obligations, error) {
	obj, ok := v.(map[string]any)
	if !ok {
		return Obligations{}, fmt.Errorf("%w: obligations must be an object", errBadDecision)
	}
	var o Obligations
	if o.Network, ok = obj["network"].(bool); !ok {
		return Obligations{}, fmt.Errorf("%w: obligations.network must be a boolean", errBadDecision)
	}
	var err error
	if o.TimeoutS, err = nonNegInt(obj["timeout_s"], "timeout_s"); err != nil {
		return Obligations{}, err
	}
	if o.MemoryMB, err = nonNegInt(obj["memory_mb"], "memory_mb"); err != nil {
		return Obligations{}, err
	}
	// max_procs came after the first decision documents: a policy that
	// does not set it leaves the executor's default in force.
	if v, ok := obj["max_procs"]; ok {
		if o.MaxProcs, err = nonNegInt(v, "max_procs"); err != nil {
			return Obligations{}, err
		}
	}
	return o, nil
}

// nonNegInt accepts the number forms OPA hands back (json.Number from the
// AST conversion, float64 or int) and requires a whole, non-negative value.
func nonNegInt(v any, name string) (int, error) {
	var f float64
	switch n := v.(type) {
	case json.Number:
		var err error
		if f, err = n.Float64(); err != nil {
			return 0, fmt.Errorf("%w: obligations.%s: %w", errBadDecision, name, err)
		}
	case float64:
		f = n
	case int:
		f = float64(n)
	default:
		return 0, fmt.Errorf("%w: obligations.%s must be a number", errBadDecision, name)
	}
	if f < 0 || f != math.Trunc(f) || f > math.MaxInt32 {
		return 0, fmt.Errorf("%w: obligations.%s must be a whole number >= 0", errBadDecision, name)
	}
	return int(f), nil
}
