package manager

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/confirm"
	"github.com/sandgate/sandgate/egress"
	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/output"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/risk"
)

// RunRequest is one run_code or execute request. The struct tags are the
// pipeline's step 1; JSON names are the client's field names.
type RunRequest struct {
	RequestID string `json:"-"`
	Kind      string `json:"-"`
	Principal Principal
	SessionID string     `json:"session_id" validate:"sessionid"`
	Language  string     `json:"language" validate:"required,oneof=python bash javascript"`
	Code      string     `json:"code" validate:"required"`
	TimeoutS  int        `json:"timeout_s" validate:"min=0,max=3600"`
	Context   RunContext `json:"context"`
	// Stateful runs the code as a cell of the session's kernel
	// (DESIGN.md §11): python only, run_code only. Every cell takes the
	// whole pipeline, and an approval covers that cell's code alone.
	Stateful bool `json:"stateful"`
	// Detached: the run outlives its request (StartDetached); the
	// policy sees it as request.detached.
	Detached bool `json:"-"`
	// ref is the session, resolved for Principal by ResolveSession.
	ref SessionRef
	// memorySnapshot asks the policy as for a session created with
	// "snapshot": "memory" (snapshot_route.go's probe).
	memorySnapshot bool
	// sessionSandbox: the session's front end's layout asks for one
	// sandbox for the session's life (policy request.session_sandbox).
	sessionSandbox bool

	// Via names the channel for approvers when it is not the HTTP API
	// ("MCP, client ..."); see confirm.Request.Via.
	Via string `json:"-"`
	// OnApprovalPending, when set, is called once the approval this
	// request waits for is visible to approvers, so a caller that holds a
	// connection open (MCP, a stream) can say what it waits for. It must
	// not block. The HTTP API leaves it nil.
	OnApprovalPending func(ApprovalPending) `json:"-"`
	// OnApprovalResolved, when set, is called with the approval service's
	// answer as soon as it comes (before the request runs, when approved).
	OnApprovalResolved func(confirm.Outcome) `json:"-"`
	// OnDecision, when set, is called with the risk and the decision as
	// soon as the policy has decided, before any approval or run: a
	// streaming response starts with it. It must not block.
	OnDecision func(risk.Assessment, policy.Decision) `json:"-"`
	// OnOutput, when set, receives the run's output while it runs
	// (executors.Spec.Output): each kept chunk, masked and within the
	// caps, in order. It is called under the executor's output lock, so
	// it must not block (queue the chunk: output.Queue), and Data is only
	// valid during the call. The RunResult stays the whole answer.
	OnOutput func(output.Chunk) `json:"-"`
}

// ApprovalPending describes a request held for approval: what an agent
// waiting on it may be told (never the code).
type ApprovalPending struct {
	ID        string
	RiskLevel string
	Patterns  []risk.Pattern
	Reasons   []policy.Reason
	Deadline  time.Time
}

// RunContext carries the routing flags a request may set, and the
// agent's stated intent, which an approver is shown (never bound, never
// stored; at most MaxIntentRunes printable characters reach the page).
type RunContext struct {
	NeedsBrowser      bool   `json:"needs_browser"`
	NeedsPersistentFS bool   `json:"needs_persistent_fs"`
	Intent            string `json:"intent,omitempty"`
}

// MaxIntentRunes bounds the intent an approver is shown.
const MaxIntentRunes = 500

// Principal is the authenticated caller. Name identifies the token's owner,
// never the token. Tenant owns the sessions the caller creates and is the
// only tenant whose sessions it can reach, unless Role is admin.
type Principal struct {
	Role   string `json:"-"`
	Name   string `json:"-"`
	Tenant string `json:"-"`
}

// RunResult is everything a response reports about a finished run.
type RunResult struct {
	Result      executors.Result
	Risk        risk.Assessment
	Decision    policy.Decision
	Approval    *confirm.Outcome
	SandboxType string
	// Stateful: the run was a cell of the session's kernel; Result has
	// its Cell.
	Stateful bool
}

