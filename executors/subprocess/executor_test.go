package subprocess

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/executortest"
)

// TestMain doubles as a fake gateway process for TestTreeDiesWithGateway
// (the os/exec helper-process pattern).
func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "gateway":
		os.Exit(helperGateway())
	case "gateway-warm":
		os.Exit(helperGatewayWarm())
	}
	flag.Parse()
	if os.Geteuid() == 0 && os.Getenv(rootlessChildEnv) == "" && selected("TestRootlessConformance") {
		started.run = startRootless()
	}
	code := m.Run()
	if r := takeRootless(); r != nil {
		r.stop()
	}
	os.Exit(code)
}

const helperEnv = "SANDGATE_SUBPROCESS_TEST_HELPER"

// helperGateway runs one long sleep through the executor and never returns
// on its own: the test kills it.
func helperGateway() int {
	ctx := context.Background()
	e, err := New(ctx, Config{})
	if err == nil && e.Isolation() == IsolationNone {
		return 2
	}
	if err != nil {
		return 2
	}
	_, err = e.Execute(ctx, executors.Spec{
		RequestID: "helper", Language: executors.LangBash,
		Code:    "setsid sleep " + os.Getenv("HELPER_MARKER") + " &\nsleep 1000\n",
		Timeout: time.Minute, WorkspaceDir: os.Getenv("HELPER_WS"),
	})
	if err != nil {
		return 3
	}
	return 0
}

