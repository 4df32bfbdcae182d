package manager_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/confirm"
	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/policy"
)

// TestRunPipeline walks requests through the seven steps and checks which
// steps were reached, the error (sentinel and errcode), and the one audit
// record each request leaves.
func TestRunPipeline(t *testing.T) {
	dockerDown := func(h *harness) {
		h.docker.AvailableFunc = func(context.Context) error {
			return &executors.UnavailableError{Kind: executors.KindDocker, Reason: "engine down"}
		}
	}
	subDown := func(h *harness) {
		h.sub.AvailableFunc = func(context.Context) error {
			return &executors.UnavailableError{Kind: executors.KindSubprocess, Reason: "python missing"}
		}
	}
	allowAIO := &policy.Decision{Action: policy.ActionAllow, Executor: "aio", PolicyRevision: "fake-rev",
		Obligations: policy.Obligations{TimeoutS: 10}}
	approveAIO := &policy.Decision{Action: policy.ActionRequireApproval, Executor: "aio", PolicyRevision: "fake-rev",
		Reasons: []policy.Reason{{Code: "risk.high", Message: "needs approval"}}, Obligations: policy.Obligations{TimeoutS: 10}}

	cases := []struct {
		name        string
		mode        string
		decision    *policy.Decision // nil: the real embedded policy
		lang, code  string
		edit        func(*manager.RunRequest)
		prep        func(*harness)
		approval    *confirm.Outcome // nil: approved
		approvalErr error
		noConfirm   bool

		wantErr     error // nil: success
		wantCode    errcode.Code
		wantStatus  int
		wantReason  string // a reason code the DeniedError carries
		wantOutcome string
		wantRisk    string // "" when validation stopped the request
		wantAction  string
		wantDecide  int
		wantConfirm int
		wantSub     int
		wantDocker  int
		wantExit    *int
	}{
		{
			name: "invalid language stops at validate", lang: "ruby", code: safePython,
			wantErr: manager.ErrInvalidRequest, wantCode: errcode.InvalidRequest, wantStatus: http.StatusBadRequest,
			wantOutcome: manager.OutcomeInvalid,
		},
		{
			name: "invalid session id stops at validate", lang: "python", code: safePython,
			edit:    func(r *manager.RunRequest) { r.SessionID = "../etc" },
			wantErr: manager.ErrInvalidRequest, wantCode: errcode.InvalidRequest, wantStatus: http.StatusBadRequest,
			wantOutcome: manager.OutcomeInvalid,
		},
		{
			name: "oversize code stops at validate", lang: "python", code: strings.Repeat("x", 300<<10) + canary,
			wantErr: manager.ErrTooLarge, wantCode: errcode.PayloadTooLarge, wantStatus: http.StatusRequestEntityTooLarge,
			wantOutcome: manager.OutcomeInvalid,
		},
		{
			name: "proven-safe code runs on subprocess", lang: "python", code: safePython,
			wantOutcome: manager.OutcomeOK, wantRisk: "SAFE", wantAction: policy.ActionAllow,
			wantDecide: 1, wantSub: 1, wantExit: ptr(0),
		},
		{
			name: "low-risk code runs on docker in STRICT", lang: "bash", code: lowBash,
			wantOutcome: manager.OutcomeOK, wantRisk: "LOW", wantAction: policy.ActionAllow,
			wantDecide: 1, wantDocker: 1, wantExit: ptr(0),
		},
		{
			name: "critical is denied without asking or running", lang: "bash", code: criticalBash,
			wantErr: manager.ErrPolicyDenied, wantCode: errcode.PolicyDenied, wantStatus: http.StatusForbidden,
			wantReason: "risk.critical", wantOutcome: manager.OutcomeDenied, wantRisk: "CRITICAL",
			wantAction: policy.ActionDeny, wantDecide: 1,
		},
		{
			name: "critical with its executor down is still a policy deny", lang: "bash", code: criticalBash, prep: dockerDown,
			wantErr: manager.ErrPolicyDenied, wantCode: errcode.PolicyDenied, wantStatus: http.StatusForbidden,
			wantReason: "risk.critical", wantOutcome: manager.OutcomeDenied, wantRisk: "CRITICAL",
			wantAction: policy.ActionDeny, wantDecide: 1,
		},
		{
			name: "deny made only of executor_unavailable is 503", lang: "python", code: safePython, prep: subDown,
			wantErr: manager.ErrExecutorUnavailable, wantCode: errcode.ExecutorUnavailable, wantStatus: http.StatusServiceUnavailable,
			wantReason: policy.ReasonExecutorUnavailable, wantOutcome: manager.OutcomeUnavailable, wantRisk: "SAFE",
			wantAction: policy.ActionDeny, wantDecide: 1,
		},
		{
			name: "needs_browser routes to unwired aio, never downgraded", lang: "python", code: safePython,
			edit:    func(r *manager.RunRequest) { r.Context.NeedsBrowser = true },
			wantErr: manager.ErrExecutorUnavailable, wantCode: errcode.ExecutorUnavailable, wantStatus: http.StatusServiceUnavailable,
			wantReason: policy.ReasonExecutorUnavailable, wantOutcome: manager.OutcomeUnavailable, wantRisk: "SAFE",
			wantAction: policy.ActionDeny, wantDecide: 1,
		},
		{
			name: "unknown mode fails closed", mode: "LAX", lang: "python", code: safePython,
			wantErr: manager.ErrPolicyDenied, wantCode: errcode.PolicyDenied, wantStatus: http.StatusForbidden,
			wantReason: "mode.unknown", wantOutcome: manager.OutcomeDenied, wantRisk: "SAFE",
			wantAction: policy.ActionDeny, wantDecide: 1,
		},
		{
			name: "high-risk code approved runs on docker", lang: "python", code: highPython,
			wantOutcome: manager.OutcomeOK, wantRisk: "HIGH", wantAction: policy.ActionRequireApproval,
			wantDecide: 1, wantConfirm: 1, wantDocker: 1, wantExit: ptr(0),
		},
		{
			name: "PERMISSIVE asks for critical code and runs it when approved", mode: "PERMISSIVE", lang: "bash", code: criticalBash,
			wantOutcome: manager.OutcomeOK, wantRisk: "CRITICAL", wantAction: policy.ActionRequireApproval,
			wantDecide: 1, wantConfirm: 1, wantDocker: 1, wantExit: ptr(0),
		},
		{
			name: "approver denies", lang: "python", code: highPython,
			approval: &confirm.Outcome{ApprovalID: "ap-1", Status: confirm.StatusDenied, DecidedBy: "bob", Reason: "no sockets"},
			wantErr:  manager.ErrApprovalDenied, wantCode: errcode.ApprovalDenied, wantStatus: http.StatusForbidden,
			wantReason: "approval_denied", wantOutcome: manager.OutcomeDenied, wantRisk: "HIGH",
			wantAction: policy.ActionRequireApproval, wantDecide: 1, wantConfirm: 1,
		},
		{
			name: "approval times out", lang: "python", code: highPython,
			approval: &confirm.Outcome{ApprovalID: "ap-1", Status: confirm.StatusTimeout},
			wantErr:  manager.ErrApprovalTimeout, wantCode: errcode.ApprovalTimeout, wantStatus: http.StatusForbidden,
			wantReason: "approval_timeout", wantOutcome: manager.OutcomeDenied, wantRisk: "HIGH",
			wantAction: policy.ActionRequireApproval, wantDecide: 1, wantConfirm: 1,
		},
		{
			name: "approval withdrawn is a deny", lang: "python", code: highPython,
			approval: &confirm.Outcome{ApprovalID: "ap-1", Status: confirm.StatusWithdrawn},
			wantErr:  manager.ErrApprovalDenied, wantCode: errcode.ApprovalDenied, wantStatus: http.StatusForbidden,
			wantReason: "approval_withdrawn", wantOutcome: manager.OutcomeDenied, wantRisk: "HIGH",
			wantAction: policy.ActionRequireApproval, wantDecide: 1, wantConfirm: 1,
		},
		{
			name: "unknown approval status is a deny", lang: "python", code: highPython,
			approval: &confirm.Outcome{ApprovalID: "ap-1", Status: "maybe"},
			wantErr:  manager.ErrApprovalDenied, wantCode: errcode.ApprovalDenied, wantStatus: http.StatusForbidden,
			wantOutcome: manager.OutcomeDenied, wantRisk: "HIGH",
			wantAction: policy.ActionRequireApproval, wantDecide: 1, wantConfirm: 1,
		},
		{
			name: "approval service error fails closed", lang: "python", code: highPython,
			approvalErr: errors.New("hub unreachable"),
			wantErr:     manager.ErrApprovalUnavailable, wantCode: errcode.ApprovalUnavailable, wantStatus: http.StatusForbidden,
			wantReason: "approval_unavailable", wantOutcome: manager.OutcomeDenied, wantRisk: "HIGH",
			wantAction: policy.ActionRequireApproval, wantDecide: 1, wantConfirm: 1,
		},
		{
			name: "no approval service fails closed", lang: "python", code: highPython, noConfirm: true,
			wantErr: manager.ErrApprovalUnavailable, wantCode: errcode.ApprovalUnavailable, wantStatus: http.StatusForbidden,
			wantReason: "approval_unavailable", wantOutcome: manager.OutcomeDenied, wantRisk: "HIGH",
			wantAction: policy.ActionRequireApproval, wantDecide: 1,
		},
		{
			name: "unknown policy action fails closed", lang: "python", code: safePython,
			decision: &policy.Decision{Action: "maybe", Executor: "subprocess", Obligations: policy.Obligations{TimeoutS: 5}},
			wantErr:  manager.ErrPolicyDenied, wantCode: errcode.PolicyDenied, wantStatus: http.StatusForbidden,
			wantOutcome: manager.OutcomeDenied, wantRisk: "SAFE", wantAction: "maybe", wantDecide: 1,
		},
		{
			name: "allow naming an unwired executor is 503, no other executor runs", lang: "python", code: safePython,
			decision: allowAIO,
			wantErr:  manager.ErrExecutorUnavailable, wantCode: errcode.ExecutorUnavailable, wantStatus: http.StatusServiceUnavailable,
			wantReason: policy.ReasonExecutorUnavailable, wantOutcome: manager.OutcomeUnavailable, wantRisk: "SAFE",
			wantAction: policy.ActionAllow, wantDecide: 1,
		},
		{
			name: "approved request naming an unwired executor is 503", lang: "python", code: highPython,
			decision: approveAIO,
			wantErr:  manager.ErrExecutorUnavailable, wantCode: errcode.ExecutorUnavailable, wantStatus: http.StatusServiceUnavailable,
			wantReason: policy.ReasonExecutorUnavailable, wantOutcome: manager.OutcomeUnavailable, wantRisk: "HIGH",
			wantAction: policy.ActionRequireApproval, wantDecide: 1, wantConfirm: 1,
		},
		{
			name: "executor reports unavailable mid-request", lang: "bash", code: lowBash,
			prep: func(h *harness) {
				h.docker.ExecuteFunc = func(context.Context, executors.Spec) (executors.Result, error) {
					return executors.Result{}, &executors.UnavailableError{Kind: executors.KindDocker, Reason: "engine went away"}
				}
			},
			wantErr: manager.ErrExecutorUnavailable, wantCode: errcode.ExecutorUnavailable, wantStatus: http.StatusServiceUnavailable,
			wantReason: policy.ReasonExecutorUnavailable, wantOutcome: manager.OutcomeUnavailable, wantRisk: "LOW",
			wantAction: policy.ActionAllow, wantDecide: 1, wantDocker: 1,
		},
		{
			name: "executor failure is internal", lang: "bash", code: lowBash,
			prep: func(h *harness) {
				h.docker.ExecuteFunc = func(context.Context, executors.Spec) (executors.Result, error) {
					return executors.Result{}, errors.New("disk on fire")
				}
			},
			// No sentinel for an internal error: only its code and status are checked.
			wantErr: errors.New("any error"), wantCode: errcode.Internal, wantStatus: http.StatusInternalServerError,
			wantOutcome: manager.OutcomeError, wantRisk: "LOW", wantAction: policy.ActionAllow, wantDecide: 1, wantDocker: 1,
		},
		{
			name: "program exiting non-zero is a failed run, not an error", lang: "bash", code: lowBash,
			prep: func(h *harness) {
				h.docker.ExecuteFunc = func(context.Context, executors.Spec) (executors.Result, error) {
					return executors.Result{ExitCode: 3, Stderr: "boom"}, nil
				}
			},
			wantOutcome: manager.OutcomeFailed, wantRisk: "LOW", wantAction: policy.ActionAllow,
			wantDecide: 1, wantDocker: 1, wantExit: ptr(3),
		},
		{
			name: "program hitting its timeout", lang: "bash", code: lowBash,
			prep: func(h *harness) {
				h.docker.ExecuteFunc = func(context.Context, executors.Spec) (executors.Result, error) {
					return executors.Result{ExitCode: executors.ExitCodeTimeout, TimedOut: true}, nil
				}
			},
			wantOutcome: manager.OutcomeTimedOut, wantRisk: "LOW", wantAction: policy.ActionAllow,
			wantDecide: 1, wantDocker: 1, wantExit: ptr(executors.ExitCodeTimeout),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, hopts{cfg: manager.Config{Mode: tc.mode}, decision: tc.decision, noConfirm: tc.noConfirm})
			if tc.approval != nil {
				h.confirm.outcome = *tc.approval
			}
			h.confirm.err = tc.approvalErr
			if tc.prep != nil {
				tc.prep(h)
			}
			req := request(tc.lang, tc.code)
			if tc.edit != nil {
				tc.edit(&req)
			}

			res, err := h.m.Run(t.Context(), req)

			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("Run: %v, want success", err)
			case tc.wantErr != nil && err == nil:
				t.Fatalf("Run succeeded, want %v", tc.wantErr)
			case tc.wantErr != nil && tc.wantCode != errcode.Internal && !errors.Is(err, tc.wantErr):
				t.Errorf("Run: %v, want errors.Is %v", err, tc.wantErr)
			}
			code, status, _ := errcode.Of(err)
			if tc.wantErr != nil && (code != tc.wantCode || status != tc.wantStatus) {
				t.Errorf("errcode.Of = %s/%d, want %s/%d", code, status, tc.wantCode, tc.wantStatus)
			}
			if tc.wantReason != "" {
				var de *manager.DeniedError
				if !errors.As(err, &de) {
					t.Fatalf("Run: %T %v, want a *DeniedError", err, err)
				}
				if !hasReason(de.Reasons, tc.wantReason) {
					t.Errorf("DeniedError reasons %+v, want %s", de.Reasons, tc.wantReason)
				}
			}
			if err == nil && res.SandboxType == "" {
				t.Errorf("SandboxType empty on a run")
			}

			if n := len(h.decider.Inputs()); n != tc.wantDecide {
				t.Errorf("policy asked %d times, want %d", n, tc.wantDecide)
			}
			if n := len(h.confirm.Requests()); n != tc.wantConfirm {
				t.Errorf("approval service asked %d times, want %d", n, tc.wantConfirm)
			}
			if n := len(h.sub.Calls()); n != tc.wantSub {
				t.Errorf("subprocess executed %d times, want %d", n, tc.wantSub)
			}
			if n := len(h.docker.Calls()); n != tc.wantDocker {
				t.Errorf("docker executed %d times, want %d", n, tc.wantDocker)
			}

			rec := h.oneRecord(t)
			assertNoCode(t, rec, req.Code)
			if rec.RequestID != req.RequestID || rec.Kind != manager.KindRunCode || rec.SessionID != req.SessionID ||
				rec.Principal != "agent:ci-bot" || rec.Language != req.Language {
				t.Errorf("record identity: %+v", rec)
			}
			if rec.CodeSHA256 != policy.SHA256Hex([]byte(req.Code)) || rec.CodeBytes != len(req.Code) {
				t.Errorf("record digest %q size %d, want the code's", rec.CodeSHA256, rec.CodeBytes)
			}
			if rec.Outcome != tc.wantOutcome {
				t.Errorf("record outcome %q, want %q", rec.Outcome, tc.wantOutcome)
			}
			if rec.ErrorCode != string(tc.wantCode) || (tc.wantErr != nil && rec.HTTPStatus != tc.wantStatus) {
				t.Errorf("record error %q/%d, want %q/%d", rec.ErrorCode, rec.HTTPStatus, tc.wantCode, tc.wantStatus)
			}
			if rec.RiskLevel != tc.wantRisk || rec.Action != tc.wantAction {
				t.Errorf("record risk %q action %q, want %q and %q", rec.RiskLevel, rec.Action, tc.wantRisk, tc.wantAction)
			}
			if tc.wantDecide > 0 && rec.PolicyRevision == "" && tc.decision == nil {
				t.Errorf("record has no policy revision")
			}
			switch {
			case tc.wantExit == nil && rec.ExitCode != nil:
				t.Errorf("record exit code %d, want none (nothing ran to completion)", *rec.ExitCode)
			case tc.wantExit != nil && (rec.ExitCode == nil || *rec.ExitCode != *tc.wantExit):
				t.Errorf("record exit code %v, want %d", rec.ExitCode, *tc.wantExit)
			}
			if tc.wantConfirm > 0 && tc.approvalErr == nil && (rec.Approval == nil || rec.Approval.ID != "ap-1") {
				t.Errorf("record approval %+v, want the outcome's", rec.Approval)
			}
			if tc.wantConfirm == 0 && rec.Approval != nil {
				t.Errorf("record approval %+v, but nobody was asked", rec.Approval)
			}
		})
	}
}

