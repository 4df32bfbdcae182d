// Package policy loads, hot-reloads and evaluates the Rego that decides what
// happens to every request.
//
// The engine embeds OPA through its v1/rego API: the policy is compiled once
// per revision with Strict(true), type-checked against an input schema that
// ships with the binary (it describes what the manager sends, so it is not
// admin-editable and lives outside the loaded tree), and prepared once. Each
// request then only evaluates the prepared query. Network built-ins are
// refused at compile time.
//
// Every failure path fails closed: an evaluation error, a timeout, an
// undefined result or a result that does not match the decision document
// all become a deny whose reason code says which.
package policy

import (
	"crypto/sha256"
	"encoding/hex"
)

// Actions of the decision document (DESIGN.md §4).
const (
	ActionAllow           = "allow"
	ActionRequireApproval = "require_approval"
	ActionDeny            = "deny"
)

// Reason codes the engine itself produces when it fails closed. Policy
// authors produce their own codes (risk.high, executor_unavailable, ...).
const (
	ReasonNotLoaded       = "policy.not_loaded"
	ReasonEvalError       = "policy.error"
	ReasonTimeout         = "policy.timeout"
	ReasonUndefined       = "policy.undefined"
	ReasonInvalidDecision = "policy.invalid_decision"
	// ReasonExecutorUnavailable is the code the default policy uses when the
	// chosen executor is not available (input.executors.<kind>.available).
	// The manager maps a deny made only of this reason to 503
	// executor_unavailable.
	ReasonExecutorUnavailable = "executor_unavailable"
	// ReasonCapabilityMissing is the code of a run the chosen executor
	// cannot enforce an obligation of (no network isolation, no process
	// limit...): a 403 policy deny, since probing again would not help.
	ReasonCapabilityMissing = "executor.capability_missing"
)

// Decision is the decision document of DESIGN.md §4.
type Decision struct {
	Action         string      `json:"action"`
	Executor       string      `json:"executor"`
	Reasons        []Reason    `json:"reasons"`
	Obligations    Obligations `json:"obligations"`
	PolicyRevision string      `json:"policy_revision"`
	// DecisionID names this one decision, as OPA's decision_id does: the
	// decision-log event carries it, and the audit record should too, so
	// the two join.
	DecisionID string `json:"decision_id,omitempty"`
	// WouldBe is the action the decision would have had if its dryrun and
	// warn reasons were enforced; empty when that is Action. The audit
	// record and the decision log show it.
	WouldBe string `json:"would_be,omitempty"`
}

// Enforcement modes of a reason (Reason.Enforcement), on the model of
// Gatekeeper's enforcementAction.
const (
	// EnforcementEnforce is the default: the reason decides.
	EnforcementEnforce = "enforce"
	// EnforcementDryrun: the reason does not decide; the decision
	// records what it would have been (Decision.WouldBe).
	EnforcementDryrun = "dryrun"
	// EnforcementWarn: as dryrun, and the agent is told (Warnings).
	EnforcementWarn = "warn"
)

// Reason explains a decision with a stable code and a human message.
type Reason struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Enforcement is empty (enforce), EnforcementDryrun or
	// EnforcementWarn: a reason that did not decide.
	Enforcement string `json:"enforcement,omitempty"`
}

// Enforced reports whether r decided (its mode is enforce).
func (r Reason) Enforced() bool {
	return r.Enforcement == "" || r.Enforcement == EnforcementEnforce
}

// Obligations are limits the policy attaches to an allowed run. Executors
// must enforce them; they may only tighten them further.
type Obligations struct {
	Network  bool `json:"network"`
	TimeoutS int  `json:"timeout_s"`
	MemoryMB int  `json:"memory_mb"`
	// MaxProcs caps the run's processes (threads count too). Optional in
	// the decision document: zero means the executor's own default.
	MaxProcs int `json:"max_procs"`
}

// Allowed reports whether the request may run without approval.
func (d Decision) Allowed() bool { return d.Action == ActionAllow }

// Warnings are the reasons in warn mode: what the agent is told about
// rules that would have stopped it.
func (d Decision) Warnings() []Reason {
	var out []Reason
	for _, r := range d.Reasons {
		if r.Enforcement == EnforcementWarn {
			out = append(out, r)
		}
	}
	return out
}

// OnlyReason reports whether every reason of d has the given code (and there
// is at least one).
func (d Decision) OnlyReason(code string) bool {
	if len(d.Reasons) == 0 {
		return false
	}
	for _, r := range d.Reasons {
		if r.Code != code {
			return false
		}
	}
	return true
}

