package aio

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
)

// TestWorkspaceBothWays: the session's workspace is the sandbox's
// /workspace in both directions, also for an instance started ahead of its
// session, and the code runs as the session's uid.
func TestWorkspaceBothWays(t *testing.T) {
	e := newTestExecutor(t, func(c *PoolConfig) { c.MinInstances = 1 })
	waitFor(t, 60*time.Second, "an instance started ahead", func() bool { return e.pool.stats()["unbound"] == 1 && e.pool.stats()["idle"] == 1 })
	var ahead string
	e.pool.mu.Lock()
	for _, u := range e.pool.unbound {
		ahead = shortID(u.h.containerID)
	}
	e.pool.mu.Unlock()

	ws := newWorkspace(t)
	const uid = 2_000_321
	if err := os.WriteFile(filepath.Join(ws, "from-host.txt"), []byte("host says hi"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := executors.Spec{RequestID: "r1", SessionID: "both-ways", Language: executors.LangBash, Timeout: 30 * time.Second,
		WorkspaceDir: ws, UID: uid, GID: uid,
		Code: "cat from-host.txt; echo; id -u; pwd; echo sandbox says hi > from-sandbox.txt"}
	res, err := e.Execute(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if want := "host says hi\n2000321\n/workspace\n"; res.Stdout != want || res.ExitCode != 0 {
		t.Errorf("stdout %q exit %d stderr %q, want %q", res.Stdout, res.ExitCode, res.Stderr, want)
	}
	b, err := os.ReadFile(filepath.Join(ws, "from-sandbox.txt"))
	if err != nil || string(b) != "sandbox says hi\n" {
		t.Errorf("from-sandbox.txt = %q, %v", b, err)
	}
	if fi, err := os.Stat(filepath.Join(ws, "from-sandbox.txt")); err == nil {
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != uid {
			t.Errorf("file written by the sandbox is owned by %d, want the session uid %d", st.Uid, uid)
		}
	}
	info, ok := e.InstanceInfo("both-ways")
	if info.Container != ahead {
		t.Errorf("the session got container %s, not the one started ahead (%s)", info.Container, ahead)
	}
	if !ok || info.ID != instanceID(e.cfg.Instance, "both-ways") || info.State != "idle" || info.Uses != 1 || info.Container == "" {
		t.Errorf("InstanceInfo %+v %v", info, ok)
	}
	names := containerNames(t, e.cfg.Instance)
	if !containsName(names, "sandgate-aio-"+e.cfg.Instance+"-"+info.ID) {
		t.Errorf("container names %v lack the deterministic one", names)
	}
	// A second run sees the first one's file: the environment persists.
	spec.RequestID, spec.Code, spec.Language = "r2", "print(open('from-sandbox.txt').read().strip())", executors.LangPython
	res, err = e.Execute(context.Background(), spec)
	if err != nil || res.Stdout != "sandbox says hi\n" {
		t.Errorf("second run: %q %v (stderr %q)", res.Stdout, err, res.Stderr)
	}
	// The instance started ahead is replaced in the background.
	waitFor(t, 60*time.Second, "a new instance started ahead", func() bool { return e.pool.stats()["unbound"] == 1 && e.pool.stats()["idle"] == 2 })
}

func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func containerNames(t testing.TB, instance string) []string {
	var out []string
	for _, c := range listContainers(t, instance) {
		for _, n := range c.Names {
			out = append(out, strings.TrimPrefix(n, "/"))
		}
	}
	return out
}

func containsName(names []string, want string) bool {
	for _, n := range names {
		if n == want {
			return true
		}
	}
	return false
}

// TestSocketNotReplaceable: the sandbox owns the socket but not its
// directory, so its code cannot swap the socket for a symlink that the
// gateway, as root on the host, would follow.
func TestSocketNotReplaceable(t *testing.T) {
	e := newTestExecutor(t)
	ws := newWorkspace(t)
	res, err := e.Execute(context.Background(), executors.Spec{RequestID: "r", SessionID: "swap", Language: executors.LangBash,
		Timeout: 30 * time.Second, WorkspaceDir: ws,
		Code: "ls -ld /run/sandboxd | cut -d' ' -f1,3; rm -f /run/sandboxd/sandboxd.sock 2>&1 | sed 's/.*: //'; ln -s /var/run/docker.sock /run/sandboxd/x 2>&1 | sed 's/.*: //'"})
	if err != nil {
		t.Fatal(err)
	}
	// root's, writable by root alone (0700 since instances take their
	// identity at the claim: claimas.go; 0755 for an exec-bound one).
	first, _, _ := strings.Cut(res.Stdout, "\n")
	mode, owner, _ := strings.Cut(first, " ")
	if owner != "root" || len(mode) != 10 || mode[5] == 'w' || mode[8] == 'w' || strings.Count(res.Stdout, "Permission denied") != 2 {
		t.Errorf("the sandbox could change its socket directory:\n%s%s", res.Stdout, res.Stderr)
	}
	if res, err := e.Execute(context.Background(), bashSpec("swap", ws, "echo still here")); err != nil || res.Stdout != "still here\n" {
		t.Errorf("after the attempt: %+v %v", res, err)
	}
}