func hasReason(rs []policy.Reason, code string) bool {
	for _, r := range rs {
		if r.Code == code {
			return true
		}
	}
	return false
}

// TestRunSpec checks the Spec an executor receives: limits come from the
// decision's obligations, identity and directory from the session's
// workspace.
// TestNetworkWithoutEgressIsDenied: a decision that grants network on a
// gateway without the egress proxy is refused, not run without it.
func TestNetworkWithoutEgressIsDenied(t *testing.T) {
	d := &policy.Decision{Action: policy.ActionAllow, Executor: "subprocess",
		Obligations: policy.Obligations{TimeoutS: 5, Network: true}}
	h := newHarness(t, hopts{decision: d, noEgress: true})
	h.sub.Caps = &executors.Capabilities{NetworkGrant: true, KillDetached: true}
	_, err := h.m.Run(t.Context(), request("python", safePython))
	if r := deniedReasons(t, err); len(r) == 0 || r[len(r)-1].Code != "egress_unavailable" {
		t.Fatalf("reasons %+v, want egress_unavailable", r)
	}
	if len(h.sub.Calls()) != 0 {
		t.Fatal("the run executed without the egress proxy")
	}
}

func TestRunSpec(t *testing.T) {
	cases := []struct {
		name        string
		decision    *policy.Decision
		timeoutS    int
		wantTimeout int // seconds
		wantMemory  int
		wantNetwork bool
		wantProcs   int
		caps        *executors.Capabilities
	}{
		{name: "default timeout", wantTimeout: 30, wantMemory: 512, wantProcs: 128},
		{name: "requested timeout", timeoutS: 7, wantTimeout: 7, wantMemory: 512, wantProcs: 128},
		{name: "policy caps the timeout", timeoutS: 3600, wantTimeout: 300, wantMemory: 512, wantProcs: 128},
		{
			name: "obligations win over the request", timeoutS: 60,
			decision: &policy.Decision{Action: policy.ActionAllow, Executor: "subprocess",
				Obligations: policy.Obligations{TimeoutS: 5, MemoryMB: 64, MaxProcs: 9, Network: true}},
			caps:        &executors.Capabilities{NetworkGrant: true, KillDetached: true, MemoryLimit: true, ProcessLimit: true},
			wantTimeout: 5, wantMemory: 64, wantNetwork: true, wantProcs: 9,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, hopts{decision: tc.decision})
			h.sub.Caps = tc.caps
			req := request("python", safePython)
			req.TimeoutS = tc.timeoutS
			if _, err := h.m.Run(t.Context(), req); err != nil {
				t.Fatalf("Run: %v", err)
			}
			calls := h.sub.Calls()
			if len(calls) != 1 {
				t.Fatalf("%d executions, want 1", len(calls))
			}
			spec := calls[0]
			if spec.Timeout.Seconds() != float64(tc.wantTimeout) || spec.Limits.MemoryMB != tc.wantMemory ||
				spec.Network != tc.wantNetwork || spec.Limits.MaxProcs != tc.wantProcs {
				t.Errorf("spec timeout %v memory %d procs %d network %v, want %ds %d %d %v", spec.Timeout,
					spec.Limits.MemoryMB, spec.Limits.MaxProcs, spec.Network, tc.wantTimeout, tc.wantMemory, tc.wantProcs, tc.wantNetwork)
			}
			if got, ok := spec.Egress.(fakeHandle); (spec.Egress != nil) != tc.wantNetwork ||
				(ok && (got.b.SessionKey != key(req.SessionID) || got.b.SessionID != req.SessionID || got.b.RequestID != req.RequestID ||
					got.b.Principal != "ci-bot" || got.b.Tenant != "t1" || got.b.Risk == "")) {
				t.Errorf("spec egress %+v with network %v: want a handle bound to the run exactly when network is granted", spec.Egress, spec.Network)
			}
			// The executor gets the tenant-qualified key: its per-session
			// state is per tenant too.
			if spec.RequestID != req.RequestID || spec.SessionID != key(req.SessionID) || spec.Language != req.Language || spec.Code != req.Code {
				t.Errorf("spec identity %+v does not match the request", spec)
			}
			dir, err := h.ws.Ensure(t.Context(), key(req.SessionID))
			if err != nil {
				t.Fatal(err)
			}
			if spec.WorkspaceDir != dir.Path || spec.UID != dir.UID || spec.GID != dir.GID {
				t.Errorf("spec dir %q uid %d gid %d, want the session's %+v", spec.WorkspaceDir, spec.UID, spec.GID, dir)
			}
		})
	}
}

