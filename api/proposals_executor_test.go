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

// TestExecutorProposal: a run denied because the policy's executor is
// missing; the agent proposes that its session use the subprocess tier.
// An executor the gateway does not have is a 400 with its own code. The
// approver's view of the proposal lists the session's denied runs with
// what they would become (not the other session's); rejected, the run is
// still denied and the agent reads why; accepted, the next run goes to
// subprocess and succeeds, in that session only, until revoked.
func TestExecutorProposal(t *testing.T) {
	e := newApprovalEnv(t, approvalOpts{timeout: 30 * time.Second, grants: true, proposals: true})
	run := func(session string) resp {
		return e.do("POST", "/v1/sessions/"+session+"/run_code", agentTok, runCode(mediumRisk, "python"))
	}
	for _, s := range []string{"ex-1", "ex-1", "ex-2"} {
		if r := run(s); r.status == 200 || !strings.Contains(string(r.raw), "docker") {
			t.Fatalf("%s before: %d %s", s, r.status, r.raw)
		}
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
	eff := obj(r.body["effect"])
	if r.status != 201 || eff["changed_count"] != float64(2) {
		t.Fatalf("propose: %d %s", r.status, r.raw)
	}
	for _, c := range eff["changed"].([]any) {
		c := obj(c)
		if c["session_id"] != "ex-1" || c["candidate"] != "allow on subprocess" || !strings.HasPrefix(fmt.Sprint(c["now"]), "deny") {
			t.Errorf("change: %v", c)
		}
	}
	if ov := obj(r.body["overlay"]); ov["executor"] != "subprocess" || ov["session"] != "a/ex-1" && ov["session"] != "/ex-1" {
		t.Errorf("overlay: %v", r.body["overlay"])
	}
	id := r.body["id"].(string)
	if r := e.do("POST", "/v1/proposals/"+id+"/decision", approverTok, map[string]any{"decision": "reject",
		"reason": "install docker instead"}); r.status != 200 {
		t.Fatalf("reject: %d %s", r.status, r.raw)
	}
	if r := e.do("GET", "/v1/sessions/ex-1/proposals/"+id, agentTok, nil); r.body["status"] != "rejected" || r.body["reason"] != "install docker instead" {
		t.Errorf("the agent's view: %s", r.raw)
	}
	if r := run("ex-1"); r.status == 200 {
		t.Fatalf("after the rejection: %d %s", r.status, r.raw)
	}

	r = propose("subprocess")
	id = r.body["id"].(string)
	if r := e.do("POST", "/v1/proposals/"+id+"/decision", approverTok, map[string]any{"decision": "accept", "for_s": 600}); r.status != 200 {
		t.Fatalf("accept: %d %s", r.status, r.raw)
	}
	if r := run("ex-1"); r.status != 200 || r.body["sandbox_type"] != "subprocess" || !strings.Contains(fmt.Sprint(r.body["stdout"]), "cpus True") {
		t.Fatalf("after the acceptance: %d %s", r.status, r.raw)
	}
	if r := run("ex-2"); r.status == 200 {
		t.Fatalf("another session uses the proposal: %d %s", r.status, r.raw)
	}
	if r := e.do("DELETE", "/v1/proposals/"+id, approverTok, nil); r.status != 200 {
		t.Fatalf("revoke: %d %s", r.status, r.raw)
	}
	if r := run("ex-1"); r.status == 200 {
		t.Fatalf("after the revocation: %d %s", r.status, r.raw)
	}
}
