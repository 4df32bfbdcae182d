package docker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/executortest"
)

// The isolation a run gets, checked from inside the container.

func TestIsolationHostLoopbackUnreachable(t *testing.T) {
	e := newTestExecutor(t, shippedWarmAfter)
	port, accepted := executortest.LoopbackListener(t)
	code := fmt.Sprintf(`import socket
s = socket.socket()
s.settimeout(3)
try:
    s.connect(("127.0.0.1", %d))
    print("connected")
except OSError as e:
    print("refused", type(e).__name__)
`, port)
	res := execute(t, e, spec(t, executors.LangPython, code))
	if !strings.HasPrefix(res.Stdout, "refused") || accepted() != 0 {
		t.Fatalf("stdout %q stderr %q, accepted %d: the host's loopback listener was reachable", res.Stdout, res.Stderr, accepted())
	}
}

func TestIsolationOnlyLoopbackInterface(t *testing.T) {
	e := newTestExecutor(t, shippedWarmAfter)
	res := execute(t, e, spec(t, executors.LangBash, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '\n"))
	if res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != "lo" {
		t.Fatalf("interfaces %q (stderr %q), want only lo", res.Stdout, res.Stderr)
	}
	// And so no name can be looked up either.
	res = execute(t, e, spec(t, executors.LangPython, `import socket
try:
    socket.getaddrinfo("example.com", 80)
    print("resolved")
except OSError:
    print("no-lookup")
`))
	if strings.TrimSpace(res.Stdout) != "no-lookup" {
		t.Fatalf("name lookup: %q %q", res.Stdout, res.Stderr)
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
	// Count how far forking gets: the pids cgroup stops it below the limit.
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
	s.Timeout = 30 * time.Second
	res := execute(t, e, s)
	f := strings.Fields(res.Stdout)
	if len(f) != 3 || f[0] != "stopped" {
		t.Fatalf("stdout %q stderr %q", res.Stdout, res.Stderr)
	}
	if n, _ := strconv.Atoi(f[1]); n >= 64 {
		t.Fatalf("forked %d processes under a limit of 64", n)
	}
	// A classic bash fork bomb: contained, killed at its timeout, and the
	// host can still start processes.
	s = spec(t, executors.LangBash, ":(){ :|:& };:\nsleep 100\n")
	s.Timeout = 3 * time.Second
	res = execute(t, e, s)
	if !res.TimedOut && res.ExitCode == 0 {
		t.Fatalf("fork bomb result %+v", res)
	}
	if err := runHostProcess("true"); err != nil {
		t.Fatalf("host cannot start a process after the bomb: %v", err)
	}
}

func runHostProcess(name string) error {
	p, err := os.StartProcess("/bin/"+name, []string{name}, &os.ProcAttr{})
	if err != nil {
		return err
	}
	_, err = p.Wait()
	return err
}

func TestIsolationFilesystem(t *testing.T) {
	e := newTestExecutor(t, shippedWarmAfter)
	s := spec(t, executors.LangBash, `touch /evil 2>/dev/null && echo root-writable || echo root-readonly
touch /usr/evil 2>/dev/null && echo usr-writable || echo usr-readonly
echo data > /tmp/t && echo tmp-writable
echo hello > /workspace/made-inside.txt && echo workspace-writable
`)
	res := execute(t, e, s)
	want := "root-readonly\nusr-readonly\ntmp-writable\nworkspace-writable\n"
	if res.Stdout != want {
		t.Fatalf("stdout %q stderr %q, want %q", res.Stdout, res.Stderr, want)
	}
	// What the container wrote belongs to the run's identity and is
	// usable from the host (the workspace API) afterwards.
	fi, err := os.Stat(filepath.Join(s.WorkspaceDir, "made-inside.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != DefaultSandboxID {
		t.Errorf("file owned by uid %d, want the run's uid %d", st.Uid, DefaultSandboxID)
	}
	if b, err := os.ReadFile(filepath.Join(s.WorkspaceDir, "made-inside.txt")); err != nil || string(b) != "hello\n" {
		t.Errorf("read back %q %v", b, err)
	}
	// Writes over the tmpfs cap fail instead of eating memory.
	s = spec(t, executors.LangBash, "head -c 100M /dev/zero > /tmp/big 2>/dev/null && echo fits || echo capped\n")
	res = execute(t, e, s)
	if strings.TrimSpace(res.Stdout) != "capped" {
		t.Errorf("tmpfs cap: %q %q", res.Stdout, res.Stderr)
	}
}

func TestIsolationIdentityAndCapabilities(t *testing.T) {
	e := newTestExecutor(t, shippedWarmAfter)
	s := spec(t, executors.LangBash, "id -u; id -g; id -G; grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status\n")
	s.UID, s.GID = 3_100_001, 3_100_001
	res := execute(t, e, s)
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	if len(lines) < 7 {
		t.Fatalf("stdout %q stderr %q", res.Stdout, res.Stderr)
	}
	if lines[0] != "3100001" || lines[1] != "3100001" || lines[2] != "3100001" {
		t.Errorf("ids %q, want the session's uid and gid and no other group", lines[:3])
	}
	fields := map[string]string{}
	for _, l := range lines[3:] {
		k, v, _ := strings.Cut(l, ":")
		fields[k] = strings.TrimSpace(v)
	}
	for k, want := range map[string]string{
		"CapEff": "0000000000000000", "CapPrm": "0000000000000000", "CapBnd": "0000000000000000",
		"NoNewPrivs": "1", "Seccomp": "2",
	} {
		if fields[k] != want {
			t.Errorf("%s = %q, want %q", k, fields[k], want)
		}
	}
}

func TestRefusesRoot(t *testing.T) {
	e := newTestExecutor(t, shippedWarmAfter)
	for _, ids := range [][2]int{{0, 5}, {5, 0}, {-1, -1}} {
		s := spec(t, executors.LangPython, "print(1)")
		s.UID, s.GID = ids[0], ids[1]
		if _, err := e.Execute(t.Context(), s); !errors.Is(err, executors.ErrRootIdentity) {
			t.Errorf("uid %d gid %d: err %v, want ErrRootIdentity", ids[0], ids[1], err)
		}
	}
}

func TestLargeCodeAndQuoting(t *testing.T) {
	e := newTestExecutor(t, shippedWarmAfter)
	// 256 KiB of program text full of quotes, dollars and backslashes that
	// a shell would mangle.
	pad := strings.Repeat("# '\"$(touch /workspace/pwned)`x` \\ \n", 256<<10/40)
	code := pad + "print('tail-ok', len(open(__file__).read()))\n"
	res := execute(t, e, spec(t, executors.LangPython, code))
	if res.Stdout != fmt.Sprintf("tail-ok %d\n", len(code)) {
		t.Fatalf("stdout %q stderr %q", res.Stdout, res.Stderr[:min(len(res.Stderr), 500)])
	}
	code = "echo \"it's $((6*7))\" '$HOME' \"$HOME\"\n"
	res = execute(t, e, spec(t, executors.LangBash, code))
	if res.Stdout != "it's 42 $HOME /workspace\n" {
		t.Fatalf("stdout %q", res.Stdout)
	}
}

// TestSpillIgnoresPlantedLinks: code that replaces .sandgate/outputs with
// a symlink out of the workspace cannot make the gateway write there.
func TestSpillIgnoresPlantedLinks(t *testing.T) {
	e := newTestExecutor(t, shippedWarmAfter)
	outside := t.TempDir()
	s := spec(t, executors.LangPython, fmt.Sprintf(`import os, sys
os.makedirs(".sandgate", exist_ok=True)
os.symlink(%q, ".sandgate/outputs")
sys.stdout.write("y" * 5000)
`, outside))
	s.Limits.MaxOutputBytes = 1000
	res := execute(t, e, s)
	if !res.Truncated || res.OutputPath == "" {
		t.Fatalf("result %+v (stderr %q)", res, res.Stderr)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("the spill followed the planted link: %v", entries)
	}
	fi, err := os.Lstat(filepath.Join(s.WorkspaceDir, ".sandgate", "outputs", s.RequestID+".log"))
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != 5000 {
		t.Fatalf("spill file: %v %v", fi, err)
	}
}