// Evaluation is the dry run's answer: what would happen, with nothing run.
type Evaluation struct {
	Risk     risk.Assessment
	Decision policy.Decision
}

// Run takes a request through all seven steps. The audit record is written
// before Run returns, whatever the outcome, so the response never precedes
// its record: a run's record since its write-ahead, whose outcome the store
// may commit just after the answer (audit.Later, see finish).
func (m *Manager) Run(ctx context.Context, req RunRequest) (res *RunResult, err error) {
	start := time.Now()
	rec := newRecord(req)
	setDetail(rec, "front_end", frontEndOf(ctx))
	started, ranOn := false, ""
	defer func() {
		m.finish(ctx, rec, res, err, start)
		if started {
			m.emit(ctx, "run.finished", req.ref, runEventData(rec, rec.Outcome))
		}
	}()

	if err := m.validate(&req); err != nil { // 1 validate
		return nil, err
	}
	if req.ref, err = m.ResolveSession(req.Principal, req.SessionID); err != nil { // 1 the caller's session
		return nil, err
	}
	rec.Tenant, rec.SessionID = req.ref.Tenant, req.ref.ID
	release, err := m.admit(ctx, req.ref, opRun) // 1 the tenant's quotas
	defer release()
	if err != nil {
		return nil, err
	}
	sess, err := m.local(ctx, req.ref) // 1 the session, served here
	if err != nil {
		return nil, err
	}
	req.sessionSandbox = m.wantsSessionSandbox(sess)
	// In flight from here, an approval's wait included: the expiry loop
	// never releases a session under a request that may still run.
	sess.begin()
	defer func() {
		sess.end(ranOn) // "" when it never reached its executor
	}()
	assessment, err := m.deps.Assessor.Assess(req.Code, req.Language) // 2 assess
	if err != nil {
		return nil, invalidFields(FieldError{Field: "language", Code: "oneof", Message: "unsupported language"})
	}
	rec.RiskLevel, rec.RiskPatterns = assessment.Level.String(), patternIDs(assessment)
	decision := m.decide(ctx, req, assessment) // 3 decide
	recordDecision(rec, decision)
	if req.OnDecision != nil {
		req.OnDecision(assessment, decision)
	}
	out := &RunResult{Risk: assessment, Decision: decision, Stateful: req.Stateful}
	if err := m.gate(ctx, req, out); err != nil { // 4 confirm
		rec.Approval = approvalRecord(out.Approval)
		return out, err
	}
	rec.Approval = approvalRecord(out.Approval)
	exec, err := m.route(decision) // 5 route
	if err != nil {
		return out, err
	}
	spec := specFor(req, decision)
	if err := m.attachEgress(req, out, &spec); err != nil {
		recordDenial(rec, err)
		return out, err
	}
	if err := enforceable(exec, spec, decision); err != nil {
		recordDenial(rec, err)
		return out, err
	}
	announce := sync.OnceFunc(func() { m.emit(ctx, "run.started", req.ref, runEventData(rec, "")) })
	committed, err := m.commitAhead(ctx, rec, exec, &spec, announce) // 6 write ahead, so a crash cannot erase the run
	if err != nil {
		return out, err
	}
	result, err := m.execute(ctx, sess, exec, spec, decision) // 6 execute
	if cerr := committed(); cerr != nil {
		return out, cerr // the executor never let the run start
	}
	started, ranOn = true, string(exec.Kind())
	announce()
	if err != nil {
		recordDenial(rec, err)
		return out, err
	}
	out.Result, out.SandboxType = result, string(exec.Kind())
	m.held(ctx, sess, exec, result)
	if result.Cell != nil && result.Cell.KernelRestarted {
		setDetail(rec, "kernel_restarted", "true")
	}
	return out, nil // 7 record: the deferred finish
}