// TestRunSessionIdentity: as root, every session runs as its own non-root
// uid, and the workspace is owned by it.
func TestRunSessionIdentity(t *testing.T) {
	h := newHarness(t, hopts{})
	uids := map[int]string{}
	for _, sid := range []string{"alpha", "beta", "gamma"} {
		req := request("python", safePython)
		req.SessionID = sid
		if _, err := h.m.Run(t.Context(), req); err != nil {
			t.Fatalf("Run %s: %v", sid, err)
		}
	}
	calls := h.sub.Calls()
	for _, spec := range calls {
		if spec.WorkspaceDir != h.ws.Root()+"/"+spec.SessionID {
			t.Errorf("session %s ran in %q", spec.SessionID, spec.WorkspaceDir)
		}
		if isRoot() {
			if spec.UID == 0 || spec.GID == 0 {
				t.Errorf("session %s runs as %d:%d, want a per-session identity", spec.SessionID, spec.UID, spec.GID)
			}
			if other, dup := uids[spec.UID]; dup {
				t.Errorf("sessions %s and %s share uid %d", other, spec.SessionID, spec.UID)
			}
			uids[spec.UID] = spec.SessionID
		}
	}
	if len(calls) != 3 {
		t.Errorf("%d executions, want 3", len(calls))
	}
}

