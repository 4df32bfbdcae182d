// Package scripts holds the tests of the shell scripts beside it.
package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDockerdStartWaitsForASlowExec: scripts/dockerd.sh start must not
// report "exited during start-up" while the engine it launched has not
// exec'd dockerd yet (its comm still setsid's). The fault soak of issue 21
// restarts a private engine and hit exactly that on a loaded machine.
// The engine is a stand-in (testdata/slowexec/dockerd answers /_ping) on
// a socket, state and log of the test's own.
func TestDockerdStartWaitsForASlowExec(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("SANDGATE_REQUIRE_ROOT") == "1" {
			t.Fatal("SANDGATE_REQUIRE_ROOT=1 but not running as root")
		}
		t.Skip("dockerd.sh starts an engine only as root")
	}
	for _, tool := range []string{"python3", "curl", "flock"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	fake, err := filepath.Abs("testdata/slowexec")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	env := append(os.Environ(),
		"PATH="+fake+":"+os.Getenv("PATH"),
		"SANDGATE_DOCKERD_STATE="+filepath.Join(dir, "state"),
		"SANDGATE_DOCKERD_SOCK="+filepath.Join(dir, "docker.sock"),
		"SANDGATE_DOCKERD_LOG="+filepath.Join(dir, "dockerd.log"),
		"SANDGATE_DOCKERD_SYSTEM_CONFIG="+filepath.Join(dir, "absent.json"),
		"SANDGATE_RUNSC="+filepath.Join(dir, "no-runsc"),
		"SANDGATE_DOCKERD_WAIT=20",
	)
	run := func(verb string) (string, error) {
		cmd := exec.Command("./dockerd.sh", verb, "1") // holder: init, alive throughout
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	t.Cleanup(func() { _, _ = run("stop") })
	out, err := run("start")
	if err != nil || !strings.Contains(out, "dockerd: ready") {
		t.Fatalf("start: %v\n%s", err, out)
	}
	out, err = run("stop")
	if err != nil || !strings.Contains(out, "stopping pid") {
		t.Fatalf("stop: %v\n%s", err, out)
	}
}
