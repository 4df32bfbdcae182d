package mcp

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandgate/sandgate/confirm"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/risk"
)

// sessionArgDoc describes every tool's session_id.
const sessionArgDoc = "sandgate session to work in; default: this MCP session's own (mcp-...). " +
	"Name another session this token may use to share its workspace."

type runCodeInput struct {
	Code      string             `json:"code" jsonschema:"the program to run; its working directory is /workspace"`
	Language  string             `json:"language,omitempty" jsonschema:"python (default), bash or javascript"`
	TimeoutS  int                `json:"timeout_s,omitempty" jsonschema:"wall-clock limit in seconds; default 30, the policy caps it"`
	Context   manager.RunContext `json:"context,omitempty" jsonschema:"routing flags: needs_browser, needs_persistent_fs (both run in the AIO sandbox); intent: why you run this, shown to a person if the request needs approval"`
	Stateful  bool               `json:"stateful,omitempty" jsonschema:"python only: run as a cell of the session's IPython kernel, keeping variables, imports and functions from earlier stateful calls; plots and rich values come back as results"`
	SessionID string             `json:"session_id,omitempty"`
}

type executeInput struct {
	Command   string `json:"command" jsonschema:"a bash command line, run in /workspace"`
	TimeoutS  int    `json:"timeout_s,omitempty" jsonschema:"wall-clock limit in seconds; default 30, the policy caps it"`
	SessionID string `json:"session_id,omitempty"`
	Reason    string `json:"reason,omitempty" jsonschema:"why you run this, shown to a person if the command needs approval"`
}

// runOutput is run_code's and execute's structuredContent: the HTTP API's
// run_code response, plus the session it ran in.
type runOutput struct {
	Success     bool          `json:"success" jsonschema:"exit code 0 and no timeout"`
	Stdout      string        `json:"stdout"`
	Stderr      string        `json:"stderr"`
	ExitCode    int           `json:"exit_code" jsonschema:"124 on timeout"`
	Truncated   bool          `json:"truncated" jsonschema:"output was cut at the cap; output_path has all of it"`
	TimedOut    bool          `json:"timed_out"`
	OutputPath  string        `json:"output_path,omitempty" jsonschema:"where the full output was saved when truncated"`
	SandboxType string        `json:"sandbox_type" jsonschema:"subprocess, docker or aio"`
	DurationMS  int64         `json:"duration_ms"`
	Risk        riskView      `json:"risk"`
	Decision    decisionView  `json:"decision"`
	Approval    *approvalView `json:"approval" jsonschema:"the human approval, when the policy required one"`
	RequestID   string        `json:"request_id"`
	SessionID   string        `json:"session_id"`
	// Results and KernelRestarted are a stateful run's, as in the HTTP
	// API; the content also carries each result (see resultContent).
	Results         []map[string]any `json:"results,omitempty" jsonschema:"stateful runs: display outputs in order, each a MIME bundle (text/plain, text/html, image/png as base64, ...)"`
	KernelRestarted bool             `json:"kernel_restarted,omitempty" jsonschema:"stateful runs: the kernel was started afresh, earlier state is gone"`
}

type riskView struct {
	Level      string        `json:"level" jsonschema:"SAFE, LOW, MEDIUM, HIGH or CRITICAL"`
	ProvenSafe bool          `json:"proven_safe"`
	Patterns   []patternView `json:"patterns"`
}

type patternView struct {
	ID      string `json:"id"`
	Message string `json:"message"`
	Line    int    `json:"line"`
	Level   string `json:"level"`
}

type decisionView struct {
	Action         string          `json:"action" jsonschema:"allow, require_approval or deny"`
	Executor       string          `json:"executor"`
	Reasons        []policy.Reason `json:"reasons"`
	PolicyRevision string          `json:"policy_revision"`
	DecisionID     string          `json:"decision_id,omitempty" jsonschema:"names the decision in the audit record and the policy decision log"`
	WouldBe        string          `json:"would_be,omitempty" jsonschema:"the action had the reasons in dryrun or warn mode been enforced"`
	Warnings       []policy.Reason `json:"warnings,omitempty" jsonschema:"reasons in warn mode: rules that would have held or refused this request"`
}

