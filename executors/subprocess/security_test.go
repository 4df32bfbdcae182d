package subprocess

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/executortest"
)

// TestForkBombContained: a fork bomb ends at its timeout (or NPROC) with
// nothing left over, while the test process keeps answering HTTP.
func TestForkBombContained(t *testing.T) {
	requireRoot(t) // in process-group mode NPROC would count the test's own uid
	bombs := []struct{ name, lang, code string }{
		{"bash", executors.LangBash, ":(){ :|:& };:\nsleep 10\n"},
		{"python", executors.LangPython, "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "ok")
	}))
	defer srv.Close()
	e := newTestExecutor(t)
	for i, b := range bombs {
		// A uid of its own, so that other packages' sandboxes running
		// at the same time (go test ./... runs packages in parallel) are
		// neither counted as leftovers nor share the bomb's NPROC budget.
		uid := 64_100 + i
		t.Run(b.name, func(t *testing.T) {
			stop := make(chan struct{})
			worst := make(chan time.Duration, 1)
			go func() { worst <- pollHTTP(srv.URL, stop) }()
			res, _ := execute(t, e, b.lang, b.code, func(s *executors.Spec) {
				s.Timeout, s.UID, s.GID = 4*time.Second, uid, uid
			})
			close(stop)
			d := <-worst
			t.Logf("slowest HTTP answer during the bomb: %v", d)
			if d > 2*time.Second {
				t.Errorf("the test's HTTP handler took %v to answer during the bomb", d)
			}
			if res.Duration > 6*time.Second {
				t.Errorf("the bomb ran %v, past its 4s timeout", res.Duration)
			}
			if left := waitUIDGone(strconv.Itoa(uid), 3*time.Second); len(left) > 0 {
				t.Errorf("%d sandbox processes left after the bomb", len(left))
			}
		})
	}
}

// pollHTTP GETs url every 100ms until stop and returns the slowest answer.
func pollHTTP(url string, stop <-chan struct{}) time.Duration {
	var worst time.Duration
	client := &http.Client{Timeout: 10 * time.Second}
	for {
		select {
		case <-stop:
			return worst
		case <-time.After(100 * time.Millisecond):
		}
		began := time.Now()
		resp, err := client.Get(url)
		d := time.Since(began)
		if err != nil {
			d = time.Hour
		} else {
			resp.Body.Close()
		}
		worst = max(worst, d)
	}
}

