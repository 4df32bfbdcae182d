package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/policy"
)

// blockTeamB is a candidate's extra rule: every run of tenant team-b is
// denied.
const blockTeamB = `package sandgate.exec

deny_reasons contains reason("tenant.blocked", "team-b is suspended") if input.principal.tenant == "team-b"
`

// TestPolicyDiffListsExactlyTheChangedRecords records a window of runs on
// a gateway whose policy dry-runs risk.critical, then replays it against
// a candidate that enforces risk.critical and blocks team-b: exactly the
// CRITICAL run and team-b's run are listed, each reproduced by the
// baseline, and the others are not.
func TestPolicyDiffListsExactlyTheChangedRecords(t *testing.T) {
	tmp := t.TempDir()
	chmodTraversable(t, tmp)
	active, cand := filepath.Join(tmp, "policy"), filepath.Join(tmp, "candidate")
	writePolicyTree(t, active, map[string]string{
		"sandgate/config/enforcement/data.json": `{"rules": {"risk.critical": "dryrun"}}`,
	})
	writePolicyTree(t, cand, map[string]string{"sandgate/exec/block.rego": blockTeamB})
	const agentB = "agent-b-secret-0123456789abcdef"
	config := fmt.Sprintf(`executors: {docker: {enabled: false}, gvisor: {enabled: false}, aio: {enabled: false}}
browser: {enabled: false}
auth:
  tokens:
    - {name: a, role: agent, tenant: team-a, token: %s}
    - {name: b, role: agent, tenant: team-b, token: %s}
    - {name: ops, role: admin, token: %s}
policy: {eval_timeout: 10s, dir: %s}
`, agentA, agentB, adminSecret, active)
	g := startPolicyGateway(t, tmp, config)
	decisions := map[string]string{}
	for _, c := range []struct{ name, tok, code string }{
		{"safe", agentA, "print(1)"},
		{"critical", agentA, `print("rm -rf /")`},
		{"medium", agentA, "import os\nprint(os.getcwd())"},
		{"team-b", agentB, "print(2)"},
	} {
		body, _ := json.Marshal(map[string]any{"code": c.code, "language": "python"})
		st, out, raw := g.call("POST", "/v1/sessions/s/run_code", c.tok, string(body))
		if st != 200 {
			t.Fatalf("%s: %d %s", c.name, st, raw)
		}
		decisions[c.name] = out["decision"].(map[string]any)["decision_id"].(string)
	}
	g.stop()

	var stdout, stderr syncBuf
	err := run(context.Background(), []string{"policy", "diff", "--candidate", cand, "--json",
		"--config", filepath.Join(tmp, "gateway.yaml"), "--data-dir", filepath.Join(tmp, "data")}, noEnv, &stdout, &stderr)
	if err != nil {
		t.Fatalf("policy diff: %v; %s", err, stderr.String())
	}
	var rep diffReport
	if err := json.Unmarshal([]byte(stdout.String()), &rep); err != nil {
		t.Fatalf("%v: %s", err, stdout.String())
	}
	var got []string
	for _, ch := range rep.Changed {
		if !ch.Reproduced {
			t.Errorf("record %d not reproduced by the baseline: %+v", ch.RecordID, ch)
		}
		got = append(got, ch.DecisionID)
	}
	want := []string{decisions["team-b"], decisions["critical"]} // newest first
	if rep.Replayed != 4 || rep.NotReproduced != 0 || !slices.Equal(got, want) {
		t.Fatalf("diff: replayed %d, not reproduced %d, changed %v, want %v\n%s", rep.Replayed, rep.NotReproduced, got, want, stdout.String())
	}
	if c := rep.Changed[1]; c.Recorded.Action != "allow" || c.Recorded.WouldBe != "deny" || c.Candidate.Action != "deny" {
		t.Fatalf("the CRITICAL run's change: %+v", c)
	}
	if c := rep.Changed[0]; c.Candidate.Action != "deny" || !slices.Contains(c.Candidate.Reasons, "tenant.blocked") {
		t.Fatalf("team-b's change: %+v", c)
	}

	// The text report names the same two records.
	stdout = syncBuf{}
	if err := run(context.Background(), []string{"policy", "diff", "--candidate", cand,
		"--config", filepath.Join(tmp, "gateway.yaml"), "--data-dir", filepath.Join(tmp, "data")}, noEnv, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if out := stdout.String(); !strings.Contains(out, "2 would change; 0 of 4 replays differ") ||
		!strings.Contains(out, "allow on subprocess (would be deny) -> deny [risk.critical]") {
		t.Fatalf("text report:\n%s", out)
	}
}

// TestPolicyTestAndCheck: `policy test` passes the shipped tests and fails
// naming a failing one; `policy check` decides from a folder and from a
// bundle file, with no gateway.
func TestPolicyTestAndCheck(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "policy")
	writeShippedTree(t, dir, map[string]string{"sandgate/exec/block.rego": blockTeamB,
		"sandgate/exec/block_test.rego": `package sandgate.exec_test

import data.sandgate.exec

test_team_b_blocked if {
	exec.decision.action == "deny" with input as {"mode": "STRICT", "request": {"kind": "run_code", "session_id": "s", "language": "python", "code_bytes": 1, "code_sha256": "", "timeout_s": 30, "context": {}}, "risk": {"level": "SAFE", "proven_safe": true, "patterns": []}, "principal": {"role": "agent", "name": "b", "tenant": "team-b"}, "executors": {"subprocess": {"available": true, "capabilities": {"network_isolation": true, "kill_detached": true, "memory_limit": true, "process_limit": true}}}}
}
`})
	var stdout, stderr syncBuf
	if err := run(context.Background(), []string{"policy", "test", dir}, noEnv, &stdout, &stderr); err != nil ||
		!strings.Contains(stdout.String(), " 0 failed") {
		t.Fatalf("policy test: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	// A test that fails, and one the gateway's strict compiler refuses,
	// fail the run.
	if err := os.WriteFile(filepath.Join(dir, "sandgate/exec/wrong_test.rego"), []byte(`package sandgate.exec_test

import data.sandgate.exec

test_wrong if {
	exec.decision.action == "allow" with input.principal.tenant as "team-b"
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout = syncBuf{}
	err := run(context.Background(), []string{"policy", "test", dir}, noEnv, &stdout, &stderr)
	if !errors.Is(err, errPolicyTests) || !strings.Contains(stdout.String(), "FAIL  data.sandgate.exec_test.test_wrong") {
		t.Fatalf("failing test: %v\n%s", err, stdout.String())
	}
	if err := os.WriteFile(filepath.Join(dir, "sandgate/exec/wrong_test.rego"), []byte(`package sandgate.exec_test

import data.sandgate.exec

test_unused if {
	tenant := "team-b"
	exec.decision.action == "deny"
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(context.Background(), []string{"policy", "test", dir}, noEnv, &stdout, &stderr); err == nil || !strings.Contains(err.Error(), "tenant unused") {
		t.Fatalf("a test the strict compiler refuses: %v", err)
	}
	if err := os.Remove(filepath.Join(dir, "sandgate/exec/wrong_test.rego")); err != nil {
		t.Fatal(err)
	}

	bundleFile := filepath.Join(tmp, "bundle.tar.gz")
	if err := os.WriteFile(bundleFile, buildTestBundle(t, dir, "rev-7"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{dir, bundleFile} {
		stdout = syncBuf{}
		err := run(context.Background(), []string{"policy", "check", "--policy", target, "--tenant", "team-b", "--code", "print(1)", "--json"}, noEnv, &stdout, &stderr)
		var out checkOutput
		if err != nil || json.Unmarshal([]byte(stdout.String()), &out) != nil {
			t.Fatalf("check %s: %v %s", target, err, stdout.String())
		}
		if out.Decision.Action != "deny" || out.Decision.Reasons[0].Code != "tenant.blocked" || out.Risk.Level.String() != "SAFE" {
			t.Fatalf("check %s: %+v", target, out)
		}
		if target == bundleFile && out.BundleRevision != "rev-7" {
			t.Fatalf("bundle revision %q", out.BundleRevision)
		}
	}
	stdout = syncBuf{}
	if err := run(context.Background(), []string{"policy", "check", "--policy", dir, "--tenant", "team-a", "--code", `print("rm -rf /")`}, noEnv, &stdout, &stderr); err != nil ||
		!strings.Contains(stdout.String(), "decision deny") || !strings.Contains(stdout.String(), "risk.critical: ") {
		t.Fatalf("check text: %v\n%s", err, stdout.String())
	}
}

// writeShippedTree writes the shipped policy, with its Rego tests, and
// extra files to dir.
func writeShippedTree(t *testing.T, dir string, extra map[string]string) {
	t.Helper()
	tree, err := policy.DefaultTree()
	if err != nil {
		t.Fatal(err)
	}
	for p, f := range tree {
		if _, ok := extra[p]; !ok {
			extra[p] = string(f.Data)
		}
	}
	for p, content := range extra {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