// deny builds the fail-closed decision.
func deny(revision, code, message string) Decision {
	return Decision{
		Action:         ActionDeny,
		Executor:       "none",
		Reasons:        []Reason{{Code: code, Message: message}},
		PolicyRevision: revision,
	}
}

// Input is what the policy sees about one request. The code itself is never
// sent: only its size and hash (policy.md §0.4, and it keeps evaluation cost
// independent of code size).
type Input struct {
	Mode      string
	Request   Request
	Risk      Risk
	Principal Principal
	// Executors describes every wired executor, by kind. A kind that is
	// not wired is absent, which the policy treats as unavailable.
	Executors map[string]ExecutorState
}

// ExecutorState is what the policy knows of one executor: whether it can
// run work now and what it can enforce (DESIGN.md §6).
type ExecutorState struct {
	Available bool
	// Reason says why the executor is not available. It is operator text
	// the policy may quote in a deny message, so it never carries a
	// wrapped internal error.
	Reason string
	// Capabilities are executors.Capabilities.Map(): this package does
	// not depend on the executors.
	Capabilities map[string]any
}

// Request describes the would-be run.
type Request struct {
	Kind       string
	SessionID  string
	Language   string
	CodeBytes  int
	CodeSHA256 string
	TimeoutS   int
	Context    Context
	// Stateful: the run is a cell of the session's kernel (DESIGN.md §11).
	Stateful bool
	// Detached: the run outlives its request (E2B's processes, a server
	// an agent's later commands call), in the session's sandbox.
	Detached bool
	// SessionSandbox: the session's front end expects one sandbox for
	// the session's life (E2B: processes, /tmp and installed packages
	// persist); the executor must have the session_sandbox capability.
	SessionSandbox bool
}

// Context carries the routing flags of the request.
type Context struct {
	NeedsBrowser      bool
	NeedsPersistentFS bool
	// NeedsMemorySnapshot: the session was created with "snapshot":
	// "memory", so a pause must keep its kernel's memory; its stateful
	// cells go where that is kept (config.snapshot_memory).
	NeedsMemorySnapshot bool
}

// Risk is the static assessment, as plain strings so policy does not depend
// on the risk package.
type Risk struct {
	Level      string
	ProvenSafe bool
	Patterns   []RiskPattern
}

// RiskPattern is one denylist hit.
type RiskPattern struct {
	ID    string
	Level string
	Line  int
}

// Principal is who asked. Tenant is the tenant that owns the session, so
// a policy can treat tenants differently (data.json keyed by tenant).
type Principal struct {
	Role   string
	Name   string
	Tenant string
}

// SHA256Hex is a helper for building Request.CodeSHA256.
func SHA256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Map builds the OPA input as map[string]any: OPA copies native JSON types on
// a fast path, while a struct would take a JSON round trip per evaluation.
func (in Input) Map() map[string]any {
	patterns := make([]any, len(in.Risk.Patterns))
	for i, p := range in.Risk.Patterns {
		patterns[i] = map[string]any{"id": p.ID, "level": p.Level, "line": p.Line}
	}
	return map[string]any{
		"mode": in.Mode,
		"request": map[string]any{
			"kind":            in.Request.Kind,
			"session_id":      in.Request.SessionID,
			"language":        in.Request.Language,
			"code_bytes":      in.Request.CodeBytes,
			"code_sha256":     in.Request.CodeSHA256,
			"timeout_s":       in.Request.TimeoutS,
			"stateful":        in.Request.Stateful,
			"detached":        in.Request.Detached,
			"session_sandbox": in.Request.SessionSandbox,
			"context": map[string]any{
				"needs_browser":         in.Request.Context.NeedsBrowser,
				"needs_persistent_fs":   in.Request.Context.NeedsPersistentFS,
				"needs_memory_snapshot": in.Request.Context.NeedsMemorySnapshot,
			},
		},
		"risk": map[string]any{
			"level":       in.Risk.Level,
			"proven_safe": in.Risk.ProvenSafe,
			"patterns":    patterns,
		},
		"principal": map[string]any{"role": in.Principal.Role, "name": in.Principal.Name, "tenant": in.Principal.Tenant},
		"executors": executorsMap(in.Executors),
	}
}

// executorsMap is input.executors: every executor by kind, with its reason
// only when it is not available.
func executorsMap(states map[string]ExecutorState) map[string]any {
	execs := make(map[string]any, len(states))
	for kind, st := range states {
		e := map[string]any{"available": st.Available, "capabilities": st.Capabilities}
		if st.Capabilities == nil {
			e["capabilities"] = map[string]any{}
		}
		if !st.Available {
			e["reason"] = st.Reason
		}
		execs[kind] = e
	}
	return execs
}