func waitUIDGone(uid string, grace time.Duration) []string {
	deadline := time.Now().Add(grace)
	for {
		left := processesOfUID(uid)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestMemoryLimit: a 1 GiB allocation fails inside the default limit.
func TestMemoryLimit(t *testing.T) {
	e := newTestExecutor(t)
	res, _ := execute(t, e, executors.LangPython, "b = bytearray(1 << 30)\nprint('allocated')\n")
	if res.ExitCode == 0 || !strings.Contains(res.Stderr, "MemoryError") || strings.Contains(res.Stdout, "allocated") {
		t.Errorf("exit %d stdout %q stderr %q, want a MemoryError", res.ExitCode, res.Stdout, res.Stderr)
	}
}

// TestBackgroundJobsDieWithTheRun: nothing the code started outlives a
// run that ends normally.
func TestBackgroundJobsDieWithTheRun(t *testing.T) {
	requireRoot(t) // a setsid'd child escapes process-group mode
	marker := fmt.Sprintf("1000.%s1", strconv.Itoa(int(time.Now().UnixNano()%1e9)))
	e := newTestExecutor(t)
	code := fmt.Sprintf("sleep %s &\nsetsid sleep %s &\necho started\n", marker, marker)
	res, _ := execute(t, e, executors.LangBash, code)
	if res.ExitCode != 0 || res.Stdout != "started\n" {
		t.Fatalf("result %+v", res)
	}
	deadline := time.Now().Add(3 * time.Second)
	for len(executortest.ProcessesMatching(marker)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("background processes %v outlived the run", executortest.ProcessesMatching(marker))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestNoNetwork: a connect to a listener the test opened on 127.0.0.1
// fails, with Network=false and with Network=true (the egress bridge
// gives a run no interface but lo); with Network=true a CONNECT through
// the proxy on 127.0.0.1:3128, which routes to that listener, reaches it
// (the control that shows the test can tell).
func TestNoNetwork(t *testing.T) {
	requireRoot(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var mu sync.Mutex
	accepted := 0
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			accepted++
			mu.Unlock()
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	code := fmt.Sprintf(`import socket
try:
    socket.create_connection(("127.0.0.1", %d), timeout=3).close()
    print("connected")
except OSError as e:
    print("failed", e)
try:
    s = socket.create_connection(("127.0.0.1", 3128), timeout=3)
    s.sendall(b"CONNECT listener.test:80 HTTP/1.1\r\nHost: listener.test:80\r\n\r\n")
    print("proxy", s.recv(12).decode())
except OSError as e:
    print("no proxy", e)
`, port)
	proxy := executortest.NewTestProxy()
	proxy.Route("listener.test:80", ln.Addr().String())
	e := newTestExecutor(t)
	for _, tc := range []struct {
		network bool
		want    string
	}{{false, "failed"}, {true, "failed"}} {
		t.Run("network="+strconv.FormatBool(tc.network), func(t *testing.T) {
			res, _ := execute(t, e, executors.LangPython, code, func(s *executors.Spec) {
				if tc.network {
					s.Network, s.Egress = true, proxy
				}
			})
			wantProxy := map[bool]string{false: "no proxy", true: "proxy HTTP/1.1 200"}[tc.network]
			if !strings.HasPrefix(res.Stdout, tc.want) || !strings.Contains(res.Stdout, wantProxy) {
				t.Errorf("stdout %q stderr %q, want %q and %q", res.Stdout, res.Stderr, tc.want, wantProxy)
			}
		})
	}
	proxy.Wait()
	mu.Lock()
	defer mu.Unlock()
	if accepted != 1 {
		t.Errorf("listener accepted %d connections, want 1 (the control through the proxy)", accepted)
	}
}

// TestGatewayProcessInvisible: the code cannot see the gateway's (the test
// process's) /proc entry, let alone read its environment.
func TestGatewayProcessInvisible(t *testing.T) {
	requireRoot(t)
	t.Setenv("SANDGATE_TEST_SECRET", "secret-"+executortest.Nonce())
	code := fmt.Sprintf(`import os
pid = %d
print("visible" if os.path.exists(f"/proc/{pid}") else "invisible")
try:
    open(f"/proc/{pid}/environ", "rb").read()
    print("environ-readable")
except OSError as e:
    print("environ-unreadable", type(e).__name__)
print("pids", sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
`, os.Getpid())
	e := newTestExecutor(t)
	res, _ := execute(t, e, executors.LangPython, code)
	lines := strings.Split(res.Stdout, "\n")
	if len(lines) < 3 || lines[0] != "invisible" || !strings.HasPrefix(lines[1], "environ-unreadable") {
		t.Fatalf("stdout %q stderr %q", res.Stdout, res.Stderr)
	}
	if lines[2] != "pids [1, 2]" {
		t.Errorf("/proc shows %s, want only the run's own init and interpreter", lines[2])
	}
}

// TestRootOnlyFileUnreadable: a 0600 root file (a token, a config) in a
// directory the code can enter is unreadable; a 0644 file next to it is
// the control.
func TestRootOnlyFileUnreadable(t *testing.T) {
	requireRoot(t)
	dir := executortest.NewWorkspace(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(dir, "token")
	public := filepath.Join(dir, "public")
	if err := os.WriteFile(secret, []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(public, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	code := `for p in ["/workspace/public", "/workspace/token"]:
    try:
        print(open(p).read())
    except OSError as e:
        print(type(e).__name__)
`
	e := newTestExecutor(t)
	res, _ := execute(t, e, executors.LangPython, code, func(s *executors.Spec) { s.WorkspaceDir = dir })
	if res.Stdout != "hello\nPermissionError\n" {
		t.Errorf("stdout %q stderr %q, want the public file and a PermissionError", res.Stdout, res.Stderr)
	}
}

// TestNoNewPrivileges: the code runs with no_new_privs, as the sandbox uid
// when the gateway is root, with no supplementary groups.
func TestNoNewPrivileges(t *testing.T) {
	e := newTestExecutor(t)
	res, _ := execute(t, e, executors.LangBash, "grep -E '^(NoNewPrivs|Uid|Groups):' /proc/self/status\n")
	if !strings.Contains(res.Stdout, "NoNewPrivs:\t1") {
		t.Errorf("status %q, want NoNewPrivs 1", res.Stdout)
	}
	if os.Geteuid() == 0 {
		want := fmt.Sprintf("Uid:\t%d\t%d", DefaultSandboxID, DefaultSandboxID)
		if !strings.Contains(res.Stdout, want) || !hasEmptyGroups(res.Stdout) {
			t.Errorf("status %q, want %q and no groups", res.Stdout, want)
		}
	}
}

// TestSpillCannotEscape: the code owns the workspace and can plant
// .sandgate (or its outputs directory, or the log file itself) as a
// symlink or hard link to a place outside; the spill file must never be
// written there.
func TestSpillCannotEscape(t *testing.T) {
	flood := "import sys\nsys.stdout.write('y' * 5000)\n"
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, ws, outside, id string)
		code  string
	}{
		{"state dir symlink", func(t *testing.T, ws, outside, _ string) {
			mustSymlink(t, outside, filepath.Join(ws, ".sandgate"))
		}, flood},
		{"outputs dir symlink", func(t *testing.T, ws, outside, _ string) {
			mustMkdir(t, filepath.Join(ws, ".sandgate"))
			mustSymlink(t, outside, filepath.Join(ws, ".sandgate", "outputs"))
		}, flood},
		{"log file symlink", func(t *testing.T, ws, outside, id string) {
			mustMkdir(t, filepath.Join(ws, ".sandgate", "outputs"))
			mustSymlink(t, filepath.Join(outside, "victim"), filepath.Join(ws, ".sandgate", "outputs", id+".log"))
		}, flood},
		{"log file hard link", func(t *testing.T, ws, outside, id string) {
			mustMkdir(t, filepath.Join(ws, ".sandgate", "outputs"))
			if err := os.Link(filepath.Join(outside, "victim"), filepath.Join(ws, ".sandgate", "outputs", id+".log")); err != nil {
				t.Skipf("cannot hard-link across the temp dirs: %v", err)
			}
		}, flood},
		{"planted by the code while it runs", nil, fmt.Sprintf(`import os, sys
if os.path.lexists(".sandgate"):
    os.rename(".sandgate", "old-state")
os.symlink(%%q, ".sandgate")
sys.stdout.write('y' * 5000)
`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			outside := t.TempDir()
			victim := filepath.Join(outside, "victim")
			if err := os.WriteFile(victim, []byte("original"), 0o644); err != nil {
				t.Fatal(err)
			}
			id := "req-" + executortest.Nonce()
			ws := executortest.NewWorkspace(t)
			if tc.plant != nil {
				tc.plant(t, ws, outside, id)
			}
			code := tc.code
			if tc.plant == nil {
				code = fmt.Sprintf(code, outside)
			}
			e := newTestExecutor(t)
			res, err := e.Execute(t.Context(), executors.Spec{RequestID: id, Language: executors.LangPython,
				Code: code, Timeout: 30 * time.Second, WorkspaceDir: ws,
				Limits: executors.Limits{MaxOutputBytes: 100}})
			if err != nil {
				t.Fatalf("Execute: %v", err)
			}
			if !res.Truncated {
				t.Fatalf("not truncated: %+v", res)
			}
			assertOnly(t, outside, map[string]string{"victim": "original"})
			if res.OutputPath != "" {
				got, err := os.ReadFile(filepath.Join(ws, strings.TrimPrefix(res.OutputPath, "/workspace/")))
				if err != nil || string(got) != strings.Repeat("y", 5000) {
					t.Errorf("OutputPath %q: %v, %d bytes", res.OutputPath, err, len(got))
				}
			}
		})
	}
}

// assertOnly fails unless dir holds exactly the files in want.
func assertOnly(t *testing.T, dir string, want map[string]string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(want) {
		t.Errorf("%s holds %d entries, want %d", dir, len(entries), len(want))
	}
	for name, content := range want {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(got) != content {
			t.Errorf("%s: %q, %v; want %q", name, got, err, content)
		}
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func mustMkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func hasEmptyGroups(status string) bool {
	for _, line := range strings.Split(status, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "Groups:" {
			return len(f) == 1
		}
	}
	return false
}
