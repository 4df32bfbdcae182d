package api

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sandgate/sandgate/confirm"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("per-session identities need the gateway to run as root")
	}
}

// TestSessionsCannotReachEachOther: session B knows session A's host path
// and still cannot read or write A's files, because each session's code
// runs as its own uid.
func TestSessionsCannotReachEachOther(t *testing.T) {
	requireRoot(t)
	auto, _ := confirm.NewAutoApprove("PERMISSIVE")
	e := newEnv(t, envOpts{mode: "PERMISSIVE", confirm: auto, policyFS: everythingToSubprocess(t)})
	r := e.do("POST", "/v1/sessions/sess-a/execute", agentTok, map[string]any{"command": "echo a-secret > secret.txt && cat secret.txt"})
	if r.status != 200 || r.body["output"] != "a-secret\n" {
		t.Fatalf("A: %d %s", r.status, r.raw)
	}
	aDir := filepath.Join(e.dataDir, "workspaces", agentKey("sess-a"))
	for _, cmd := range []string{
		"cat " + filepath.Join(aDir, "secret.txt"),
		"ls " + aDir,
		"echo pwned > " + filepath.Join(aDir, "pwned.txt"),
		"ls " + filepath.Join(e.dataDir, "workspaces"),
	} {
		r := e.do("POST", "/v1/sessions/sess-b/execute", agentTok, map[string]any{"command": cmd})
		if r.status != 200 || r.body["sandbox_type"] != "subprocess" || r.body["exit_code"] == 0.0 ||
			strings.Contains(fmt.Sprint(r.body["output"]), "a-secret") {
			t.Errorf("B ran %q: %d %s", cmd, r.status, r.raw)
		}
	}
	if _, err := os.Stat(filepath.Join(aDir, "pwned.txt")); err == nil {
		t.Fatal("session B wrote into session A's workspace")
	}
}

// TestForkBombDoesNotStarveOtherSessions: the process budget is per session,
// so a fork bomb in one session leaves the others running.
func TestForkBombDoesNotStarveOtherSessions(t *testing.T) {
	requireRoot(t)
	auto, _ := confirm.NewAutoApprove("PERMISSIVE")
	e := newEnv(t, envOpts{mode: "PERMISSIVE", confirm: auto, policyFS: approvalToSubprocess(t)})
	var wg sync.WaitGroup
	wg.Go(func() {
		r := e.do("POST", "/v1/sessions/bomber/run_code", agentTok, map[string]any{
			"code": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n", "language": "python", "timeout_s": 4})
		if r.status != 200 || r.body["timed_out"] != true {
			t.Errorf("bomb: %d %.300s", r.status, r.raw)
		}
	})
	for i := range 5 {
		r := e.do("POST", fmt.Sprintf("/v1/sessions/bystander-%d/run_code", i), agentTok, runCode("print(sum(range(10)))", "python"))
		if r.status != 200 || r.body["stdout"] != "45\n" {
			t.Errorf("bystander %d: %d %.300s", i, r.status, r.raw)
		}
	}
	wg.Wait()
}
