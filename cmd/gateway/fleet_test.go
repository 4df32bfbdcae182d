package main

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/pgtest"
	"github.com/sandgate/sandgate/policy"
)

// TestFleetApprovalAcrossReplicas runs three gateway processes on one
// PostgreSQL database. A request held for approval on A is approved
// through B's REST API, and A's call returns 200 with the run's output; a
// second decision on C is a 409; one GET /v1/audit on C shows the record
// A wrote. A request for A's session reaching C is served by A; a request
// held on A is approved on B's page in Chromium. Last, the three are
// restarted one after the other under the mixed workload (rollingRestart).
func TestFleetApprovalAcrossReplicas(t *testing.T) {
	t.Parallel() // its own schema and directories; overlaps the other fleet test
	dsn := pgtest.Schema(t)
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	bin := gatewayBinary(t)
	policyDir := approvalPolicyDir(t, filepath.Join(dir, "policy"))
	conf := filepath.Join(dir, "fleet.yaml")
	yaml := "executors: {docker: {enabled: false}, gvisor: {enabled: false}, aio: {enabled: false}}\nbrowser: {enabled: false}\nstorage: {driver: postgres}\n" +
		testPolicyYAML
	if err := os.WriteFile(conf, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	const agent, approver, admin = "agent-fleet-token-0123456", "approver-fleet-token-012", "admin-fleet-token-0123456"
	bases, cmds := map[string]string{}, map[string]*exec.Cmd{}
	start := func(r string) {
		cmd := exec.Command(bin, "--config", conf, "--listen", "127.0.0.1:0", "--mode", "PERMISSIVE",
			"--data-dir", filepath.Join(dir, "data"), "--policy-dir", policyDir) // the fleet's shared storage
		cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SANDGATE_STORAGE_DSN=" + dsn, "SANDGATE_REPLICA=" + r,
			"SANDGATE_AGENT_TOKEN=" + agent, "SANDGATE_APPROVER_TOKEN=" + approver, "SANDGATE_ADMIN_TOKEN=" + admin}
		base, logs := startAndWait(t, cmd)
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("replica %s logs:\n%s", r, logs.String())
			}
		})
		bases[r], cmds[r] = base, cmd
	}
	for _, r := range []string{"a", "b", "c"} {
		start(r)
	}
	call := func(method, url, tok, body string) (int, map[string]any) {
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		var out map[string]any
		_ = json.Unmarshal(raw, &out)
		return res.StatusCode, out
	}
	type result struct {
		status int
		out    map[string]any
	}
	done := make(chan result, 1)
	go func() {
		st, out := call("POST", bases["a"]+"/v1/sessions/fleet/run_code", agent,
			`{"code":"import subprocess\nprint('approved on b')","language":"python"}`)
		done <- result{st, out}
	}()
	var id, digest string
	for deadline := time.Now().Add(20 * time.Second); id == ""; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no pending approval on A")
		}
		_, out := call("GET", bases["a"]+"/v1/approvals", approver, "")
		if list, _ := out["approvals"].([]any); len(list) == 1 {
			v := list[0].(map[string]any)
			id, digest = v["id"].(string), v["digest"].(string)
		}
	}
	decided := time.Now()
	if st, out := call("POST", bases["b"]+"/v1/approvals/"+id+"/decision", approver,
		`{"decision":"approve","reason":"fleet test","digest":"`+digest+`"}`); st != 200 {
		t.Fatalf("decision on B: %d %v", st, out)
	}
	select {
	case r := <-done:
		if r.status != 200 || r.out["stdout"] != "approved on b\n" {
			t.Fatalf("A's call: %d %v", r.status, r.out)
		}
		t.Logf("released on A %v after the decision on B", time.Since(decided).Round(time.Millisecond))
	case <-time.After(30 * time.Second):
		t.Fatal("A's call was not released by B's decision")
	}
	if st, out := call("POST", bases["c"]+"/v1/approvals/"+id+"/decision", approver, `{"decision":"deny"}`); st != 409 {
		t.Fatalf("second decision on C: %d %v, want 409", st, out)
	}
	_, out := call("GET", bases["c"]+"/v1/audit?session_id=fleet", admin, "")
	recs, _ := out["records"].([]any)
	if len(recs) != 1 {
		t.Fatalf("C's audit: %v", out)
	}
	rec := recs[0].(map[string]any)
	if appr, _ := rec["approval"].(map[string]any); rec["outcome"] != "ok" || appr["status"] != "approved" {
		t.Fatalf("the record of A's run, read on C: %v", rec)
	}

	// The session is A's: the registry says so, and a request for it
	// reaching C is served by A (forwarded, the client's token kept):
	// what C wrote, B reads, and A's audit has the record under the
	// request id C gave.
	if owner := pgtest.QueryString(t, dsn, `SELECT replica FROM sessions WHERE key LIKE '%~fleet'`); owner != "a" {
		t.Fatalf("the session's owner: %q, want a", owner)
	}
	put, _ := http.NewRequest("PUT", bases["c"]+"/v1/sessions/fleet/files/content?path=/workspace/via-c.txt", strings.NewReader("written through c"))
	put.Header.Set("Authorization", "Bearer "+agent)
	res, err := http.DefaultClient.Do(put)
	if err != nil || res.StatusCode/100 != 2 {
		t.Fatalf("write through C: %v %v", res, err)
	}
	res.Body.Close()
	if ids := res.Header.Values("X-Request-Id"); len(ids) != 1 {
		t.Fatalf("forwarded response's request ids: %v, want one", ids)
	}
	if st, _ := call("GET", bases["c"]+"/v1/sessions/fleet", "wrong-token", ""); st != 401 {
		t.Fatalf("a bad token through C: %d, want 401", st)
	}
	_, out = call("GET", bases["a"]+"/v1/audit?session_id=fleet&kind=file.write", admin, "")
	if recs, _ := out["records"].([]any); len(recs) != 1 || recs[0].(map[string]any)["request_id"] != res.Header.Get("X-Request-Id") {
		t.Fatalf("the write's record: %v, want C's request id %s", out, res.Header.Get("X-Request-Id"))
	}

	// A request held on A, approved on B's page in Chromium: B shows it
	// (fetched from A with its code), and A's call returns 200.
	go func() {
		st, out := call("POST", bases["a"]+"/v1/sessions/fleet/run_code", agent,
			`{"code":"import subprocess\nprint('approved on the page of b')","language":"python"}`)
		done <- result{st, out}
	}()
	id = ""
	for deadline := time.Now().Add(20 * time.Second); id == ""; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("A's second request not listed on B")
		}
		_, out := call("GET", bases["b"]+"/v1/approvals", approver, "")
		if list, _ := out["approvals"].([]any); len(list) == 1 {
			v := list[0].(map[string]any)
			if v["code"] != "import subprocess\nprint('approved on the page of b')" {
				t.Fatalf("A's request as B lists it: %v", v)
			}
			id = v["id"].(string)
		}
	}
	approvePage(t, bases["b"], approver, id, "seen on b")
	select {
	case r := <-done:
		if r.status != 200 || r.out["stdout"] != "approved on the page of b\n" {
			t.Fatalf("A's call approved on B's page: %d %v", r.status, r.out)
		}
		if appr, _ := r.out["approval"].(map[string]any); appr["reason"] != "seen on b" {
			t.Fatalf("A's call's approval: %v", r.out["approval"])
		}
	case <-time.After(30 * time.Second):
		t.Fatal("A's call was not released by the decision on B's page")
	}
	// B drops its copy of A's approval when its own LISTEN loop gets the
	// decision's notification, which may come after A's call returned.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, out := call("GET", bases["b"]+"/v1/approvals", approver, "")
		if len(out["approvals"].([]any)) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("B still lists a decided approval 10 s after the decision: %v", out)
		}
	}

	// A streamed run of A's session sent to C stays streamed through the
	// forward: its first events arrive while it waits for approval.
	streamThroughForward(t, bases["c"], bases["b"], agent, approver)

	rollingRestart(t, rollingFleet{names: []string{"a", "b", "c"}, bases: bases, cmds: cmds, start: start,
		agent: agent, admin: admin})
}

