package api

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// mediumRisk is MEDIUM code: in PERMISSIVE the mode table sends it to
// docker, which the approval test gateway does not have.
const mediumRisk = "import multiprocessing\nprint('cpus', multiprocessing.cpu_count() > 0)"

// TestExecutorProposal: a run denied because the policy's executor
// (docker) is missing; the agent proposes that its session use the
// subprocess tier instead. An executor the gateway does not have is a 400
// with its own code; subprocess is one too (weakens_isolation): an
// executor overlay may only keep or raise isolation, so accepting it
// would have moved MEDIUM runs from a container onto the host. No
// proposal is left for an approver, and the run is still denied.
func TestExecutorProposal(t *testing.T) {
	e := newApprovalEnv(t, approvalOpts{timeout: 30 * time.Second, grants: true, proposals: true})
	run := func(session string) resp {
		return e.do("POST", "/v1/sessions/"+session+"/run_code", agentTok, runCode(mediumRisk, "python"))
	}
	if r := run("ex-1"); r.status == 200 || !strings.Contains(string(r.raw), "docker") {
		t.Fatalf("before: %d %s", r.status, r.raw)
	}
	propose := func(value string) resp {
		return e.do("POST", "/v1/sessions/ex-1/proposals", agentTok, map[string]any{"kind": "executor", "value": value,
			"justification": "docker is not installed here; the task only counts CPUs"})
	}
	for _, bad := range []string{"gvisor", "nope", ""} {
		r := propose(bad)
		if r.status != 400 || r.errCode() != "invalid_request" || !strings.Contains(string(r.raw), "unknown_executor") {
			t.Errorf("propose %q: %d %s", bad, r.status, r.raw)
		}
	}
	r := propose("subprocess")
	if r.status != 400 || r.errCode() != "invalid_request" || !strings.Contains(string(r.raw), "weakens_isolation") {
		t.Fatalf("propose subprocess: %d %s", r.status, r.raw)
	}
	if r := e.do("GET", "/v1/proposals", approverTok, nil); strings.Contains(string(r.raw), "subprocess") {
		t.Errorf("a refused proposal is listed: %d %s", r.status, r.raw)
	}
	if r := run("ex-1"); r.status == 200 || fmt.Sprint(r.body["sandbox_type"]) == "subprocess" {
		t.Fatalf("after the refusal: %d %s", r.status, r.raw)
	}
}
