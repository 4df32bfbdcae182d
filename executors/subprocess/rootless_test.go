package subprocess

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// rootlessUser is the unprivileged account TestRootlessConformance runs
// the suite as; it is created when missing.
const rootlessUser = "sandgate-rootless"

// rootlessChildEnv marks the unprivileged re-run, which must not recurse.
const rootlessChildEnv = "SANDGATE_ROOTLESS_CHILD"

// TestRootlessConformance proves what a gateway that is not root gets: it
// runs this package's conformance suite again as an unprivileged user
// (created if missing, no supplementary groups), so the executor must
// reach the same environment through user namespaces. The zygote mode
// needs root and is skipped there; cold and warm must pass.
func TestRootlessConformance(t *testing.T) {
	if os.Getenv(rootlessChildEnv) != "" {
		t.Skip("this is the unprivileged run")
	}
	requireRoot(t)
	if _, err := exec.Command("id", "-u", rootlessUser).Output(); err != nil {
		out, err := exec.Command("useradd", "--system", "--user-group", "--no-create-home",
			"--shell", "/usr/sbin/nologin", rootlessUser).CombinedOutput()
		if err != nil {
			t.Fatalf("useradd: %v: %s", err, out)
		}
	}
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "subprocess.test")
	copyFile(t, os.Args[0], bin)
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o1777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tmp, 0o1777); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), "setpriv", "--reuid", rootlessUser, "--regid", rootlessUser,
		"--clear-groups", "--", bin, "-test.run", "^TestConformance$", "-test.v", "-test.count=1")
	cmd.Dir = tmp
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "TMPDIR=" + tmp, rootlessChildEnv + "=1",
		"SANDGATE_RUNTIME_ROOT=" + runtimeRoot(t)}
	out, err := cmd.CombinedOutput()
	text := string(out)
	if err != nil {
		t.Fatalf("the suite as %s failed: %v\n%s", rootlessUser, err, tail(text, 400))
	}
	root := runtimeRoot(t)
	if root == "" {
		root = "/"
	}
	_, socatErr := lookPath(root, "socat", DefaultToolPATH)
	for _, mode := range []string{"cold", "warm"} {
		if !strings.Contains(text, "--- PASS: TestConformance/"+mode+" ") {
			t.Errorf("TestConformance/%s did not pass as %s:\n%s", mode, rootlessUser, tail(text, 400))
		}
		// With socat in the root the egress bridge works without root:
		// its cases must have run, not checked a refusal.
		ran := strings.Contains(text, "--- PASS: TestConformance/"+mode+"/Egress/bash/ca ")
		if socatErr == nil && !ran {
			t.Errorf("the egress cases did not run as %s (%s mode)", rootlessUser, mode)
		}
	}
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