// TestRunPolicyInput: the policy sees metadata about the request, never the
// code.
func TestRunPolicyInput(t *testing.T) {
	h := newHarness(t, hopts{cfg: manager.Config{Mode: "PERMISSIVE"}})
	req := request("python", highPython)
	req.Kind = manager.KindExecute
	req.Context = manager.RunContext{NeedsPersistentFS: true}
	if _, err := h.m.Evaluate(t.Context(), req); err != nil {
		t.Fatalf("Evaluate: %v", err)
	}
	ins := h.decider.Inputs()
	if len(ins) != 1 {
		t.Fatalf("%d policy inputs, want 1", len(ins))
	}
	in := ins[0]
	want := policy.Request{
		Kind: manager.KindExecute, SessionID: "s1", Language: "python", CodeBytes: len(highPython),
		CodeSHA256: policy.SHA256Hex([]byte(highPython)), TimeoutS: 30,
		Context: policy.Context{NeedsPersistentFS: true},
	}
	if in.Request != want {
		t.Errorf("policy request %+v, want %+v", in.Request, want)
	}
	if in.Mode != "PERMISSIVE" || in.Principal != (policy.Principal{Role: "agent", Name: "ci-bot", Tenant: "t1"}) {
		t.Errorf("policy mode %q principal %+v", in.Mode, in.Principal)
	}
	if in.Risk.Level != "HIGH" || in.Risk.ProvenSafe || len(in.Risk.Patterns) == 0 || in.Risk.Patterns[0].ID != "python.net.socket" {
		t.Errorf("policy risk %+v", in.Risk)
	}
	if got := availableKinds(in.Executors); got != "docker,subprocess" {
		t.Errorf("policy executors %v, want docker and subprocess available", in.Executors)
	}
	if c := in.Executors["docker"].Capabilities; c["network_isolation"] != true || c["process_limit"] != true || c["root_fs"] != "host" {
		t.Errorf("policy sees docker capabilities %v, want the executor's", c)
	}
	if m := in.Map(); strings.Contains(toJSON(t, m), canary) {
		t.Errorf("policy input carries the code: %v", m)
	}
}