// Evaluate is the dry run: validate, assess, decide. Nothing runs, nothing
// waits for approval, and nothing is audited (no action was taken).
func (m *Manager) Evaluate(ctx context.Context, req RunRequest) (*Evaluation, error) {
	if err := m.validate(&req); err != nil {
		return nil, err
	}
	var err error
	if req.ref, err = m.ResolveSession(req.Principal, req.SessionID); err != nil {
		return nil, err
	}
	if err := m.admitted(ctx, req.ref, opRead, func() error { return nil }); err != nil {
		m.refused(ctx, KindEvaluate, req.Principal, req.ref, err)
		return nil, err
	}
	assessment, err := m.deps.Assessor.Assess(req.Code, req.Language)
	if err != nil {
		return nil, invalidFields(FieldError{Field: "language", Code: "oneof", Message: "unsupported language"})
	}
	// A dry run decides as the run would: with the session's front end's
	// one-sandbox wish (read, not claimed: evaluating serves nothing).
	req.sessionSandbox = m.sessionSandboxOf(ctx, req.ref)
	return &Evaluation{Risk: assessment, Decision: m.decide(ctx, req, assessment)}, nil
}

func (m *Manager) timeoutS(req RunRequest) int {
	if req.TimeoutS > 0 {
		return req.TimeoutS
	}
	return int(m.cfg.DefaultTimeout / time.Second)
}

func (m *Manager) decide(ctx context.Context, req RunRequest, a risk.Assessment) policy.Decision {
	start := time.Now()
	in := policy.Input{
		Mode: m.cfg.Mode,
		Request: policy.Request{
			Kind: req.Kind, SessionID: req.ref.ID, Language: req.Language,
			CodeBytes: len(req.Code), CodeSHA256: policy.SHA256Hex([]byte(req.Code)), TimeoutS: m.timeoutS(req),
			Context: policy.Context{NeedsBrowser: req.Context.NeedsBrowser, NeedsPersistentFS: req.Context.NeedsPersistentFS,
				NeedsMemorySnapshot: req.memorySnapshot || m.needsMemory(req.ref)},
			Stateful: req.Stateful, Detached: req.Detached, SessionSandbox: req.sessionSandbox,
		},
		Risk:      policy.Risk{Level: a.Level.String(), ProvenSafe: a.ProvenSafe, Patterns: riskPatterns(a)},
		Principal: policy.Principal{Role: req.Principal.Role, Name: req.Principal.Name, Tenant: req.Principal.Tenant},
		Executors: m.avail.PolicyInput(ctx),
	}
	d := m.deps.Policy.Decide(ctx, in)
	m.deps.Metrics.observePolicy(time.Since(start))
	return d
}

// gate is step 4. Deny and executor_unavailable end the request here; an
// approval is asked for only when the policy requires one.
func (m *Manager) gate(ctx context.Context, req RunRequest, out *RunResult) error {
	d := out.Decision
	switch d.Action {
	case policy.ActionAllow:
		return nil
	case policy.ActionRequireApproval:
		return m.confirm(ctx, req, out)
	}
	if d.OnlyReason(policy.ReasonExecutorUnavailable) {
		return denied(ErrExecutorUnavailable, d)
	}
	return denied(ErrPolicyDenied, d)
}

