package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/pgtest"
)

// TestFleetDeerFlowSandbox runs two gateway processes on one PostgreSQL
// database with the subprocess executor. A DeerFlow sandbox created
// through A works through B; once B serves its session, a sandbox call
// through A is forwarded to B (A alone would refuse it: the session is
// B's) and answers with what B ran; the provisioner on either replica
// shows the same capability; B's graceful stop leaves the sandbox in the
// store, and A adopts the session; a delete through B ends the URL on
// both.
func TestFleetDeerFlowSandbox(t *testing.T) {
	t.Parallel() // its own schema and directories
	dsn := pgtest.Schema(t)
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	bin := gatewayBinary(t)
	conf := filepath.Join(dir, "fleet.yaml")
	yaml := "executors: {docker: {enabled: false}, gvisor: {enabled: false}, aio: {enabled: false}}\nbrowser: {enabled: false}\n" +
		"storage: {driver: postgres, lease: 2s}\ndeerflow: {enabled: true}\n" + testPolicyYAML
	if err := os.WriteFile(conf, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	const agent = "agent-deerflow-token-0123"
	bases, cmds := map[string]string{}, map[string]*exec.Cmd{}
	start := func(r string) {
		cmd := exec.Command(bin, "--config", conf, "--listen", "127.0.0.1:0", "--mode", "PERMISSIVE",
			"--data-dir", filepath.Join(dir, "data")) // the fleet's shared storage
		cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SANDGATE_STORAGE_DSN=" + dsn, "SANDGATE_REPLICA=" + r,
			"SANDGATE_AGENT_TOKEN=" + agent}
		base, logs := startAndWait(t, cmd)
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("replica %s logs:\n%s", r, logs.String())
			}
		})
		bases[r], cmds[r] = base, cmd
	}
	start("a")
	start("b")
	call := func(method, url, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		if !strings.Contains(url, "/deerflow/sandboxes/") { // a sandbox call carries no credential
			req.Header.Set("X-API-Key", agent) // DeerFlow's provisioner key
			req.Header.Set("Authorization", "Bearer "+agent)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		var out map[string]any
		_ = json.Unmarshal(raw, &out)
		if out == nil {
			out = map[string]any{"raw": string(raw)}
		}
		return res.StatusCode, out
	}
	// on is a sandbox URL as reached through replica r.
	var path string
	on := func(r string) string { return bases[r] + path }
	shell := func(r, command string) (int, map[string]any) {
		t.Helper()
		st, out := call("POST", on(r)+"/v1/shell/exec", `{"command":`+jsonString(command)+`}`)
		data, _ := out["data"].(map[string]any)
		return st, data
	}

	st, sb := call("POST", bases["a"]+"/deerflow/api/sandboxes", `{"sandbox_id":"sbx","thread_id":"t1","user_id":"u1"}`)
	url, _ := sb["sandbox_url"].(string)
	if st != 200 || !strings.HasPrefix(url, bases["a"]+"/deerflow/sandboxes/sbx/sgdf_") {
		t.Fatalf("create through A: %d %v", st, sb)
	}
	path = strings.TrimPrefix(url, bases["a"])
	capability := path[strings.LastIndex(path, "/")+1:]
	for _, r := range []string{"a", "b"} {
		st, got := call("GET", bases[r]+"/deerflow/api/sandboxes/sbx", "")
		if u, _ := got["sandbox_url"].(string); st != 200 || u != bases[r]+path {
			t.Fatalf("get through %s: %d %v", r, st, got)
		}
	}

	// B takes the session with the first sandbox call; A forwards to it.
	if st, d := shell("b", "echo one > /workspace/n.txt; echo served"); st != 200 || d["output"] != "served\n" {
		t.Fatalf("first sandbox call, through B: %d %v", st, d)
	}
	if st, d := shell("a", "cat /workspace/n.txt"); st != 200 || d["output"] != "one\n" {
		t.Fatalf("sandbox call through A: %d %v", st, d)
	}
	st, info := call("GET", bases["a"]+"/v1/sessions/df.u1.t1", "")
	if p, _ := info["placement"].(map[string]any); st != 200 || p["replica"] != "b" || info["front_end"] != "deerflow" {
		t.Fatalf("the session, read through A: %d %v", st, info)
	}

	// B stops: the sandbox stays in the store, and A adopts the session.
	_ = cmds["b"].Process.Signal(os.Interrupt)
	_, _ = cmds["b"].Process.Wait()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, d := shell("a", "cat /workspace/n.txt")
		if st == 200 && d["output"] == "one\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox call through A after B stopped: %d %v", st, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
	start("b")
	st, got := call("GET", bases["b"]+"/deerflow/api/sandboxes/sbx", "")
	if u, _ := got["sandbox_url"].(string); st != 200 || !strings.HasSuffix(u, "/"+capability) {
		t.Fatalf("get through the restarted B: %d %v", st, got)
	}

	// A delete through B (A serves the session now) ends the URL on both.
	if st, del := call("DELETE", bases["b"]+"/deerflow/api/sandboxes/sbx", ""); st != 200 || del["ok"] != true {
		t.Fatalf("delete through B: %d %v", st, del)
	}
	for _, r := range []string{"a", "b"} {
		if st, out := call("POST", on(r)+"/v1/shell/exec", `{"command":"echo x"}`); st != 404 {
			t.Fatalf("sandbox call through %s after the delete: %d %v", r, st, out)
		}
		if st, out := call("GET", bases[r]+"/deerflow/api/sandboxes/sbx", ""); st != 404 {
			t.Fatalf("get through %s after the delete: %d %v", r, st, out)
		}
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
