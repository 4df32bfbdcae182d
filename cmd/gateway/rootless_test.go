package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// rootlessUser is the unprivileged account the gateway is started as.
const rootlessUser = "sandgate-rootless"

// TestGatewayAsNonRootUser starts the real gateway binary as an
// unprivileged user (created when missing), in PERMISSIVE so that code
// that is not proven SAFE runs in the subprocess executor too, and checks
// over HTTP that SAFE Python runs, and that a run has its own PID
// namespace, the minimal root and no network (a listener on the host's
// 127.0.0.1 stays unreachable). It needs root to create the user and drop
// to it; make test sets SANDGATE_REQUIRE_ROOT=1 so it cannot skip there.
func TestGatewayAsNonRootUser(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("SANDGATE_REQUIRE_ROOT") == "1" {
			t.Fatal("SANDGATE_REQUIRE_ROOT=1 but not running as root")
		}
		t.Skip("needs root to create an unprivileged user and drop to it")
	}
	ensureUser(t, rootlessUser)
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := gatewayBinary(t)
	data := filepath.Join(dir, "data")
	cfg := filepath.Join(dir, "config.yaml")
	yaml := "executors:\n  subprocess:\n    enabled: true\n    root_dir: \"" + os.Getenv("SANDGATE_RUNTIME_ROOT") + "\"\n  docker:\n    enabled: false\n  aio:\n    enabled: false\n" +
		testPolicyYAML
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	run := exec.Command("setpriv", "--reuid", rootlessUser, "--regid", rootlessUser,
		"--clear-groups", "--", bin, "--config", cfg, "--listen", "127.0.0.1:0", "--mode", "PERMISSIVE", "--data-dir", data)
	run.Dir = dir
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("chown", rootlessUser+":"+rootlessUser, data).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v: %s", err, out)
	}
	run.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SANDGATE_AGENT_TOKEN=agent-rootless-token",
		"SANDGATE_APPROVER_TOKEN=approver-rootless-token", "SANDGATE_ADMIN_TOKEN=admin-rootless-token"}
	base, logs := startAndWait(t, run)
	defer func() {
		if t.Failed() {
			t.Logf("gateway logs:\n%s", logs.String())
		}
	}()

	if out := postRun(t, base, "print(6*7)"); out["stdout"] != "42\n" || out["sandbox_type"] != "subprocess" {
		t.Fatalf("SAFE print(6*7): %v", out)
	}
	// Code that is LOW, not MEDIUM (no socket import), so PERMISSIVE keeps
	// it in the subprocess executor: the interfaces it has come from
	// /proc/net/dev (the conformance suite connects to a listener).
	code := fmt.Sprintf(`import os
print(sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
print(os.getcwd(), sorted(os.listdir("/home")) if os.path.isdir("/home") else [], os.path.exists(%q))
print([l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:]])
`, dir)
	out := postRun(t, base, code)
	// No host /home: the runtime root's, as in a container on its image,
	// which holds only the empty mount points of the E2B and Daytona
	// layouts (executors.LayoutRoots), or none (no runtime root).
	home := "[]"
	if os.Getenv("SANDGATE_RUNTIME_ROOT") != "" {
		home = "['daytona', 'user']"
	}
	want := "[1, 2]\n/workspace " + home + " False\n['lo']\n"
	if out["stdout"] != want || out["sandbox_type"] != "subprocess" {
		t.Errorf("isolation as %s: stdout %q stderr %q (%v), want %q", rootlessUser, out["stdout"], out["stderr"], out["sandbox_type"], want)
	}
}

// ensureUser creates a system user with its own group when missing.
func ensureUser(t *testing.T, name string) {
	t.Helper()
	if exec.Command("id", "-u", name).Run() == nil {
		return
	}
	out, err := exec.Command("useradd", "--system", "--user-group", "--no-create-home",
		"--shell", "/usr/sbin/nologin", name).CombinedOutput()
	if err != nil {
		t.Fatalf("useradd %s: %v: %s", name, err, out)
	}
}

// startAndWait starts the gateway and returns its base URL from the
// banner. The test's cleanup stops it with SIGINT, so that it shuts down as
// under a service manager and removes its containers: cmd must not be an
// exec.CommandContext of t.Context(), which is cancelled (SIGKILL) before
// the cleanups run. Such a gateway left its aio instance running in CI.
func startAndWait(t *testing.T, cmd *exec.Cmd) (string, *syncBuf) {
	t.Helper()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuf{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	})
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := bannerRe.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case base := <-found:
		return base, logs
	case <-time.After(60 * time.Second):
		t.Fatalf("no banner from the gateway; logs:\n%s", logs.String())
	}
	return "", logs
}

func postRun(t *testing.T, base, code string) map[string]any {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"code": code, "language": "python"})
	req, _ := http.NewRequest("POST", base+"/v1/sessions/rootless/run_code", strings.NewReader(string(body)))
	req.Header.Set("Authorization", "Bearer agent-rootless-token")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil || res.StatusCode != 200 {
		t.Fatalf("run_code: %d %v %v", res.StatusCode, out, err)
	}
	return out
}