// TestRunConfirmRequest: the approver sees the code and what the policy
// said, and the approval is bound to the code by its digest.
func TestRunConfirmRequest(t *testing.T) {
	h := newHarness(t, hopts{cfg: manager.Config{ApprovalTimeout: 90 * time.Second}})
	req := request("python", highPython)
	req.Context.NeedsPersistentFS = false
	if _, err := h.m.Run(t.Context(), req); err != nil {
		t.Fatalf("Run: %v", err)
	}
	other := req
	other.RequestID, other.Code = "req-2", "import socket  # other code\n"
	if _, err := h.m.Run(t.Context(), other); err != nil {
		t.Fatalf("Run: %v", err)
	}
	again := req
	again.RequestID = "req-3"
	if _, err := h.m.Run(t.Context(), again); err != nil {
		t.Fatalf("Run: %v", err)
	}
	reqs := h.confirm.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d approval requests, want 3", len(reqs))
	}
	c := reqs[0]
	if c.RequestID != "req-1" || c.SessionID != "s1" || c.Language != "python" || c.Code != highPython || c.Principal != "ci-bot" {
		t.Errorf("approval request identity: %+v", c)
	}
	if c.CodeSHA256 != policy.SHA256Hex([]byte(highPython)) {
		t.Errorf("approval CodeSHA256 %q, want the code's sha256", c.CodeSHA256)
	}
	if c.RiskLevel != "HIGH" || len(c.Patterns) == 0 || c.Patterns[0].ID != "python.net.socket" || c.Patterns[0].Line != 1 {
		t.Errorf("approval risk %q patterns %+v", c.RiskLevel, c.Patterns)
	}
	// The harness wires no gvisor executor: the default policy's fallback
	// to docker is the first reason, the approval's the second.
	if c.Executor != "docker" || c.PolicyRevision != realPolicy(t).Revision() || len(c.Reasons) != 2 ||
		c.Reasons[0].Code != "executor.fallback" || c.Reasons[1].Code != "risk.high" {
		t.Errorf("approval decision: executor %q revision %q reasons %+v", c.Executor, c.PolicyRevision, c.Reasons)
	}
	if c.Context["needs_browser"] || c.Context["needs_persistent_fs"] || len(c.Context) != 2 {
		t.Errorf("approval context %v", c.Context)
	}
	if d := time.Until(c.Deadline); d < 60*time.Second || d > 90*time.Second {
		t.Errorf("approval deadline in %v, want about the 90s ApprovalTimeout", d)
	}
	if c.Digest() == reqs[1].Digest() {
		t.Errorf("different code, same digest %s", c.Digest())
	}
	if c.Digest() != reqs[2].Digest() {
		t.Errorf("same code and session, digests %s and %s differ", c.Digest(), reqs[2].Digest())
	}
	rec := h.audit.Records()[0]
	if rec.Approval == nil || *rec.Approval != (audit.Approval{ID: "ap-1", Status: confirm.StatusApproved, DecidedBy: "alice"}) {
		t.Errorf("record approval %+v", rec.Approval)
	}
}