func (m *Manager) confirm(ctx context.Context, req RunRequest, out *RunResult) error {
	d := out.Decision
	if m.deps.Confirm == nil {
		return denied(ErrApprovalUnavailable, d, policy.Reason{Code: "approval_unavailable",
			Message: "the policy requires approval and no approval service is configured"})
	}
	creq := m.confirmRequest(req, out)
	// The service owns the timeout (it tells the approvers), but the wait is
	// bounded here too, so a service that ignores Deadline cannot hold a
	// request past it.
	cctx, cancel := context.WithDeadline(ctx, creq.Deadline.Add(approvalGrace))
	defer cancel()
	outcome, err := m.deps.Confirm.Confirm(cctx, creq)
	if err == nil && outcome.ApprovalID != "" {
		m.emit(ctx, "approval.resolved", req.ref, map[string]any{"approval_id": outcome.ApprovalID, "request_id": req.RequestID,
			"status": outcome.Status, "decided_by": outcome.DecidedBy})
	}
	if err == nil && req.OnApprovalResolved != nil {
		req.OnApprovalResolved(outcome)
	}
	if cerr := ctx.Err(); cerr != nil {
		// The client went away while the request was held (the service
		// withdrew the approval): a cancellation, not a denial.
		if err == nil {
			out.Approval = &outcome
		}
		return fmt.Errorf("%w: %w", ErrCancelled, cerr)
	}
	if ctx.Err() == nil && errors.Is(cctx.Err(), context.DeadlineExceeded) && outcome.Status != confirm.StatusApproved {
		return denied(ErrApprovalTimeout, d, policy.Reason{Code: "approval_timeout", Message: "no approver decided in time"})
	}
	if err != nil {
		m.log.ErrorContext(ctx, "approval service failed", "request_id", req.RequestID, "err", err)
		return denied(ErrApprovalUnavailable, d, policy.Reason{Code: "approval_unavailable", Message: "the approval service failed"})
	}
	out.Approval = &outcome
	switch outcome.Status {
	case confirm.StatusApproved:
		return nil
	case confirm.StatusTimeout:
		return denied(ErrApprovalTimeout, d, policy.Reason{Code: "approval_timeout", Message: "no approver decided in time"})
	default:
		return denied(ErrApprovalDenied, d, policy.Reason{Code: "approval_" + outcome.Status, Message: outcome.Reason})
	}
}

func (m *Manager) confirmRequest(req RunRequest, out *RunResult) confirm.Request {
	pats := make([]confirm.Pattern, len(out.Risk.Patterns))
	for i, p := range out.Risk.Patterns {
		pats[i] = confirm.Pattern{ID: p.ID, Message: p.Message, Line: p.Line}
	}
	reasons := make([]confirm.Reason, len(out.Decision.Reasons))
	for i, r := range out.Decision.Reasons {
		reasons[i] = confirm.Reason{Code: r.Code, Message: r.Message}
	}
	deadline := time.Now().Add(m.cfg.ApprovalTimeout)
	cctx := map[string]bool{"needs_browser": req.Context.NeedsBrowser, "needs_persistent_fs": req.Context.NeedsPersistentFS}
	if req.Stateful {
		// Only when set: the digest of every stateless request stays
		// what it was, and a cell's approval is bound to its kernel.
		cctx["stateful"] = true
	}
	return confirm.Request{
		RequestID: req.RequestID, Tenant: req.ref.Tenant, SessionID: req.ref.ID, Language: req.Language, Code: req.Code,
		CodeSHA256: policy.SHA256Hex([]byte(req.Code)), RiskLevel: out.Risk.Level.String(), Patterns: pats,
		Reasons: reasons, Executor: out.Decision.Executor, PolicyRevision: out.Decision.PolicyRevision,
		Principal: req.Principal.Name,
		Context:   cctx,
		Deadline:  deadline, Via: req.Via, Published: m.published(req, out, deadline),
		Intent: Printable(req.Context.Intent, MaxIntentRunes),
	}
}

// published adapts req's OnApprovalPending to confirm.Request.Published,
// and tells the event log (approval.requested).
func (m *Manager) published(req RunRequest, out *RunResult, deadline time.Time) func(string) {
	if req.OnApprovalPending == nil && m.deps.Events == nil {
		return nil
	}
	return func(id string) {
		m.emit(context.Background(), "approval.requested", req.ref, map[string]any{"approval_id": id, "request_id": req.RequestID,
			"code_sha256": policy.SHA256Hex([]byte(req.Code)), "risk_level": out.Risk.Level.String(), "deadline": deadline})
		if req.OnApprovalPending != nil {
			req.OnApprovalPending(ApprovalPending{ID: id, RiskLevel: out.Risk.Level.String(), Patterns: out.Risk.Patterns,
				Reasons: out.Decision.Reasons, Deadline: deadline})
		}
	}
}