// TestTreeDiesWithGateway: when the gateway process dies (SIGKILL, no
// chance to clean up), the kernel kills the run's whole tree (Pdeathsig on
// the PID namespace's init).
func TestTreeDiesWithGateway(t *testing.T) {
	requireRoot(t)
	marker := "1000.7" + executortest.Nonce()[:6]
	marker = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'f' {
			return r - 'a' + '0'
		}
		return r
	}, marker)
	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), helperEnv+"=gateway", "HELPER_MARKER="+marker,
		"HELPER_WS="+executortest.NewWorkspace(t))
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for len(executortest.ProcessesMatching(marker)) == 0 {
		if time.Now().After(deadline) {
			helper.Process.Kill()
			helper.Wait()
			t.Fatal("the helper's sandboxed sleep never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := helper.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	helper.Wait()
	deadline = time.Now().Add(3 * time.Second)
	for len(executortest.ProcessesMatching(marker)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("sandboxed processes %v outlived the gateway", executortest.ProcessesMatching(marker))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestMissingInterpreter(t *testing.T) {
	e := newTestExecutor(t, func(c *Config) {
		c.Interpreters = map[string]string{executors.LangJavaScript: "sandgate-no-such-node"}
	})
	err := e.Available(t.Context())
	if !errors.Is(err, executors.ErrUnavailable) || !strings.Contains(err.Error(), "sandgate-no-such-node") {
		t.Errorf("Available: %v, want ErrUnavailable naming the interpreter", err)
	}
	var ue *executors.UnavailableError
	if !errors.As(err, &ue) || ue.Kind != executors.KindSubprocess {
		t.Errorf("Available: %v, want an *executors.UnavailableError", err)
	}
	_, err = e.Execute(t.Context(), executors.Spec{Language: executors.LangJavaScript, Code: "1",
		WorkspaceDir: executortest.NewWorkspace(t)})
	if !errors.Is(err, executors.ErrUnavailable) {
		t.Errorf("Execute javascript: %v, want ErrUnavailable", err)
	}
	if res, _ := execute(t, e, executors.LangPython, "print('still fine')"); res.Stdout != "still fine\n" {
		t.Errorf("python with node missing: %+v", res)
	}
}

func TestSpecErrors(t *testing.T) {
	e := newTestExecutor(t)
	ws := executortest.NewWorkspace(t)
	link := filepath.Join(filepath.Dir(ws), "link")
	if err := os.Symlink(ws, link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		spec executors.Spec
		want error
	}{
		{"unsupported language", executors.Spec{Language: "cobol", WorkspaceDir: ws}, executors.ErrUnsupportedLanguage},
		{"bad request id", executors.Spec{Language: "python", RequestID: "../x", WorkspaceDir: ws}, executors.ErrInvalidRequestID},
		{"relative workspace", executors.Spec{Language: "python", WorkspaceDir: "ws"}, executors.ErrInvalidWorkspace},
		{"missing workspace", executors.Spec{Language: "python", WorkspaceDir: filepath.Join(ws, "nope")}, os.ErrNotExist},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.Execute(t.Context(), tc.spec)
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Errorf("Execute: %v, want %v", err, tc.want)
			}
		})
	}
	t.Run("symlinked workspace", func(t *testing.T) {
		requireRoot(t) // only the privileged chown refuses to follow it
		_, err := e.Execute(t.Context(), executors.Spec{Language: "python", Code: "1", WorkspaceDir: link})
		if !errors.Is(err, syscall.ELOOP) && !errors.Is(err, syscall.ENOTDIR) {
			t.Errorf("Execute: %v, want ELOOP or ENOTDIR (O_NOFOLLOW|O_DIRECTORY)", err)
		}
	})
}

// TestNoIsolationIsUnavailable: a host where neither namespaces nor user
// namespaces work gets an executor that says so in Available and runs
// nothing, never a weaker mode.
func TestNoIsolationIsUnavailable(t *testing.T) {
	e := newTestExecutor(t)
	e.cfg.Bwrap, e.cfg.Unshare = "/nonexistent/bwrap", "/nonexistent/unshare"
	e.chooseIsolation(t.Context())
	if e.Isolation() != IsolationNone {
		t.Fatalf("isolation %q without its launcher, want none", e.Isolation())
	}
	err := e.Available(t.Context())
	if !errors.Is(err, executors.ErrUnavailable) || !strings.Contains(err.Error(), "nonexistent") {
		t.Errorf("Available: %v, want ErrUnavailable naming the reason", err)
	}
	// The short reason /readyz shows names what is missing.
	var ue *executors.UnavailableError
	if !errors.As(err, &ue) || !strings.Contains(ue.Reason, "unshare") && !strings.Contains(ue.Reason, "bubblewrap") {
		t.Errorf("reason %q, want it to name the missing launcher", ue.Reason)
	}
	_, err = e.Execute(t.Context(), executors.Spec{Language: "python", Code: "1",
		WorkspaceDir: executortest.NewWorkspace(t)})
	if !errors.Is(err, executors.ErrUnavailable) {
		t.Errorf("Execute: %v, want ErrUnavailable", err)
	}
}

// TestLargeCode: 256 KiB of program text (twice the kernel's limit on one
// argv string) runs, and the code file does not stay in the workspace.
func TestLargeCode(t *testing.T) {
	e := newTestExecutor(t)
	for _, tc := range []struct{ lang, comment, tail string }{
		{executors.LangPython, "#", "print('big ok')"},
		{executors.LangBash, "#", "echo 'big ok'"},
		{executors.LangJavaScript, "//", "console.log('big ok')"},
	} {
		t.Run(tc.lang, func(t *testing.T) {
			line := tc.comment + strings.Repeat("x", 1000) + "\n"
			code := strings.Repeat(line, 256<<10/len(line)) + tc.tail + "\n"
			res, ws := execute(t, e, tc.lang, code, func(s *executors.Spec) { s.RequestID = "big" })
			if res.Stdout != "big ok\n" {
				t.Fatalf("stdout %q stderr %.200q", res.Stdout, res.Stderr)
			}
			left, _ := filepath.Glob(filepath.Join(ws, ".sandgate", "run", "*"))
			if len(left) > 0 {
				t.Errorf("code files left in the workspace: %v", left)
			}
		})
	}
}

// TestWorkspaceOwnership: the session directory itself (not its contents)
// is handed to the sandbox uid.
func TestWorkspaceOwnership(t *testing.T) {
	requireRoot(t)
	e := newTestExecutor(t)
	ws := executortest.NewWorkspace(t)
	keep := filepath.Join(ws, "root-file")
	if err := os.WriteFile(keep, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Execute(t.Context(), executors.Spec{Language: "bash", Code: "touch made", WorkspaceDir: ws}); err != nil {
		t.Fatal(err)
	}
	for path, uid := range map[string]int{ws: DefaultSandboxID, keep: 0, filepath.Join(ws, "made"): DefaultSandboxID} {
		fi, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := int(fi.Sys().(*syscall.Stat_t).Uid); got != uid {
			t.Errorf("%s owned by %d, want %d", path, got, uid)
		}
	}
}

// TestWorkspaceUnreachable: a workspace whose parent the sandbox uid cannot
// traverse is refused with a clear error instead of half-working.
func TestWorkspaceUnreachable(t *testing.T) {
	requireRoot(t)
	e := newTestExecutor(t)
	ws := t.TempDir() // parent is 0700 root
	_, err := e.Execute(t.Context(), executors.Spec{Language: "python", Code: "1", WorkspaceDir: ws})
	if !errors.Is(err, ErrWorkspaceUnreachable) {
		t.Errorf("Execute: %v, want ErrWorkspaceUnreachable", err)
	}
}

// TestNoDescriptorLeak: runs, including spilled and timed-out ones, leave
// no file descriptors behind in the gateway.
func TestNoDescriptorLeak(t *testing.T) {
	e := newTestExecutor(t)
	count := func() int {
		fds, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(fds)
	}
	runs := func() {
		execute(t, e, executors.LangPython, "print('x' * 5000)", func(s *executors.Spec) { s.Limits.MaxOutputBytes = 10 })
		execute(t, e, executors.LangBash, "sleep 5", func(s *executors.Spec) { s.Timeout = 100 * time.Millisecond })
	}
	runs() // warm up lazily opened descriptors (the spawner, the runtime's poller)
	before := count()
	for range 10 {
		runs()
	}
	if after := count(); after > before {
		t.Errorf("%d descriptors before, %d after 20 runs", before, after)
	}
}

// TestConcurrentRuns: runs in parallel keep their outputs apart.
func TestConcurrentRuns(t *testing.T) {
	e := newTestExecutor(t)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			want := fmt.Sprintf("run-%d\n", i)
			ws := executortest.NewWorkspace(t)
			res, err := e.Execute(t.Context(), executors.Spec{Language: executors.LangPython,
				Code: fmt.Sprintf("print('run-%d')", i), Timeout: 30 * time.Second, WorkspaceDir: ws})
			if err != nil || res.Stdout != want {
				t.Errorf("run %d: %+v %v", i, res, err)
			}
		})
	}
	wg.Wait()
}

