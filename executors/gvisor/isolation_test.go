package gvisor

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/docker"
	"github.com/sandgate/sandgate/executors/executortest"
)

// The isolation checks the docker executor passes, under runsc. The
// network and host-file checks are the conformance suite's (NoNetwork,
// HostFilesInvisible).

func TestIsolationOnlyLoopbackInterface(t *testing.T) {
	e := newTestExecutor(t, shippedWarmAfter)
	res := execute(t, e, spec(t, executors.LangBash, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '\n"))
	if res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != "lo" {
		t.Fatalf("interfaces %q (stderr %q), want only lo", res.Stdout, res.Stderr)
	}
}

func TestIsolationIdentityAndCapabilities(t *testing.T) {
	e := newTestExecutor(t, shippedWarmAfter)
	s := spec(t, executors.LangBash, "id -u; id -g; id -G; grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status\n")
	s.UID, s.GID = 3_700_001, 3_700_001
	res := execute(t, e, s)
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	if len(lines) < 7 {
		t.Fatalf("stdout %q stderr %q", res.Stdout, res.Stderr)
	}
	if lines[0] != "3700001" || lines[1] != "3700001" || lines[2] != "3700001" {
		t.Errorf("ids %q, want the session's uid and gid and no other group", lines[:3])
	}
	fields := map[string]string{}
	for _, l := range lines[3:] {
		k, v, _ := strings.Cut(l, ":")
		fields[k] = strings.TrimSpace(v)
	}
	// No Seccomp line: the container's profile is not applied inside the
	// sandbox (see TestThreadsStart); the code's system calls reach
	// gVisor's kernel, not the host's.
	for k, want := range map[string]string{
		"CapEff": "0000000000000000", "CapPrm": "0000000000000000", "CapBnd": "0000000000000000",
		"NoNewPrivs": "1",
	} {
		if fields[k] != want {
			t.Errorf("%s = %q, want %q", k, fields[k], want)
		}
	}
}

func TestIsolationFilesystem(t *testing.T) {
	e := newTestExecutor(t, shippedWarmAfter)
	res := execute(t, e, spec(t, executors.LangBash, `touch /evil 2>/dev/null && echo root-writable || echo root-readonly
touch /usr/evil 2>/dev/null && echo usr-writable || echo usr-readonly
echo data > /tmp/t && echo tmp-writable
head -c 100M /dev/zero > /tmp/big 2>/dev/null && echo tmp-uncapped || echo tmp-capped
`))
	if want := "root-readonly\nusr-readonly\ntmp-writable\ntmp-capped\n"; res.Stdout != want {
		t.Fatalf("stdout %q stderr %q, want %q", res.Stdout, res.Stderr, want)
	}
}

func TestIsolationMemoryLimitKillsAndReports(t *testing.T) {
	e := newTestExecutor(t, shippedWarmAfter)
	s := spec(t, executors.LangPython, "b = b'x' * (2 << 30)\nprint('allocated', len(b))\n")
	s.Limits.MemoryMB = 256
	res := execute(t, e, s)
	if !res.OOMKilled || res.ExitCode != 137 || strings.Contains(res.Stdout, "allocated") {
		t.Fatalf("result %+v: want the memory limit to kill the run and say so", res)
	}
}

func TestIsolationForkBombContained(t *testing.T) {
	e := newTestExecutor(t, shippedWarmAfter)
	s := spec(t, executors.LangPython, `import os, time
n = 0
try:
    while True:
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
        n += 1
except OSError as e:
    print("stopped", n, type(e).__name__)
`)
	s.Limits.MaxProcs = 64
	res := execute(t, e, s)
	f := strings.Fields(res.Stdout)
	if len(f) != 3 || f[0] != "stopped" {
		t.Fatalf("stdout %q stderr %q", res.Stdout, res.Stderr)
	}
	if n, _ := strconv.Atoi(f[1]); n >= 64 {
		t.Fatalf("forked %d processes under a limit of 64", n)
	}
	s = spec(t, executors.LangBash, ":(){ :|:& };:\nsleep 100\n")
	s.Timeout = 3 * time.Second
	res = execute(t, e, s)
	if !res.TimedOut && res.ExitCode == 0 {
		t.Fatalf("fork bomb result %+v", res)
	}
	p, err := os.StartProcess("/bin/true", []string{"true"}, &os.ProcAttr{})
	if err != nil {
		t.Fatalf("host cannot start a process after the bomb: %v", err)
	}
	_, _ = p.Wait()
}

// TestUnavailableWithoutRuntime: an engine that does not list the runtime
// makes the executor unavailable with that reason, and a run is refused
// (never run under the engine's default runtime).
func TestUnavailableWithoutRuntime(t *testing.T) {
	needEngine(t)
	rt := "runsc-absent-" + executortest.Nonce()
	e, err := New(t.Context(), Config{Pool: noPool, Instance: "test-" + executortest.Nonce(), Runtime: rt, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(t.Context()) })
	err = e.Available(t.Context())
	var ue *executors.UnavailableError
	if !errors.As(err, &ue) || !errors.Is(err, docker.ErrRuntimeMissing) || ue.Kind != executors.KindGVisor ||
		!strings.Contains(ue.Reason, rt) {
		t.Fatalf("Available: %v, want gvisor unavailable naming runtime %s", err, rt)
	}
	s := spec(t, executors.LangBash, "echo ran > /workspace/ran.txt")
	if _, err := e.Execute(t.Context(), s); !errors.Is(err, executors.ErrUnavailable) {
		t.Fatalf("Execute: %v, want ErrUnavailable", err)
	}
	if _, err := os.Stat(s.WorkspaceDir + "/ran.txt"); err == nil {
		t.Fatal("the run ran without its runtime")
	}
}

// TestThreadsStart: threaded programs run. It fails when runsc is
// registered with --oci-seccomp: runsc then applies Docker's default
// profile inside the sandbox but ignores its errnoRet, so clone3 fails
// with EPERM instead of ENOSYS and glibc never falls back to clone.
func TestThreadsStart(t *testing.T) {
	e := newTestExecutor(t, shippedWarmAfter)
	res := execute(t, e, spec(t, executors.LangPython, `import threading
out = []
ts = [threading.Thread(target=out.append, args=(i,)) for i in range(8)]
for th in ts: th.start()
for th in ts: th.join()
print(len(out))
`))
	if res.ExitCode != 0 || res.Stdout != "8\n" {
		t.Fatalf("exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
}
