package main

import (
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/sandgate/sandgate/internal/policytest"
	"github.com/sandgate/sandgate/policy"
)

// TestDeerFlowSequenceInEveryExecutor is issue 28's DeerFlow acceptance:
// DeerFlow's own call sequence through the gateway's DeerFlow routes, on
// the real gateway binary, in STRICT, with the policy sending every run
// to one executor at a time: write hello.py to /mnt/user-data/workspace
// with the file API, `cd /mnt/user-data/workspace && python hello.py`,
// write an output under /mnt/user-data/outputs from a command and read it
// back with the file API, and list with find as DeerFlow's ls tool does.
// It runs in each executor as root and as a non-root gateway (subprocess
// through user namespaces; docker, gVisor and aio given the Docker
// engine's socket through its group, aio binding its instances directly:
// executors/aio/direct.go).
func TestDeerFlowSequenceInEveryExecutor(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("SANDGATE_REQUIRE_ROOT") == "1" {
			t.Fatal("SANDGATE_REQUIRE_ROOT=1 but not running as root")
		}
		t.Skip("needs root: the executors' isolation, and creating the non-root user")
	}
	root := dfRuntimeRoot(t)
	for _, tc := range []struct {
		name, executor string
		nonRoot        bool
		require        string // the SANDGATE_REQUIRE_* that makes its absence a failure
	}{
		{"subprocess", "subprocess", false, ""},
		{"subprocess/non-root", "subprocess", true, ""},
		{"docker", "docker", false, "SANDGATE_REQUIRE_DOCKER"},
		{"gvisor", "gvisor", false, "SANDGATE_REQUIRE_GVISOR"},
		{"aio", "aio", false, "SANDGATE_REQUIRE_DOCKER"},
		{"docker/non-root", "docker", true, "SANDGATE_REQUIRE_DOCKER"},
		{"gvisor/non-root", "gvisor", true, "SANDGATE_REQUIRE_GVISOR"},
		// A non-root gateway cannot move mounts in the host's mount
		// namespace: its aio pool makes each instance for its session,
		// the workspace mounted by the engine at create time.
		{"aio/non-root", "aio", true, "SANDGATE_REQUIRE_DOCKER"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := startDeerFlowGateway(t, tc.executor, root, tc.nonRoot, tc.require)
			dfSequence(t, base, tc.executor)
		})
	}
}

// dfRuntimeRoot is the exported runtime root (`python` is its): the one
// make test names, else make images' default.
func dfRuntimeRoot(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("SANDGATE_RUNTIME_ROOT")
	if dir == "" {
		dir = "/var/lib/sandgate/rootfs/runtime"
	}
	if _, err := os.Stat(filepath.Join(dir, "usr")); err != nil {
		if os.Getenv("SANDGATE_REQUIRE_RUNTIME_ROOT") == "1" {
			t.Fatalf("runtime root %s: %v", dir, err)
		}
		t.Skipf("no runtime root at %s (make images)", dir)
	}
	return dir
}

const dfAgent = "agent-deerflow-paths-token"

// startDeerFlowGateway starts the gateway binary with executor as the
// only one the policy names, as root or as rootlessUser, and returns its
// base URL once /readyz says the executor is ready.
func startDeerFlowGateway(t *testing.T, executor, root string, nonRoot bool, require string) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	on := func(kind string) string {
		if kind == executor || (executor == "gvisor" && kind == "docker") {
			return "true"
		}
		return "false"
	}
	pol := onlyExecutorPolicy(t, filepath.Join(dir, "policy"), executor)
	// The aio pool's state directory holds Unix sockets: a short path.
	state, err := os.MkdirTemp("", "dfaio")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(state) }) // never recursive: it held mounts
	yaml := "executors:\n  subprocess: {enabled: true, root_dir: \"" + root + "\"}\n" +
		"  docker: {enabled: " + on("docker") + "}\n  gvisor: {enabled: " + on("gvisor") + "}\n  aio: {enabled: " + on("aio") + ", state_dir: \"" + state + "\"}\n" +
		"browser: {enabled: false}\ndeerflow: {enabled: true}\n" +
		"policy: {dir: \"" + pol + "\", eval_timeout: " + policytest.EvalTimeout.String() + "}\n"
	conf := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(conf, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o711); err != nil {
		t.Fatal(err)
	}
	args := []string{"--config", conf, "--listen", "127.0.0.1:0", "--mode", "STRICT", "--data-dir", data}
	cmd := exec.Command(gatewayBinary(t), args...)
	if nonRoot {
		ensureUser(t, rootlessUser)
		if out, err := exec.Command("chown", rootlessUser+":"+rootlessUser, data, state).CombinedOutput(); err != nil {
			t.Fatalf("chown: %v: %s", err, out)
		}
		// The engine's socket is the one privilege a non-root gateway
		// with a container executor is given: its group, as the docker
		// group gives it to an operator's service account.
		groups := []string{"--clear-groups"}
		if executor != "subprocess" {
			groups = []string{"--groups", engineSocketGroup(t)}
		}
		cmd = exec.Command("setpriv", append(append([]string{"--reuid", rootlessUser, "--regid", rootlessUser},
			groups...), append([]string{"--", gatewayBinary(t)}, args...)...)...)
	}
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SANDGATE_AGENT_TOKEN=" + dfAgent,
		"SANDGATE_APPROVER_TOKEN=approver-deerflow-paths", "SANDGATE_ADMIN_TOKEN=admin-deerflow-paths"}
	base, logs := startAndWait(t, cmd)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("gateway logs:\n%s", logs.String())
		}
	})
	var ready struct {
		Executors map[string]struct {
			Status       string `json:"status"`
			Capabilities struct {
				Isolation string `json:"isolation"`
			} `json:"capabilities"`
		} `json:"executors"`
	}
	res, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	_ = json.NewDecoder(res.Body).Decode(&ready)
	if st := ready.Executors[executor].Status; st != "ok" {
		msg := executor + " is not ready (" + st + "): needs " + require
		if require == "" || os.Getenv(require) == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	// The non-root gateway isolates through user namespaces.
	if iso := ready.Executors["subprocess"].Capabilities.Isolation; nonRoot && iso != "userns" {
		t.Fatalf("a non-root gateway's subprocess isolation is %q, want userns", iso)
	}
	return base
}