// TestRunExecutorUnavailableInvalidatesCache: after an executor fails a run
// as unavailable, the next request's policy input no longer lists it,
// although the availability cache has not expired.
func TestRunExecutorUnavailableInvalidatesCache(t *testing.T) {
	h := newHarness(t, hopts{cfg: manager.Config{AvailabilityTTL: time.Hour}})
	var down bool // only touched on the Run goroutine
	h.sub.AvailableFunc = func(context.Context) error {
		if down {
			return &executors.UnavailableError{Kind: executors.KindSubprocess, Reason: "python missing"}
		}
		return nil
	}
	h.sub.ExecuteFunc = func(context.Context, executors.Spec) (executors.Result, error) {
		down = true
		return executors.Result{}, &executors.UnavailableError{Kind: executors.KindSubprocess, Reason: "python missing"}
	}
	for i, want := range []string{"docker,subprocess", "docker"} {
		req := request("python", safePython)
		_, err := h.m.Run(t.Context(), req)
		if !errors.Is(err, manager.ErrExecutorUnavailable) {
			t.Fatalf("request %d: %v, want ErrExecutorUnavailable", i, err)
		}
		ins := h.decider.Inputs()
		if got := availableKinds(ins[len(ins)-1].Executors); got != want {
			t.Errorf("request %d: policy saw executors %q, want %q", i, got, want)
		}
	}
	if n := len(h.sub.Calls()); n != 1 {
		t.Errorf("subprocess executed %d times, want 1: the second request is denied before execute", n)
	}
	if n := len(h.docker.Calls()); n != 0 {
		t.Errorf("docker executed %d times: a subprocess request was downgraded", n)
	}
	st := h.m.ExecutorStatus(t.Context())
	if st["subprocess"].Available || st["subprocess"].Reason != "python missing" || !st["docker"].Available || len(st) != 2 {
		t.Errorf("ExecutorStatus = %+v", st)
	}
}

// TestRunAvailabilityCachedWithinTTL: executors are probed once per TTL,
// not once per request.
func TestRunAvailabilityCachedWithinTTL(t *testing.T) {
	h := newHarness(t, hopts{cfg: manager.Config{AvailabilityTTL: time.Hour}})
	probes := 0
	h.sub.AvailableFunc = func(context.Context) error { probes++; return nil }
	for range 3 {
		if _, err := h.m.Run(t.Context(), request("python", safePython)); err != nil {
			t.Fatal(err)
		}
	}
	if probes != 1 {
		t.Errorf("subprocess probed %d times for 3 requests, want 1", probes)
	}
}

// TestRunAvailabilityNotPoisonedByCancelledRequest: a probe that failed
// only because one client's request context was already cancelled must not
// make the executor unavailable for the next client.
func TestRunAvailabilityNotPoisonedByCancelledRequest(t *testing.T) {
	h := newHarness(t, hopts{cfg: manager.Config{AvailabilityTTL: time.Hour}})
	probe := func(ctx context.Context) error { // a probe that honours its context, as a Docker ping does
		if err := ctx.Err(); err != nil {
			return &executors.UnavailableError{Kind: executors.KindSubprocess, Reason: "probe", Err: err}
		}
		return nil
	}
	h.sub.AvailableFunc, h.docker.AvailableFunc = probe, probe
	gone, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := h.m.Run(gone, request("python", safePython)); err == nil {
		t.Fatalf("Run on a cancelled context succeeded")
	}
	if _, err := h.m.Run(t.Context(), request("python", safePython)); err != nil {
		t.Errorf("next client: %v, want the healthy executor to run", err)
	}
}