type approvalView struct {
	ID        string `json:"id"`
	Status    string `json:"status"`
	DecidedBy string `json:"decided_by,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

func (s *Server) addRunTools() {
	addTool(s, &sdk.Tool{
		Name:  "run_code",
		Title: "Run code",
		Description: "Run a Python, bash or JavaScript program in the session's sandbox and return its output. " +
			"A security policy judges the code first: it may run at once, wait for a human approver " +
			"(progress notifications say so; keep waiting), or be refused with a stable error code.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: new(true), OpenWorldHint: new(false)},
	}, func(in *jsonschema.Schema) { setEnum(in, "language", "python", "bash", "javascript") }, s.runCode)
	addTool(s, &sdk.Tool{
		Name:  "execute",
		Title: "Execute a shell command",
		Description: "Run a bash command line in the session's sandbox (working directory /workspace) and return " +
			"its combined output. Same policy, approval and audit as run_code.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: new(true), OpenWorldHint: new(false)},
	}, nil, s.execute)
}

func (s *Server) runCode(ctx context.Context, c *call, in runCodeInput) (runOutput, reply, error) {
	if in.Language == "" {
		in.Language = "python"
	}
	out, err := s.run(ctx, c, manager.RunRequest{Kind: manager.KindRunCode, Language: in.Language, Code: in.Code,
		TimeoutS: in.TimeoutS, Context: in.Context, SessionID: c.session(in.SessionID), Stateful: in.Stateful})
	if err != nil {
		return out, reply{}, err
	}
	return out, reply{text: renderRun(out), extra: resultContent(out.Results)}, nil
}

func (s *Server) execute(ctx context.Context, c *call, in executeInput) (runOutput, reply, error) {
	out, err := s.run(ctx, c, manager.RunRequest{Kind: manager.KindExecute, Language: "bash", Code: in.Command,
		TimeoutS: in.TimeoutS, SessionID: c.session(in.SessionID), Context: manager.RunContext{Intent: in.Reason}})
	if err != nil {
		return out, reply{}, err
	}
	return out, reply{text: renderExecute(out)}, nil
}

// run takes req through manager.Run, the pipeline of POST /run_code, with
// the approval hooks that keep the client informed while it is held and
// the output hook that reports the program's output while it runs. Both
// share the call's progress, so its values keep increasing.
func (s *Server) run(ctx context.Context, c *call, req manager.RunRequest) (runOutput, error) {
	req.RequestID, req.Principal, req.Via = c.requestID, c.principal, c.via()
	prog := newProgress(c)
	w := s.watchApproval(ctx, c, prog)
	req.OnApprovalPending, req.OnApprovalResolved = w.pending, w.resolved
	ow := watchOutput(ctx, prog, outputInterval)
	req.OnOutput = ow.push
	res, err := s.deps.Manager.Run(ctx, req)
	ow.stop()
	w.stop()
	if err != nil {
		return runOutput{}, err
	}
	r := res.Result
	return runOutput{
		Success: r.ExitCode == 0 && !r.TimedOut, Stdout: r.Stdout, Stderr: r.Stderr, ExitCode: r.ExitCode,
		Truncated: r.Truncated, TimedOut: r.TimedOut, OutputPath: r.OutputPath, SandboxType: res.SandboxType,
		DurationMS: r.Duration.Milliseconds(), Risk: viewRisk(res.Risk), Decision: viewDecision(res.Decision),
		Approval: viewApproval(res.Approval), RequestID: c.requestID, SessionID: req.SessionID,
		Results: viewResults(r.Cell), KernelRestarted: r.Cell != nil && r.Cell.KernelRestarted,
	}, nil
}

// via is how the approval page names the channel: MCP, and the client's
// own name and version as it announced them (cut, and shown as text). A
// forwarded call's is what the replica holding its MCP session saw.
func (c *call) via() string {
	if c.fwd != nil {
		return c.fwd.via
	}
	return via(c.req)
}

func via(req *sdk.CallToolRequest) string {
	v := "MCP"
	if req == nil || req.Session == nil {
		return v
	}
	if ip := req.Session.InitializeParams(); ip != nil && ip.ClientInfo != nil {
		name := strings.TrimSpace(ip.ClientInfo.Name + " " + ip.ClientInfo.Version)
		if name != "" {
			v += " (" + manager.Printable(name, 64) + ")"
		}
	}
	return v
}

func viewRisk(a risk.Assessment) riskView {
	v := riskView{Level: a.Level.String(), ProvenSafe: a.ProvenSafe, Patterns: make([]patternView, len(a.Patterns))}
	for i, p := range a.Patterns {
		v.Patterns[i] = patternView{ID: p.ID, Message: p.Message, Line: p.Line, Level: p.Level.String()}
	}
	return v
}

func viewDecision(d policy.Decision) decisionView {
	reasons := d.Reasons
	if reasons == nil {
		reasons = []policy.Reason{}
	}
	return decisionView{Action: d.Action, Executor: d.Executor, Reasons: reasons, PolicyRevision: d.PolicyRevision,
		DecisionID: d.DecisionID, WouldBe: d.WouldBe, Warnings: d.Warnings()}
}

func viewApproval(o *confirm.Outcome) *approvalView {
	if o == nil {
		return nil
	}
	return &approvalView{ID: o.ApprovalID, Status: o.Status, DecidedBy: o.DecidedBy, Reason: o.Reason}
}

// renderRun is run_code's text: a status line, then the output streams.
func renderRun(o runOutput) string {
	var b strings.Builder
	b.WriteString(statusLine(o))
	if o.Stdout != "" {
		b.WriteString("\n--- stdout\n")
		b.WriteString(o.Stdout)
	}
	if o.Stderr != "" {
		b.WriteString("\n--- stderr\n")
		b.WriteString(o.Stderr)
	}
	return b.String()
}

// renderExecute is execute's text, deepagents' contract: stdout, then
// stderr lines prefixed "[stderr] ", then the status line.
func renderExecute(o runOutput) string {
	var b strings.Builder
	b.WriteString(o.Stdout)
	if o.Stdout != "" && !strings.HasSuffix(o.Stdout, "\n") && o.Stderr != "" {
		b.WriteByte('\n')
	}
	for _, line := range strings.SplitAfter(o.Stderr, "\n") {
		if line != "" {
			b.WriteString("[stderr] " + line)
		}
	}
	if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
		b.WriteByte('\n')
	}
	b.WriteString(statusLine(o))
	return b.String()
}

func statusLine(o runOutput) string {
	s := fmt.Sprintf("exit code %d", o.ExitCode)
	if o.TimedOut {
		s += " (timed out)"
	}
	s += fmt.Sprintf(" · %s · %d ms · risk %s", o.SandboxType, o.DurationMS, o.Risk.Level)
	if a := o.Approval; a != nil {
		s += fmt.Sprintf(" · %s by %s (%s)", a.Status, a.DecidedBy, a.ID)
	}
	if o.KernelRestarted {
		s += " · kernel restarted (earlier state is gone)"
	}
	for _, w := range o.Decision.Warnings {
		s += fmt.Sprintf(" · policy warning %s: %s (would be %s)", w.Code, w.Message, o.Decision.WouldBe)
	}
	if o.Truncated {
		s += " · output truncated"
		if o.OutputPath != "" {
			s += ", full output in " + o.OutputPath
		}
	}
	return s
}