// TestFleetDeadReplicaApprovalsInterrupted: A is killed with SIGKILL while
// a request of A's waits for approval; once A's lease expires, B resolves
// that approval as interrupted (never left pending), and a decision on it
// is a 409.
func TestFleetDeadReplicaApprovalsInterrupted(t *testing.T) {
	t.Parallel()
	dsn := pgtest.Schema(t)
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	bin := gatewayBinary(t)
	policyDir := approvalPolicyDir(t, filepath.Join(dir, "policy"))
	// A, the replica killed, has a short lease so that it expires soon
	// after the kill. B, the survivor, has a longer one of its own: with
	// 1 s, B heartbeat every 333 ms, and a machine that held B up for
	// 667 ms let B's lease lapse; B, no longer a member, then served A's
	// session without claiming it, and its router gave up after 2 s. With
	// 5 s, B's heartbeat may be 3.3 s late; B sweeps every 2.5 s (half its
	// lease), so on an idle machine A's approval ends at most 1 + 2.5 s
	// after the kill.
	leases := map[string]time.Duration{"a": time.Second, "b": 5 * time.Second}
	const agent, approver = "agent-fleet-token-0123456", "approver-fleet-token-012"
	cmds, bases := map[string]*exec.Cmd{}, map[string]string{}
	for _, r := range []string{"a", "b"} {
		conf := filepath.Join(dir, "fleet-"+r+".yaml")
		yaml := "executors: {docker: {enabled: false}, gvisor: {enabled: false}, aio: {enabled: false}}\nbrowser: {enabled: false}\n" +
			"storage: {driver: postgres, lease: " + leases[r].String() + "}\n" + testPolicyYAML
		if err := os.WriteFile(conf, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "--config", conf, "--listen", "127.0.0.1:0", "--mode", "PERMISSIVE",
			"--data-dir", filepath.Join(dir, "data"), "--policy-dir", policyDir) // the fleet's shared storage
		cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SANDGATE_STORAGE_DSN=" + dsn, "SANDGATE_REPLICA=" + r,
			"SANDGATE_AGENT_TOKEN=" + agent, "SANDGATE_APPROVER_TOKEN=" + approver}
		base, logs := startAndWait(t, cmd)
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("replica %s logs:\n%s", r, logs.String())
			}
		})
		cmds[r], bases[r] = cmd, base
	}
	get := func(url, tok string) (int, map[string]any) {
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(res.Body).Decode(&out)
		return res.StatusCode, out
	}
	put, _ := http.NewRequest("PUT", bases["a"]+"/v1/sessions/held/files/content?path=/workspace/note.txt", strings.NewReader("kept"))
	put.Header.Set("Authorization", "Bearer "+agent)
	if res, err := http.DefaultClient.Do(put); err != nil || res.StatusCode/100 != 2 {
		t.Fatalf("write a file on A: %v %v", res, err)
	} else {
		res.Body.Close()
	}
	go func() {
		req, _ := http.NewRequest("POST", bases["a"]+"/v1/sessions/held/run_code",
			strings.NewReader(`{"code":"import subprocess\nprint(1)","language":"python"}`))
		req.Header.Set("Authorization", "Bearer "+agent)
		if res, err := http.DefaultClient.Do(req); err == nil {
			res.Body.Close()
		}
	}()
	var id string
	for deadline := time.Now().Add(20 * time.Second); id == ""; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no pending approval on A")
		}
		if _, out := get(bases["a"]+"/v1/approvals", approver); out != nil {
			if list, _ := out["approvals"].([]any); len(list) == 1 {
				id = list[0].(map[string]any)["id"].(string)
			}
		}
	}
	if err := cmds["a"].Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmds["a"].Wait()
	killed := time.Now()
	// At once, before A's lease runs out, the session's next request
	// reaches B: B finds its owner gone (connection refused), waits out
	// the lease and adopts the session, its files intact on the shared
	// storage. The client sees a slow answer, not an error.
	next := make(chan string, 1)
	go func() {
		req, _ := http.NewRequest("POST", bases["b"]+"/v1/sessions/held/execute", strings.NewReader(`{"command":"cat note.txt"}`))
		req.Header.Set("Authorization", "Bearer "+agent)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			next <- err.Error()
			return
		}
		defer res.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(res.Body).Decode(&out)
		next <- fmt.Sprintf("%d %v", res.StatusCode, out["output"])
	}()
	for {
		_, v := get(bases["b"]+"/v1/approvals/"+id, approver)
		if v["status"] == "interrupted" {
			t.Logf("A's approval interrupted by B %v after the kill (A's lease %v, B sweeps every %v)",
				time.Since(killed).Round(time.Millisecond), leases["a"], leases["b"]/2)
			break
		}
		// A's lease, then B's next sweep, with room for a loaded machine.
		if limit := leases["a"] + leases["b"]/2 + 12*time.Second; time.Since(killed) > limit {
			t.Fatalf("A's approval after %v: %v, want interrupted once A's lease expired (within %v)", time.Since(killed), v, limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
	select {
	case got := <-next:
		if got != "200 kept" {
			t.Fatalf("A's session's next request, through B: %s, want 200 kept", got)
		}
		t.Logf("A's session served by B %v after the kill", time.Since(killed).Round(time.Millisecond))
	case <-time.After(4 * leases["b"]): // B's router answers within twice its lease in any case
		t.Fatal("A's session's next request through B did not return")
	}
	if owner := pgtest.QueryString(t, dsn, `SELECT replica FROM sessions WHERE key LIKE '%~held'`); owner != "b" {
		t.Fatalf("the session's owner after A died: %q, want b", owner)
	}
	// A's session goes on through B, its files intact (shared storage).
	req, _ := http.NewRequest("GET", bases["b"]+"/v1/sessions/held/files/content?path=/workspace/note.txt", nil)
	req.Header.Set("Authorization", "Bearer "+agent)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || string(body) != "kept" {
		t.Fatalf("A's file read through B: %d %q", res.StatusCode, body)
	}
}

// approvalPolicyDir writes the embedded policy to dir with PERMISSIVE's
// HIGH approvals routed to the subprocess executor, so that an approved
// run really runs without Docker, and CRITICAL denied outright (STRICT's
// rule), the mixed workload's intended denial.
func approvalPolicyDir(t *testing.T, dir string) string {
	t.Helper()
	err := fs.WalkDir(policy.DefaultFS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(policy.DefaultFS(), p)
		if err != nil {
			return err
		}
		if p == "sandgate/config/data.json" {
			var data map[string]any
			if err := json.Unmarshal(b, &data); err != nil {
				return err
			}
			perm := data["modes"].(map[string]any)["PERMISSIVE"].(map[string]any)
			perm["HIGH"].(map[string]any)["executor"] = "subprocess"
			perm["CRITICAL"] = map[string]any{"action": "deny", "executor": "subprocess"}
			if b, err = json.Marshal(data); err != nil {
				return err
			}
		}
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, p), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}
