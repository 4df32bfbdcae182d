package docker

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// bootStubs are the commands the boot script runs, stood in for on the
// host: socat binds (marks the forwarder listening) only after a second;
// grep is the readiness check's, true once socat has bound; each
// interpreter says whether the forwarder listened when it started.
var bootStubs = map[string]string{
	"socat": `echo socat >>"$STUB/log"; sleep 1; : >"$STUB/listening"; exec sleep 600`,
	"grep":  `[ -e "$STUB/listening" ]`,
	"interpreter": `if [ -e "$STUB/listening" ]; then echo "forwarder listening at start"; else echo "forwarder not listening at start"; fi
echo "argv $(basename "$0") $*"`,
}

// TestBootScriptWaitsForTheForwarder runs the container's boot script on
// the host's /bin/sh with stubs, for each language, granted network and
// not: a granted run's program starts only once the forwarder listens
// (the check was skipped in every run while it read "$2" after the script
// had replaced its arguments), and a run not granted starts no forwarder.
// The relay script (gVisor) is not run here: it kills every process it
// can see once the program ends. It carries the same egress text, which
// the last case checks.
func TestBootScriptWaitsForTheForwarder(t *testing.T) {
	for _, tc := range []struct {
		lang, grant, want string
		socat             bool
	}{
		{"python", "egress", "forwarder listening at start\nargv python3 -I -u", true},
		{"bash", "egress", "forwarder listening at start\nargv bash --noprofile --norc", true},
		{"javascript", "egress", "forwarder listening at start\nargv node --max-old-space-size=512", true},
		{"bash", "-", "forwarder not listening at start\nargv bash --noprofile --norc", false},
	} {
		t.Run(tc.lang+"/"+tc.grant, func(t *testing.T) {
			out, log := runBootScript(t, tc.lang, tc.grant)
			if !strings.Contains(out, tc.want) {
				t.Errorf("the program's output %q lacks %q", out, tc.want)
			}
			if !strings.Contains(out, "\x00\x1esandgate-exit:0\x1e\x00") {
				t.Errorf("no exit trailer for status 0 in %q", out)
			}
			if started := strings.Contains(log, "socat"); started != tc.socat {
				t.Errorf("forwarder started: %v, want %v", started, tc.socat)
			}
		})
	}
	t.Run("relay carries the same egress part", func(t *testing.T) {
		for _, part := range []string{egressScriptStart, egressScriptReady} {
			if strings.Count(bootScriptRelayEgress, part) != 1 {
				t.Errorf("the relay boot script lacks %q", part)
			}
		}
	})
}

// runBootScript runs bootScriptEgress with its /run/sandgate paths moved
// into a temporary directory, the stubs first on PATH, and the program
// on stdin; it returns the script's stdout and the stubs' log. The
// forwarder loop the script leaves in the background is killed with its
// process group.
func runBootScript(t *testing.T, lang, grant string) (stdout, log string) {
	t.Helper()
	tmp := t.TempDir()
	stub := filepath.Join(tmp, "stub")
	for _, dir := range []string{stub, filepath.Join(tmp, "code"), filepath.Join(tmp, "egress")} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, body := range bootStubs {
		names := []string{name}
		if name == "interpreter" {
			names = []string{"python3", "bash", "node"}
		}
		for _, n := range names {
			if err := os.WriteFile(filepath.Join(stub, n), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	script := strings.ReplaceAll(bootScriptEgress, "/run/sandgate/", tmp+"/")
	cmd := exec.Command("/bin/sh", "-c", script, bootArg0, "512", grant)
	cmd.Env = []string{"PATH=" + stub + ":/usr/bin:/bin", "STUB=" + stub}
	cmd.Stdin = strings.NewReader(lang + " run1\nprint(1)\n")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err := cmd.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	if err := cmd.Wait(); err != nil {
		t.Fatalf("boot script: %v\n%s", err, out.String())
	}
	b, err := os.ReadFile(filepath.Join(stub, "log"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return out.String(), string(b)
}
