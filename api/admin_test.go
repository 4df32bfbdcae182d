package api

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/audit"
)

func TestSessionsListGetDelete(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, id := range []string{"s-a", "s-b", "s-c"} {
		if r := e.do("POST", "/v1/sessions/"+id+"/run_code", agentTok, runCode("print(1)", "python")); r.status != 200 {
			t.Fatalf("%s: %d %s", id, r.status, r.raw)
		}
	}
	r := e.do("GET", "/v1/sessions?limit=2", agentTok, nil)
	list := r.body["sessions"].([]any)
	if r.status != 200 || len(list) != 2 || r.body["next_cursor"] != "a~s-b" {
		t.Fatalf("page 1: %s", r.raw)
	}
	// The cursor is the qualified id; a bare name (as before tenants) is
	// read in the caller's tenant.
	for _, cursor := range []string{"a~s-b", "s-b"} {
		r = e.do("GET", "/v1/sessions?limit=2&cursor="+cursor, agentTok, nil)
		list = r.body["sessions"].([]any)
		if len(list) != 1 || list[0].(map[string]any)["id"] != "s-c" || r.body["next_cursor"] != nil {
			t.Fatalf("page 2 after %s: %s", cursor, r.raw)
		}
	}
	r = e.do("GET", "/v1/sessions/s-a", agentTok, nil)
	if r.status != 200 || r.body["runs"] != 1.0 || r.body["last_executor"] != "subprocess" {
		t.Fatalf("get: %s", r.raw)
	}
	for range 2 { // idempotent
		if r := e.do("DELETE", "/v1/sessions/s-a", agentTok, nil); r.status != 204 {
			t.Fatalf("delete: %d %s", r.status, r.raw)
		}
	}
	if r := e.do("GET", "/v1/sessions/s-a", agentTok, nil); r.status != 200 {
		t.Fatalf("delete without purge keeps the workspace: %d", r.status)
	}
	if r := e.do("DELETE", "/v1/sessions/s-a?purge=true", agentTok, nil); r.status != 204 {
		t.Fatalf("purge: %d", r.status)
	}
	if r := e.do("GET", "/v1/sessions/s-a", agentTok, nil); r.status != 404 {
		t.Fatalf("after purge: %d %s", r.status, r.raw)
	}
	if r := e.do("DELETE", "/v1/sessions/never-existed", agentTok, nil); r.status != 204 {
		t.Fatalf("delete unknown: %d", r.status)
	}
}

func TestPolicyEndpoints(t *testing.T) {
	e := newEnv(t, envOpts{})
	r := e.do("GET", "/v1/policy", adminTok, nil)
	if r.status != 200 || r.body["mode"] != "STRICT" || !strings.HasPrefix(r.body["revision"].(string), "sha256:") {
		t.Fatalf("get: %s", r.raw)
	}
	rev := r.body["revision"]
	r = e.do("POST", "/v1/policy/reload", adminTok, nil)
	if r.status != 200 || r.body["revision"] != rev || r.body["reloads"] != 1.0 {
		t.Fatalf("reload: %s", r.raw)
	}
	r = e.do("POST", "/v1/policy/evaluate", agentTok, map[string]any{
		"session_id": "dry", "code": "rm -rf /", "language": "bash"})
	dec := r.body["decision"].(map[string]any)
	if r.status != 200 || dec["action"] != "deny" || r.body["risk"].(map[string]any)["level"] != "CRITICAL" {
		t.Fatalf("evaluate: %s", r.raw)
	}
	if recs := e.auditRecords("dry"); len(recs) != 0 {
		t.Fatalf("a dry run must not be audited as a run: %+v", recs)
	}
	if _, err := e.ws.Get(context.Background(), agentKey("dry")); err == nil {
		t.Fatal("a dry run created a workspace")
	}
}

