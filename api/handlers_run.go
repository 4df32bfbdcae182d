package api

import (
	"net/http"
	"strings"

	"github.com/sandgate/sandgate/confirm"
	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/risk"
)

type runCodeBody struct {
	Code     string             `json:"code"`
	Language string             `json:"language"`
	TimeoutS int                `json:"timeout_s"`
	Context  manager.RunContext `json:"context"`
	Stateful bool               `json:"stateful"`
}

type executeBody struct {
	Command  string `json:"command"`
	TimeoutS int    `json:"timeout_s"`
}

type evaluateBody struct {
	SessionID string             `json:"session_id"`
	Kind      string             `json:"kind"`
	Code      string             `json:"code"`
	Language  string             `json:"language"`
	TimeoutS  int                `json:"timeout_s"`
	Context   manager.RunContext `json:"context"`
	Stateful  bool               `json:"stateful"`
}

// decisionView is the decision as responses show it.
type decisionView struct {
	Action         string             `json:"action"`
	Executor       string             `json:"executor"`
	Reasons        []policy.Reason    `json:"reasons"`
	Obligations    policy.Obligations `json:"obligations"`
	PolicyRevision string             `json:"policy_revision"`
	// DecisionID names the decision in the audit record and the policy
	// decision log.
	DecisionID string `json:"decision_id,omitempty"`
	// WouldBe is the action had the reasons in dryrun or warn mode (their
	// enforcement field) been enforced; absent when that is action.
	WouldBe string `json:"would_be,omitempty"`
	// Warnings are the reasons in warn mode: rules that would have held
	// or refused this request, which the agent is told about.
	Warnings []policy.Reason `json:"warnings,omitempty"`
}