// approvalGrace is how long past the approval deadline the manager waits
// for the service's own timeout before it gives up on its own.
const approvalGrace = time.Second

// route is step 5: the decision names the executor; if it is not wired, the
// request fails. There is never a fallback to a weaker executor.
func (m *Manager) route(d policy.Decision) (executors.Executor, error) {
	exec, ok := m.execs[d.Executor]
	if !ok {
		return nil, denied(ErrExecutorUnavailable, d, policy.Reason{Code: "executor_unavailable",
			Message: "executor " + d.Executor + " is not available"})
	}
	return exec, nil
}

// specFor is the run the decision allows, without its workspace: the
// obligations become the Spec's timeout, network and limits. The
// executors get the session's key, not its name: their per-session state
// (zygotes, warm containers, pool instances) is then per tenant too.
func specFor(req RunRequest, d policy.Decision) executors.Spec {
	return executors.Spec{
		RequestID: req.RequestID, SessionID: req.ref.Key, Language: req.Language, Code: req.Code,
		Timeout: time.Duration(d.Obligations.TimeoutS) * time.Second, Network: d.Obligations.Network,
		Limits: executors.Limits{MemoryMB: d.Obligations.MemoryMB, MaxProcs: d.Obligations.MaxProcs},
		Output: req.OnOutput, Stateful: req.Stateful,
		// The layout itself comes with the workspace (execute); its
		// SessionSandbox is known now, so enforceable checks it too.
		Layout: executors.Layout{SessionSandbox: req.sessionSandbox},
	}
}

// attachEgress gives a run granted network its handle on the egress proxy,
// bound to the run: every connection it opens is decided and audited as
// this run's (session, principal, request id, risk).
func (m *Manager) attachEgress(req RunRequest, out *RunResult, spec *executors.Spec) error {
	if !spec.Network {
		return nil
	}
	if m.deps.Egress == nil {
		return denied(ErrPolicyDenied, out.Decision, policy.Reason{Code: "egress_unavailable",
			Message: "the policy grants network and no egress proxy is configured"})
	}
	spec.Egress = m.deps.Egress.ForRun(egress.Binding{
		Tenant: req.ref.Tenant, SessionID: req.ref.ID, SessionKey: req.ref.Key, Principal: req.Principal.Name,
		RequestID: req.RequestID, Risk: out.Risk.Level.String(),
	})
	return nil
}

// enforceable is the manager's own check that the executor can enforce
// the decision's obligations. The default policy never routes such a run
// (it reads the same capabilities), but an administrator's policy might:
// the run is then denied here, before any workspace is touched, rather
// than run without an obligation or sent to fail.
func enforceable(exec executors.Executor, spec executors.Spec, d policy.Decision) error {
	if err := exec.Capabilities().Check(exec.Kind(), spec); err != nil {
		return capabilityDenied(exec.Kind(), err, d)
	}
	return nil
}

// capabilityDenied is the 403 of a run the executor cannot enforce.
func capabilityDenied(kind executors.Kind, err error, d policy.Decision) error {
	msg := string(kind) + " cannot enforce an obligation of this run"
	var ce *executors.CapabilityError
	if errors.As(err, &ce) {
		msg = ce.Error() // names the kind, the capabilities and the mode only
	}
	return denied(ErrPolicyDenied, d, policy.Reason{Code: policy.ReasonCapabilityMissing, Message: msg})
}

// recordDenial adds the reasons of a denial that came after the decision
// (a missing capability, an unavailable executor) to the audit record.
func recordDenial(rec *audit.Record, err error) {
	var de *DeniedError
	if !errors.As(err, &de) {
		return
	}
	for _, r := range de.Reasons {
		if ar := (audit.Reason{Code: r.Code, Message: r.Message, Enforcement: r.Enforcement}); !slices.Contains(rec.Reasons, ar) {
			rec.Reasons = append(rec.Reasons, ar)
		}
	}
}

