package api

import (
	"net/http"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/sandgate/sandgate/confirm"
	"github.com/sandgate/sandgate/policy"
)

func runCode(code, lang string) map[string]any {
	return map[string]any{"code": code, "language": lang}
}

func TestRunCodeSafePython(t *testing.T) {
	e := newEnv(t, envOpts{})
	r := e.do("POST", "/v1/sessions/s1/run_code", agentTok, runCode("print(1)", "python"))
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.raw)
	}
	if r.body["stdout"] != "1\n" || r.body["success"] != true || r.body["sandbox_type"] != "subprocess" {
		t.Fatalf("body %s", r.raw)
	}
	risk := r.body["risk"].(map[string]any)
	dec := r.body["decision"].(map[string]any)
	if risk["level"] != "SAFE" || risk["proven_safe"] != true || dec["action"] != "allow" || dec["executor"] != "subprocess" {
		t.Fatalf("risk/decision %s", r.raw)
	}
	if r.body["request_id"] != r.header.Get("X-Request-Id") || r.body["approval"] != nil {
		t.Fatalf("request id / approval: %s", r.raw)
	}
	if !strings.HasPrefix(dec["policy_revision"].(string), "sha256:") {
		t.Fatalf("no policy revision: %s", r.raw)
	}
}

func TestRunCodeFailingProgramIs200(t *testing.T) {
	e := newEnv(t, envOpts{mode: "PERMISSIVE"})
	r := e.do("POST", "/v1/sessions/s1/run_code", agentTok, runCode("import sys\nsys.exit(3)", "python"))
	if r.status != 200 || r.body["success"] != false || r.body["exit_code"] != 3.0 {
		t.Fatalf("%d %s", r.status, r.raw)
	}
}

func TestRunCodeTimeout(t *testing.T) {
	e := newEnv(t, envOpts{mode: "PERMISSIVE"})
	r := e.do("POST", "/v1/sessions/s1/run_code", agentTok, map[string]any{
		"code": "while true; do :; done", "language": "bash", "timeout_s": 1})
	if r.status != 200 || r.body["timed_out"] != true || r.body["exit_code"] != 124.0 || r.body["success"] != false {
		t.Fatalf("%d %s", r.status, r.raw)
	}
}

func TestExecuteContract(t *testing.T) {
	e := newEnv(t, envOpts{mode: "PERMISSIVE"})
	r := e.do("POST", "/v1/sessions/s1/execute", agentTok, map[string]any{"command": "echo out; echo err >&2; exit 2"})
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.raw)
	}
	if r.body["output"] != "out\n[stderr] err\n" || r.body["exit_code"] != 2.0 || r.body["truncated"] != false {
		t.Fatalf("body %s", r.raw)
	}
}

func TestStrictHighWithoutDockerIsUnavailable(t *testing.T) {
	// The policy checks availability before approval: asking a human to
	// approve what cannot run would waste their time.
	e := newEnv(t, envOpts{})
	r := e.do("POST", "/v1/sessions/s1/run_code", agentTok, runCode("import subprocess\nsubprocess.run(['id'])", "python"))
	if r.status != 503 || r.errCode() != "executor_unavailable" {
		t.Fatalf("%d %s", r.status, r.raw)
	}
}

func TestStrictRoutesUnprovenCodeToDocker(t *testing.T) {
	// Docker is not wired in this build, so STRICT's choice for LOW code is
	// a 503, never a silent downgrade to the subprocess executor.
	e := newEnv(t, envOpts{})
	r := e.do("POST", "/v1/sessions/s1/run_code", agentTok, runCode("import os\nprint(os.getcwd())", "python"))
	if r.status != http.StatusServiceUnavailable || r.errCode() != "executor_unavailable" {
		t.Fatalf("%d %s", r.status, r.raw)
	}
}

func TestPolicyDenied(t *testing.T) {
	e := newEnv(t, envOpts{})
	r := e.do("POST", "/v1/sessions/s1/execute", agentTok, map[string]any{"command": "rm -rf / --no-preserve-root"})
	if r.status != 403 || r.errCode() != "policy_denied" {
		t.Fatalf("%d %s", r.status, r.raw)
	}
	if !strings.Contains(string(r.raw), `"code":"risk.critical"`) {
		t.Fatalf("reasons %s", r.raw)
	}
}

func TestApprovalUnavailableFailsClosed(t *testing.T) {
	// A policy whose approvals route to an available executor, and no
	// approval service: the request is denied, never run.
	e := newEnv(t, envOpts{mode: "PERMISSIVE", policyFS: approvalToSubprocess(t)})
	r := e.do("POST", "/v1/sessions/s1/run_code", agentTok, runCode("import subprocess\nsubprocess.run(['id'])", "python"))
	if r.status != 403 || r.errCode() != "approval_unavailable" {
		t.Fatalf("%d %s", r.status, r.raw)
	}
}

// approvalToSubprocess is the default tree with PERMISSIVE's approvals
// routed to the subprocess executor, so auto-approval can be seen ending in
// a real run (approvalPolicy edits data.json as JSON).
func approvalToSubprocess(t *testing.T) fstest.MapFS { return approvalPolicy(t) }

// everythingToSubprocess routes every level to the subprocess executor (with
// the default approvals), so isolation tests can aim hostile code at it.
func everythingToSubprocess(t *testing.T) fstest.MapFS {
	t.Helper()
	m := fstest.MapFS{}
	err := fsWalk(policy.DefaultFS(), func(p string, b []byte) {
		if p == "sandgate/config/data.json" {
			b = []byte(strings.ReplaceAll(string(b), `"executor": "docker"`, `"executor": "subprocess"`))
		}
		m[p] = &fstest.MapFile{Data: b}
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestAutoApproveInPermissive(t *testing.T) {
	auto, err := confirm.NewAutoApprove("PERMISSIVE")
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envOpts{mode: "PERMISSIVE", confirm: auto, policyFS: approvalToSubprocess(t)})
	r := e.do("POST", "/v1/sessions/s1/run_code", agentTok, runCode("import subprocess\nprint(subprocess.run(['echo','hi'],capture_output=True).stdout.decode())", "python"))
	if r.status != 200 || r.body["stdout"] != "hi\n\n" {
		t.Fatalf("%d %s", r.status, r.raw)
	}
	appr, _ := r.body["approval"].(map[string]any)
	if appr["status"] != "approved" || appr["decided_by"] != "auto-approve" {
		t.Fatalf("approval %s", r.raw)
	}
	if recs := e.auditRecords("s1"); len(recs) != 1 || recs[0].Approval == nil || recs[0].Approval.Status != "approved" {
		t.Fatalf("audit %+v", recs)
	}
}