type approvalView struct {
	ID        string `json:"id"`
	Status    string `json:"status"`
	DecidedBy string `json:"decided_by,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

type runCodeResponse struct {
	Success     bool            `json:"success"`
	Stdout      string          `json:"stdout"`
	Stderr      string          `json:"stderr"`
	ExitCode    int             `json:"exit_code"`
	Truncated   bool            `json:"truncated"`
	TimedOut    bool            `json:"timed_out"`
	OutputPath  string          `json:"output_path,omitempty"`
	SandboxType string          `json:"sandbox_type"`
	DurationMS  int64           `json:"duration_ms"`
	Risk        risk.Assessment `json:"risk"`
	Decision    decisionView    `json:"decision"`
	Approval    *approvalView   `json:"approval"`
	RequestID   string          `json:"request_id"`
	// Results and KernelRestarted are a stateful run's (DESIGN.md §11);
	// a stateless response has neither.
	Results         *[]executors.Bundle `json:"results,omitempty"`
	KernelRestarted *bool               `json:"kernel_restarted,omitempty"`
}

// evaluateResponse is the dry run's answer.
type evaluateResponse struct {
	Risk      risk.Assessment `json:"risk"`
	Decision  decisionView    `json:"decision"`
	RequestID string          `json:"request_id"`
}

type executeResponse struct {
	Output      string          `json:"output"`
	ExitCode    int             `json:"exit_code"`
	Truncated   bool            `json:"truncated"`
	TimedOut    bool            `json:"timed_out"`
	OutputPath  string          `json:"output_path,omitempty"`
	SandboxType string          `json:"sandbox_type"`
	DurationMS  int64           `json:"duration_ms"`
	Risk        risk.Assessment `json:"risk"`
	Decision    decisionView    `json:"decision"`
	Approval    *approvalView   `json:"approval"`
	RequestID   string          `json:"request_id"`
}

func (s *Server) runCode(w http.ResponseWriter, r *http.Request) error {
	var body runCodeBody
	if err := decodeJSON(r, &body); err != nil {
		return err
	}
	return s.run(w, r, manager.RunRequest{
		RequestID: requestID(r.Context()), Kind: manager.KindRunCode, Principal: principal(r),
		SessionID: r.PathValue("id"), Language: body.Language, Code: body.Code,
		TimeoutS: body.TimeoutS, Context: body.Context, Stateful: body.Stateful,
	}, viewRunCode)
}

// execute is LangChain deepagents' execute contract: one combined output,
// stdout first, then stderr lines prefixed "[stderr] ".
func (s *Server) execute(w http.ResponseWriter, r *http.Request) error {
	var body executeBody
	if err := decodeJSON(r, &body); err != nil {
		return err
	}
	return s.run(w, r, manager.RunRequest{
		RequestID: requestID(r.Context()), Kind: manager.KindExecute, Principal: principal(r),
		SessionID: r.PathValue("id"), Language: "bash", Code: body.Command, TimeoutS: body.TimeoutS,
	}, viewExecute)
}

// responseView renders a finished run as an endpoint's response body.
type responseView func(res *manager.RunResult, requestID string) any

// run answers req with the JSON response, or with an NDJSON stream of
// events when the client asks for one (Accept: application/x-ndjson).
func (s *Server) run(w http.ResponseWriter, r *http.Request, req manager.RunRequest, view responseView) error {
	if wantsStream(r) {
		return s.stream(w, r, req, view)
	}
	res, err := s.deps.Manager.Run(r.Context(), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, view(res, requestID(r.Context())))
	return nil
}

func viewRunCode(res *manager.RunResult, id string) any {
	out := res.Result
	v := runCodeResponse{
		Success: out.ExitCode == 0 && !out.TimedOut, Stdout: out.Stdout, Stderr: out.Stderr,
		ExitCode: out.ExitCode, Truncated: out.Truncated, TimedOut: out.TimedOut, OutputPath: out.OutputPath,
		SandboxType: res.SandboxType, DurationMS: out.Duration.Milliseconds(), Risk: res.Risk,
		Decision: viewDecision(res.Decision), Approval: viewApproval(res.Approval), RequestID: id,
	}
	if res.Stateful {
		var cell executors.CellResult
		if out.Cell != nil {
			cell = *out.Cell
		}
		if cell.Results == nil {
			cell.Results = []executors.Bundle{}
		}
		v.Results, v.KernelRestarted = &cell.Results, &cell.KernelRestarted
	}
	return v
}

func viewExecute(res *manager.RunResult, id string) any {
	out := res.Result
	return executeResponse{
		Output: combineOutput(out.Stdout, out.Stderr), ExitCode: out.ExitCode, Truncated: out.Truncated,
		TimedOut: out.TimedOut, OutputPath: out.OutputPath, SandboxType: res.SandboxType,
		DurationMS: out.Duration.Milliseconds(), Risk: res.Risk, Decision: viewDecision(res.Decision),
		Approval: viewApproval(res.Approval), RequestID: id,
	}
}

func combineOutput(stdout, stderr string) string {
	if stderr == "" {
		return stdout
	}
	var b strings.Builder
	b.WriteString(stdout)
	if stdout != "" && !strings.HasSuffix(stdout, "\n") {
		b.WriteByte('\n')
	}
	for _, line := range strings.SplitAfter(stderr, "\n") {
		if line != "" {
			b.WriteString("[stderr] ")
			b.WriteString(line)
		}
	}
	return b.String()
}

func (s *Server) evaluate(w http.ResponseWriter, r *http.Request) error {
	var body evaluateBody
	if err := decodeJSON(r, &body); err != nil {
		return err
	}
	kind := manager.KindRunCode
	if body.Kind == manager.KindExecute {
		kind = manager.KindExecute
	}
	ev, err := s.deps.Manager.Evaluate(r.Context(), manager.RunRequest{
		RequestID: requestID(r.Context()), Kind: kind, Principal: principal(r), SessionID: body.SessionID,
		Language: body.Language, Code: body.Code, TimeoutS: body.TimeoutS, Context: body.Context, Stateful: body.Stateful,
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, evaluateResponse{Risk: ev.Risk, Decision: viewDecision(ev.Decision), RequestID: requestID(r.Context())})
	return nil
}

func viewDecision(d policy.Decision) decisionView {
	reasons := d.Reasons
	if reasons == nil {
		reasons = []policy.Reason{}
	}
	return decisionView{Action: d.Action, Executor: d.Executor, Reasons: reasons,
		Obligations: d.Obligations, PolicyRevision: d.PolicyRevision,
		DecisionID: d.DecisionID, WouldBe: d.WouldBe, Warnings: d.Warnings()}
}

func viewApproval(o *confirm.Outcome) *approvalView {
	if o == nil {
		return nil
	}
	return &approvalView{ID: o.ApprovalID, Status: o.Status, DecidedBy: o.DecidedBy, Reason: o.Reason}
}

// kernelRestartResponse is POST /v1/sessions/{id}/kernel/restart's body.
type kernelRestartResponse struct {
	// Restarted: the session had a kernel, and it was replaced.
	Restarted bool   `json:"restarted"`
	RequestID string `json:"request_id"`
}

// restartKernel is POST /v1/sessions/{id}/kernel/restart: the session's
// kernel is replaced by a fresh one (its variables are gone). A session
// without a kernel answers restarted false; its next stateful cell starts
// one anyway.
func (s *Server) restartKernel(w http.ResponseWriter, r *http.Request) error {
	restarted, err := s.deps.Manager.RestartKernel(r.Context(), principal(r), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, kernelRestartResponse{Restarted: restarted, RequestID: requestID(r.Context())})
	return nil
}