func (m *Manager) execute(ctx context.Context, sess *Session, exec executors.Executor, spec executors.Spec, d policy.Decision) (executors.Result, error) {
	dir, err := m.deps.Workspaces.Ensure(ctx, spec.SessionID)
	if err != nil {
		return executors.Result{}, err
	}
	if err := m.stillServed(sess); err != nil {
		return executors.Result{}, err
	}
	spec.WorkspaceDir, spec.UID, spec.GID = dir.Path, dir.UID, dir.GID
	if spec.Layout, err = m.layoutFor(ctx, sess, spec.SessionID); err != nil {
		return executors.Result{}, err
	}
	start := time.Now()
	res, err := exec.Execute(ctx, spec)
	m.deps.Metrics.observeExec(string(exec.Kind()), time.Since(start))
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, executors.ErrUnavailable) {
		// The client went away (or the gateway is shutting down): the
		// executor killed the run; record it as cancelled, not as a failure.
		return res, fmt.Errorf("%w: %w", ErrCancelled, cerr)
	}
	switch {
	case errors.Is(err, executors.ErrCapabilityMissing):
		// Not unavailability: probing again would not change it, so the
		// executor is neither re-probed nor retried.
		m.log.WarnContext(ctx, "executor cannot enforce the run's obligations", "executor", exec.Kind(), "err", err)
		return res, capabilityDenied(exec.Kind(), err, d)
	case errors.Is(err, executors.ErrUnavailable):
		m.avail.RunFailed(exec.Kind(), err)
		m.log.WarnContext(ctx, "executor unavailable", "executor", exec.Kind(), "err", err)
		return res, denied(ErrExecutorUnavailable, d, policy.Reason{Code: policy.ReasonExecutorUnavailable,
			Message: "executor " + d.Executor + " is not available: " + unavailableReason(err)})
	case err == nil:
		m.avail.RunSucceeded(exec.Kind())
	}
	return res, err
}

func riskPatterns(a risk.Assessment) []policy.RiskPattern {
	out := make([]policy.RiskPattern, len(a.Patterns))
	for i, p := range a.Patterns {
		out[i] = policy.RiskPattern{ID: p.ID, Level: p.Level.String(), Line: p.Line}
	}
	return out
}

func patternIDs(a risk.Assessment) []string {
	ids := make([]string, len(a.Patterns))
	for i, p := range a.Patterns {
		ids[i] = p.ID
	}
	return ids
}

func newRecord(req RunRequest) *audit.Record {
	kind := req.Kind
	if kind == "" {
		kind = "unknown" // still one record; validation rejects the request
	}
	rec := &audit.Record{
		RequestID: req.RequestID, Kind: kind, Tenant: req.Principal.Tenant, SessionID: req.SessionID,
		Principal: req.Principal.Role + ":" + req.Principal.Name, Language: req.Language,
		CodeSHA256: policy.SHA256Hex([]byte(req.Code)), CodeBytes: len(req.Code),
	}
	if req.Stateful {
		setDetail(rec, "stateful", "true")
	}
	return rec
}

// recordDecision puts d in rec: the action and executor, the reasons with
// their enforcement modes, the revision, the decision_id that joins the
// record to the decision log, and the would-be action of a dryrun or warn.
func recordDecision(rec *audit.Record, d policy.Decision) {
	rec.Action, rec.Executor, rec.PolicyRevision = d.Action, d.Executor, d.PolicyRevision
	rec.DecisionID, rec.WouldBe = d.DecisionID, d.WouldBe
	for _, r := range d.Reasons {
		rec.Reasons = append(rec.Reasons, audit.Reason{Code: r.Code, Message: r.Message, Enforcement: r.Enforcement})
	}
}

func approvalRecord(o *confirm.Outcome) *audit.Approval {
	if o == nil {
		return nil
	}
	return &audit.Approval{ID: o.ApprovalID, Status: o.Status, DecidedBy: o.DecidedBy, Reason: o.Reason,
		TimeToDecideMS: o.TimeToDecide.Milliseconds()}
}