// TestRunAuditSurvivesCancellation: the record is written even when the
// client's context is cancelled while the code runs.
func TestRunAuditSurvivesCancellation(t *testing.T) {
	mem := audit.NewMemory()
	h := newHarness(t, hopts{store: ctxStore{mem}})
	gone, cancel := context.WithCancel(t.Context())
	defer cancel()
	if err := (ctxStore{audit.NewMemory()}).Append(gone, &audit.Record{Kind: "k", Outcome: "ok"}); err != nil {
		t.Fatalf("ctxStore must accept a live context: %v", err)
	}
	h.sub.ExecuteFunc = func(ctx context.Context, _ executors.Spec) (executors.Result, error) {
		cancel()
		return executors.Result{ExitCode: 137}, ctx.Err()
	}
	_, err := h.m.Run(gone, request("python", safePython))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Run: %v, want context.Canceled from the executor", err)
	}
	if err := (ctxStore{audit.NewMemory()}).Append(gone, &audit.Record{Kind: "k", Outcome: "ok"}); err == nil {
		t.Fatal("ctxStore accepted a cancelled context: this test proves nothing")
	}
	recs := mem.Records()
	if len(recs) != 1 {
		t.Fatalf("%d audit records after the client went away, want 1", len(recs))
	}
	if recs[0].RequestID != "req-1" || recs[0].Outcome == "" {
		t.Errorf("record %+v", recs[0])
	}
}

// TestRunWorkspaceFailure: a session whose workspace cannot be created is
// an internal error, audited, and nothing runs.
func TestRunWorkspaceFailure(t *testing.T) {
	h := newHarness(t, hopts{})
	if err := writeFile(h.ws.Root()+"/"+key("s1"), "not a directory"); err != nil {
		t.Fatal(err)
	}
	_, err := h.m.Run(t.Context(), request("python", safePython))
	if code, status, _ := errcode.Of(err); code != errcode.Internal || status != http.StatusInternalServerError {
		t.Errorf("Run: %v (%s/%d), want internal/500", err, code, status)
	}
	if n := len(h.sub.Calls()); n != 0 {
		t.Errorf("executed %d times without a workspace", n)
	}
	if rec := h.oneRecord(t); rec.Outcome != manager.OutcomeError || rec.ErrorCode != string(errcode.Internal) {
		t.Errorf("record outcome %q code %q", rec.Outcome, rec.ErrorCode)
	}
}

// TestRunResult: what Run returns on success.
func TestRunResult(t *testing.T) {
	h := newHarness(t, hopts{})
	h.docker.ExecuteFunc = func(context.Context, executors.Spec) (executors.Result, error) {
		return executors.Result{Stdout: "out\n", Stderr: "err\n", ExitCode: 0}, nil
	}
	res, err := h.m.Run(t.Context(), request("bash", lowBash))
	if err != nil {
		t.Fatal(err)
	}
	if res.Result.Stdout != "out\n" || res.Result.Stderr != "err\n" || res.SandboxType != "docker" ||
		res.Risk.Level.String() != "LOW" || res.Decision.Action != policy.ActionAllow || res.Approval != nil {
		t.Errorf("RunResult %+v", res)
	}
}

// TestEvaluate: the dry run decides but never asks, runs or audits.
func TestEvaluate(t *testing.T) {
	cases := []struct {
		name       string
		lang, code string
		wantErr    error
		wantAction string
		wantExec   string
	}{
		{name: "safe", lang: "python", code: safePython, wantAction: policy.ActionAllow, wantExec: "subprocess"},
		{name: "high", lang: "python", code: highPython, wantAction: policy.ActionRequireApproval, wantExec: "docker"},
		{name: "critical", lang: "bash", code: criticalBash, wantAction: policy.ActionDeny, wantExec: "docker"},
		{name: "invalid", lang: "cobol", code: safePython, wantErr: manager.ErrInvalidRequest},
		{name: "empty code", lang: "bash", code: "", wantErr: manager.ErrInvalidRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, hopts{})
			ev, err := h.m.Evaluate(t.Context(), request(tc.lang, tc.code))
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Errorf("Evaluate: %v, want %v", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatalf("Evaluate: %v", err)
			} else if ev.Decision.Action != tc.wantAction || ev.Decision.Executor != tc.wantExec {
				t.Errorf("decision %s on %s, want %s on %s", ev.Decision.Action, ev.Decision.Executor, tc.wantAction, tc.wantExec)
			}
			if n := len(h.audit.Records()); n != 0 {
				t.Errorf("Evaluate wrote %d audit records", n)
			}
			if n := len(h.sub.Calls()) + len(h.docker.Calls()) + len(h.confirm.Requests()); n != 0 {
				t.Errorf("Evaluate reached %d executions or approvals", n)
			}
		})
	}
}

// TestRunApprovalWaitIsBounded: Config.ApprovalTimeout "bounds the wait for
// a human" (DESIGN §2 step 4: the request waits, bounded), even when the
// approval service does not honour the Request.Deadline it was given.
func TestRunApprovalWaitIsBounded(t *testing.T) {
	h := newHarness(t, hopts{cfg: manager.Config{ApprovalTimeout: 100 * time.Millisecond}})
	// Only the approval wait is measured, not the risk check and policy
	// evaluation before it (which can take seconds on a loaded machine).
	var entered, left, deadline time.Time
	var hasDeadline bool
	h.confirm.fn = func(ctx context.Context, _ confirm.Request) (confirm.Outcome, error) {
		entered = time.Now()
		deadline, hasDeadline = ctx.Deadline()
		<-ctx.Done() // a slow or buggy hub: waits for the caller, not the deadline
		left = time.Now()
		return confirm.Outcome{ApprovalID: "ap-1", Status: confirm.StatusWithdrawn}, nil
	}
	// The caller allows far longer than the approval timeout: a wait
	// bounded by the caller's context instead would end as a
	// cancellation, 30 s later, and fail every check below.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err := h.m.Run(ctx, request("python", highPython))
	if !errors.Is(err, manager.ErrApprovalTimeout) {
		t.Errorf("Run: %v, want ErrApprovalTimeout", err)
	}
	// The bound itself, set before the wait began, so load cannot move
	// it: the 100ms ApprovalTimeout plus the manager's grace (1 s).
	if !hasDeadline || deadline.Sub(entered) > 2*time.Second {
		t.Errorf("the approval wait was bounded at %v after it began (deadline set: %v), want about 1.1s with a 100ms ApprovalTimeout",
			deadline.Sub(entered), hasDeadline)
	}
	// And the wait did end there (loosely: a timer can fire late on a
	// loaded machine, but not by the 30 s the caller allows).
	if d := left.Sub(entered); d > 10*time.Second {
		t.Errorf("the approval wait took %v with a 100ms ApprovalTimeout", d)
	}
	if n := len(h.docker.Calls()); n != 0 {
		t.Errorf("executed %d times without an approval", n)
	}
}