// engineSocketGroup is the group id that owns the Docker engine's socket.
func engineSocketGroup(t *testing.T) string {
	t.Helper()
	fi, err := os.Stat("/var/run/docker.sock")
	if err != nil {
		t.Skipf("no engine socket: %v", err)
	}
	return strconv.FormatUint(uint64(fi.Sys().(*syscall.Stat_t).Gid), 10)
}

// onlyExecutorPolicy writes the shipped policy to dir with every
// decision naming executor.
func onlyExecutorPolicy(t *testing.T, dir, executor string) string {
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
			for _, levels := range data["modes"].(map[string]any) {
				for _, d := range levels.(map[string]any) {
					d.(map[string]any)["executor"] = executor
				}
			}
			for _, k := range []string{"isolation_upgrade", "stateful", "detached", "session_sandbox"} {
				if m, ok := data[k].(map[string]any); ok {
					m["executor"] = executor
					if _, ok := m["fallback"]; ok {
						m["fallback"] = executor
					}
				}
			}
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

// dfSequence makes DeerFlow's calls (AioSandboxProvider's provisioner
// request, then AioSandbox's AIO calls) and checks every answer.
func dfSequence(t *testing.T, base, executor string) {
	t.Helper()
	call := func(path string, body any) map[string]any {
		t.Helper()
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest("POST", path, strings.NewReader(string(b)))
		req.Header.Set("Content-Type", "application/json")
		if strings.Contains(path, "/deerflow/api/") {
			req.Header.Set("X-API-Key", dfAgent) // DeerFlow's provisioner_api_key
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		var out map[string]any
		if res.StatusCode != 200 || json.Unmarshal(raw, &out) != nil {
			t.Fatalf("POST %s: %d %s", path, res.StatusCode, raw)
		}
		if strings.Contains(path, "/v1/") {
			if out["success"] != true {
				t.Fatalf("POST %s: %s", path, raw)
			}
			d, _ := out["data"].(map[string]any)
			return d
		}
		return out
	}
	sb := call(base+"/deerflow/api/sandboxes", map[string]any{"sandbox_id": "sbx-paths", "thread_id": "t1", "user_id": "u1"})
	url, _ := sb["sandbox_url"].(string)
	shell := func(command string) string {
		t.Helper()
		d := call(url+"/v1/shell/exec", map[string]any{"command": command, "no_change_timeout": 600})
		x, _ := d["x_sandgate"].(map[string]any)
		if d["status"] != "completed" || d["exit_code"] != float64(0) || x["sandbox_type"] != executor {
			t.Fatalf("%q: %v", command, d)
		}
		out, _ := d["output"].(string)
		return out
	}

	call(url+"/v1/file/write", map[string]any{"file": "/mnt/user-data/workspace/hello.py",
		"content": "import os, sys\nprint('hello from', os.getcwd(), sys.version_info[0])\n"})
	want := "hello from /mnt/user-data/workspace 3\n"
	if got := shell("cd /mnt/user-data/workspace && python hello.py"); got != want {
		t.Errorf("python hello.py: %q, want %q", got, want)
	}
	shell("cd /mnt/user-data/workspace && python hello.py > /mnt/user-data/outputs/result.txt")
	if d := call(url+"/v1/file/read", map[string]any{"file": "/mnt/user-data/outputs/result.txt"}); d["content"] != want {
		t.Errorf("read_file of the command's output: %v", d)
	}
	// DeerFlow's ls tool.
	ls := shell("find '/mnt/user-data/workspace' -maxdepth 2 \\( -type f -o -type d \\) 2>/dev/null | head -500")
	if !strings.Contains(ls, "/mnt/user-data/workspace/hello.py\n") {
		t.Errorf("find lists %q, want hello.py in it", ls)
	}
	// A command's file under the default cwd is the file API's too.
	shell("echo from-the-shell > notes.md")
	if d := call(url+"/v1/file/read", map[string]any{"file": "/mnt/user-data/workspace/notes.md"}); d["content"] != "from-the-shell\n" {
		t.Errorf("read_file of a file written in the default cwd: %v", d)
	}
}