// TestRuntimeRootKeptWhileInUse: a rebuild of the runtime root
// (scripts/images.sh) removes an old export only under an exclusive flock
// it gets without waiting. An executor holds a shared one on its root for
// its whole life, so the export it runs on cannot vanish under its runs;
// after Close the export can be removed.
func TestRuntimeRootKeptWhileInUse(t *testing.T) {
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("flock(1) not installed")
	}
	e := newTestExecutor(t)
	if e.sysRoot == "/" {
		t.Skip("no runtime root configured")
	}
	// The executor's lock was taken in New; one of this process's that
	// another executor holds (an earlier test's, not yet closed) is not
	// its.
	others := ownLocks(t, e.sysRoot) - 1
	tryLock := func() error { return exec.Command("flock", "-n", "-x", e.sysRoot, "true").Run() }
	if err := tryLock(); err == nil {
		t.Fatalf("an exclusive lock on %s was granted while the executor uses it", e.sysRoot)
	}
	if others < 0 {
		t.Fatalf("this process holds no lock on %s while the executor uses it", e.sysRoot)
	}
	if err := e.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Other packages' executors, in test processes running beside this
	// one, hold shared locks on the same export, so an exclusive lock may
	// still be refused: what Close must do is drop this process's.
	if n := ownLocks(t, e.sysRoot); n != others {
		t.Fatalf("this process holds %d locks on %s after Close, want %d", n, e.sysRoot, others)
	}
}

// ownLocks counts the flock(2) locks this process holds on path
// (/proc/locks: the owner's pid and the file's device:inode).
func ownLocks(t *testing.T, path string) int {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		// 1: FLOCK ADVISORY READ 1234 fe:00:745653 0 EOF
		if len(f) >= 6 && f[1] == "FLOCK" && f[4] == fmt.Sprint(os.Getpid()) && strings.HasSuffix(f[5], fmt.Sprintf(":%d", st.Ino)) {
			n++
		}
	}
	return n
}
