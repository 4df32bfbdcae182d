package gvisor

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/executortest"
)

// TestRunsUnderGVisorKernel: from inside, the kernel is gVisor's, not the
// host's. A gvisor executor that fell back to runc (an engine that maps
// the runtime name to runc, say) fails here.
func TestRunsUnderGVisorKernel(t *testing.T) {
	e := newTestExecutor(t)
	res := execute(t, e, spec(t, executors.LangBash, "cat /proc/version; uname -r; dmesg 2>&1 | head -n 1\n"))
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	if res.ExitCode != 0 || len(lines) != 3 {
		t.Fatalf("exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	version, release, dmesg := lines[0], lines[1], lines[2]
	if !strings.Contains(version, "gvisor") || !strings.HasSuffix(release, "-gvisor") {
		t.Errorf("/proc/version %q, uname -r %q: not gVisor's kernel", version, release)
	}
	if host, err := exec.Command("uname", "-r").Output(); err == nil && strings.TrimSpace(string(host)) == release {
		t.Errorf("uname -r %q is the host's kernel", release)
	}
	// The kernel log is gVisor's boot banner, or, with the container's
	// seccomp profile applied inside the sandbox (runsc --oci-seccomp, as
	// scripts/dockerd.sh registers it), not readable at all, as under runc
	// without CAP_SYSLOG. The host's log is never readable.
	if !strings.Contains(dmesg, "Starting gVisor") && !strings.Contains(dmesg, "Operation not permitted") {
		t.Errorf("dmesg %q: neither gVisor's log nor refused", dmesg)
	}
}

// TestContainersUseRunsc: the engine itself says the containers run under
// runsc and carry the gvisor label (what the reaper and operators filter
// on). A warm container is inspected, since it outlives its run.
func TestContainersUseRunsc(t *testing.T) {
	instance := "test-" + executortest.Nonce()
	e := newTestExecutor(t, func(c *Config) { c.Instance = instance })
	execute(t, e, spec(t, executors.LangPython, "print(1)"))
	// The warm container may be replaced between listing and inspecting
	// it (its successor is started when a run ends): inspect what is
	// listed until one answers.
	var out []byte
	for range 300 {
		for _, id := range instanceContainers(t, instance) {
			o, err := exec.Command("docker", "inspect", "--format", "{{.HostConfig.Runtime}} {{.HostConfig.NetworkMode}}", id).Output()
			if err == nil {
				out = o
				break
			}
		}
		if out != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if out == nil {
		t.Fatal("no warm container could be inspected after the session's run")
	}
	if got := strings.TrimSpace(string(out)); got != "runsc none" {
		t.Errorf("runtime and network %q, want %q", got, "runsc none")
	}
}