func TestPolicyReloadRejectsBrokenPolicy(t *testing.T) {
	dir := t.TempDir()
	copyTree(t, dir)
	e := newEnvWithPolicyDir(t, dir)
	good := e.do("GET", "/v1/policy", adminTok, nil).body["revision"]
	if err := os.WriteFile(filepath.Join(dir, "sandgate", "exec", "bad.rego"), []byte("package sandgate.exec\n\nx if {"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := e.do("POST", "/v1/policy/reload", adminTok, nil)
	if r.status != 400 || r.errCode() != "invalid_request" {
		t.Fatalf("reload: %d %s", r.status, r.raw)
	}
	st := e.do("GET", "/v1/policy", adminTok, nil)
	if st.body["revision"] != good || !strings.Contains(fmt.Sprint(st.body["last_error"]), "bad.rego") {
		t.Fatalf("status after failed reload: %s", st.raw)
	}
}

func TestAuditEndpointAndOneRecordPerRequest(t *testing.T) {
	dataDir := t.TempDir()
	e := newEnv(t, envOpts{mode: "PERMISSIVE", dataDir: dataDir, policyFS: approvalToSubprocess(t)})
	e.do("POST", "/v1/sessions/aud/run_code", agentTok, runCode("print(1)", "python"))                             // allowed
	e.do("POST", "/v1/sessions/aud/execute", agentTok, map[string]any{"command": "sleep 5", "timeout_s": 1})       // timed out
	e.do("POST", "/v1/sessions/aud/run_code", agentTok, runCode("import subprocess", "python"))                    // denied: no approver
	e.do("POST", "/v1/sessions/aud/run_code", agentTok, map[string]any{"code": "print(1)", "language": "fortran"}) // invalid
	want := []struct{ kind, outcome, code string }{
		{"run_code", "invalid", "invalid_request"},
		{"run_code", "denied", "approval_unavailable"},
		{"execute", "timed_out", ""},
		{"run_code", "ok", ""},
	}
	check := func(recs []audit.Record) {
		t.Helper()
		if len(recs) != len(want) {
			t.Fatalf("%d records, want %d: %+v", len(recs), len(want), recs)
		}
		for i, w := range want {
			r := recs[i]
			if r.Kind != w.kind || r.Outcome != w.outcome || r.ErrorCode != w.code || r.RequestID == "" || r.Principal != "agent:a" {
				t.Errorf("record %d: %+v, want %+v", i, r, w)
			}
			if w.outcome != "invalid" && (r.PolicyRevision == "" || r.RiskLevel == "" || r.CodeSHA256 == "") {
				t.Errorf("record %d lacks decision fields: %+v", i, r)
			}
		}
		if recs[2].ExitCode == nil || *recs[2].ExitCode != 124 || recs[3].Executor != "subprocess" {
			t.Errorf("exit code / executor not recorded: %+v %+v", recs[2], recs[3])
		}
	}
	r := e.do("GET", "/v1/audit?session_id=aud", adminTok, nil)
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.raw)
	}
	check(e.auditRecords("aud"))
	// Records survive a restart of the gateway on the same data directory.
	e.srv.Close()
	_ = e.audit.Close()
	e2 := newEnv(t, envOpts{mode: "PERMISSIVE", dataDir: dataDir, policyFS: approvalToSubprocess(t)})
	check(e2.auditRecords("aud"))
	if r := e2.do("GET", "/v1/audit?session_id=aud&limit=2", adminTok, nil); len(r.body["records"].([]any)) != 2 || r.body["next_cursor"] == nil {
		t.Fatalf("paging: %s", r.raw)
	}
}

func TestProbesAndMetrics(t *testing.T) {
	e := newEnv(t, envOpts{})
	if r := e.do("GET", "/healthz", "", nil); r.status != 200 {
		t.Fatalf("healthz %d", r.status)
	}
	r := e.do("GET", "/readyz", "", nil)
	if r.status != 200 || r.body["ready"] != true || r.body["executors"].(map[string]any)["subprocess"].(map[string]any)["status"] != "ok" {
		t.Fatalf("readyz %d %s", r.status, r.raw)
	}
	e.do("POST", "/v1/sessions/m/run_code", agentTok, runCode("print(1)", "python"))
	r = e.do("GET", "/metrics", adminTok, nil)
	if r.status != 200 || !strings.Contains(string(r.raw), `sandgate_requests_total{action="allow",executor="subprocess",kind="run_code",outcome="ok"} 1`) {
		t.Fatalf("metrics %d %.2000s", r.status, r.raw)
	}
}