// TestRunApprovalPendingHook: a request with OnApprovalPending learns the
// approval's id, risk and deadline once the service publishes it, before
// the answer, and OnApprovalResolved the answer; Via reaches the approval request; a request without the hook
// (the HTTP API) asks exactly as before.
func TestRunApprovalPendingHook(t *testing.T) {
	h := newHarness(t, hopts{cfg: manager.Config{ApprovalTimeout: 90 * time.Second}})
	var order []string
	h.confirm.fn = func(_ context.Context, req confirm.Request) (confirm.Outcome, error) {
		if req.Published != nil {
			req.Published("apr_x")
		}
		order = append(order, "answered")
		return confirm.Outcome{ApprovalID: "apr_x", Status: confirm.StatusApproved, DecidedBy: "alice"}, nil
	}
	var got []manager.ApprovalPending
	req := request("python", highPython)
	req.Via = "MCP, client test 1.0"
	req.OnApprovalPending = func(p manager.ApprovalPending) {
		got = append(got, p)
		order = append(order, "pending")
	}
	req.OnApprovalResolved = func(o confirm.Outcome) {
		order = append(order, "resolved:"+o.Status+":"+o.DecidedBy)
	}
	if _, err := h.m.Run(t.Context(), req); err != nil {
		t.Fatalf("Run: %v", err)
	}
	// The harness wires no gvisor executor: the policy's fallback to
	// docker comes first in the reasons, the approval's second.
	if len(got) != 1 || got[0].ID != "apr_x" || got[0].RiskLevel != "HIGH" || len(got[0].Reasons) != 2 ||
		got[0].Reasons[0].Code != "executor.fallback" || got[0].Reasons[1].Code != "risk.high" || len(got[0].Patterns) == 0 {
		t.Fatalf("OnApprovalPending got %+v", got)
	}
	if d := time.Until(got[0].Deadline); d < 60*time.Second || d > 90*time.Second {
		t.Errorf("pending deadline in %v, want about the 90s approval timeout", d)
	}
	if strings.Join(order, ",") != "pending,answered,resolved:approved:alice" {
		t.Errorf("order %v", order)
	}
	plain := request("python", highPython)
	plain.RequestID = "req-2"
	if _, err := h.m.Run(t.Context(), plain); err != nil {
		t.Fatalf("Run: %v", err)
	}
	reqs := h.confirm.Requests()
	if reqs[0].Via != req.Via || reqs[1].Via != "" || reqs[1].Published != nil {
		t.Errorf("approval requests: via %q / %q, published hook without a caller hook: %v",
			reqs[0].Via, reqs[1].Via, reqs[1].Published != nil)
	}
	if reqs[0].Digest() != reqs[1].Digest() {
		t.Error("Via changed the approval digest")
	}
}

// TestRunAvailabilityRenewedInBackground: once the cached answer is older
// than the TTL, a request does not wait for the probes (a slow engine
// would put its round trip, or its timeout, on every request after each
// TTL): it is decided on the last answer while one background probe
// renews it, and the renewed answer is what later requests see.
func TestRunAvailabilityRenewedInBackground(t *testing.T) {
	h := newHarness(t, hopts{cfg: manager.Config{AvailabilityTTL: time.Millisecond}})
	release := make(chan struct{})
	var probes atomic.Int32
	h.sub.AvailableFunc = func(ctx context.Context) error {
		if probes.Add(1) == 1 {
			return nil // the first answer, probed inline
		}
		select { // the renewal: slow, then down
		case <-release:
		case <-ctx.Done():
		}
		return &executors.UnavailableError{Kind: executors.KindSubprocess, Reason: "engine gone"}
	}
	if _, err := h.m.Run(t.Context(), request("python", safePython)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // past the TTL
	for i := range 3 {
		if _, err := h.m.Run(t.Context(), request("python", safePython)); err != nil {
			t.Fatalf("request %d during the renewal: %v, want the cached answer", i, err)
		}
	}
	// The renewal's goroutine may not have reached the probe yet: wait
	// for it, then check that the three requests started only one.
	for deadline := time.Now().Add(10 * time.Second); probes.Load() < 2 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if n := probes.Load(); n != 2 {
		t.Errorf("subprocess probed %d times, want 2 (one renewal at a time)", n)
	}
	close(release)
	deadline := time.Now().Add(10 * time.Second)
	for h.m.ExecutorStatus(t.Context())["subprocess"].Available {
		if time.Now().After(deadline) {
			t.Fatal("the renewed answer was never installed")
		}
		time.Sleep(time.Millisecond)
	}
	if st := h.m.ExecutorStatus(t.Context())["subprocess"]; st.Reason != "engine gone" {
		t.Errorf("subprocess status after renewal = %+v", st)
	}
}
