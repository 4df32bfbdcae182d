package gvisor

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/docker"
)

// noPool turns the pool of pre-started sandboxes off for the tests that
// check runs of their own containers (the pool has its own tests).
var noPool = docker.PoolConfig{Max: -1}

// TestPoolClaimUnderGVisor: a run served from a pooled gVisor sandbox
// runs as its session's uid with no capability, in its own workspace,
// which the sandbox's kernel bound at /workspace at the claim, and sees
// nothing an earlier session left.
func TestPoolClaimUnderGVisor(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv(requireDockerEnv) == "1" {
			t.Fatal("the pool needs root (a claim mounts the workspace)")
		}
		t.Skip("the pool needs root")
	}
	dir := filepath.Join(docker.DefaultPoolDir, "test-gvisor-"+executors.LangBash)
	e := newTestExecutor(t, func(c *Config) { c.Pool = docker.PoolConfig{Size: 2, Max: 2, Dir: dir} })
	deadline := time.Now().Add(2 * time.Minute)
	for e.PoolStatus().Idle < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("pool not ready: %+v", e.PoolStatus())
		}
		time.Sleep(100 * time.Millisecond)
	}
	a := spec(t, executors.LangBash, `echo secret > a.txt; (sleep 300 &); echo ok`)
	a.UID, a.GID = 61001, 61001
	b := spec(t, executors.LangBash, `id -u; id -G; pwd; ls -A; cat a.txt 2>&1; ps -eo args | grep -c '^sleep 300'; grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb):' /proc/self/status | tr -d '\t' | sort | paste -sd ' ' -; echo x > mine.txt && echo wrote`)
	b.UID, b.GID = 61002, 61002
	for _, s := range []executors.Spec{a, b} {
		if err := os.Chown(s.WorkspaceDir, s.UID, s.GID); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(b.WorkspaceDir, "b.txt"), []byte("b"), 0o644); err != nil {
		t.Fatal(err)
	}
	if res := execute(t, e, a); res.ExitCode != 0 {
		t.Fatalf("A: %+v", res)
	}
	res := execute(t, e, b)
	want := "61002\n61002\n/workspace\nb.txt\ncat: a.txt: No such file or directory\n0\nCapAmb:0000000000000000 CapBnd:0000000000000000 CapEff:0000000000000000 CapInh:0000000000000000 CapPrm:0000000000000000\nwrote\n"
	if res.ExitCode != 0 || res.Stdout != want {
		t.Fatalf("B: exit %d stdout %q stderr %q, want stdout %q", res.ExitCode, res.Stdout, res.Stderr, want)
	}
	if _, err := os.Stat(filepath.Join(b.WorkspaceDir, "mine.txt")); err != nil {
		t.Errorf("B's file is not in its workspace: %v", err)
	}
	if st := e.PoolStatus(); st.Claims < 2 {
		t.Errorf("runs not served from the pool: %+v", st)
	}
}
