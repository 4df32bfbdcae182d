package gvisor

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/executortest"
)

// TestPausedKernelRestoredAfterRestart: a session kernel holding a pandas
// DataFrame is checkpointed by a pause (its containers go), and an
// executor started afterwards with the same instance (a gateway restart)
// restores it from disk: the next cell reads the DataFrame, with no
// restart reported, and releasing the session kills the restored sandbox.
func TestPausedKernelRestoredAfterRestart(t *testing.T) {
	instance := "test-" + executortest.Nonce()
	e1 := newTestExecutor(t, func(c *Config) { c.Instance = instance })
	ctx := t.Context()
	if err := e1.Available(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e1.Capabilities().Snapshot; got != executors.SnapshotMemory {
		t.Fatalf("snapshot %q, want memory", got)
	}
	s := spec(t, executors.LangPython, "import pandas as pd, numpy as np\n"+
		"df = pd.DataFrame({'a': np.arange(100000), 'b': np.arange(100000) * 2})\nsecret = 'v-%d' % df.b.sum()")
	s.Stateful, s.Timeout = true, 2*time.Minute
	if res := execute(t, e1, s); res.ExitCode != 0 {
		t.Fatalf("state: %+v", res)
	}
	p, err := e1.PauseSession(ctx, s.SessionID)
	if err != nil || !p.Memory || p.Bytes == 0 {
		t.Fatalf("pause: %+v %v", p, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(instanceContainers(t, instance)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("containers after pause: %v", instanceContainers(t, instance))
		}
		time.Sleep(100 * time.Millisecond)
	}
	cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e1.Close(cctx); err != nil {
		t.Fatal(err)
	}

	e2 := newTestExecutor(t, func(c *Config) { c.Instance = instance })
	if err := e2.Available(ctx); err != nil {
		t.Fatal(err)
	}
	ok, err := e2.ResumeSession(ctx, s.SessionID)
	if err != nil || !ok {
		t.Fatalf("resume in a new executor: %v %v", ok, err)
	}
	read := s
	read.RequestID, read.Code = "req-"+executortest.Nonce(), "print(secret, df.shape)"
	res := execute(t, e2, read)
	if res.Stdout != "v-9999900000 (100000, 2)\n" || res.Cell == nil || res.Cell.KernelRestarted {
		t.Fatalf("after restore: stdout %q stderr %q cell %+v", res.Stdout, res.Stderr, res.Cell)
	}
	if n := e2.RestoredSandboxes(); n != 1 {
		t.Fatalf("restored sandboxes %d, want 1", n)
	}
	requireRestoredCPUQuota(t)
	// Paused and resumed again, the restored kernel keeps its quota:
	// its own bundle no longer holds it (the kept one is carried over).
	if p, err := e2.PauseSession(ctx, s.SessionID); err != nil || !p.Memory {
		t.Fatalf("second pause: %+v %v", p, err)
	}
	if ok, err := e2.ResumeSession(ctx, s.SessionID); err != nil || !ok {
		t.Fatalf("second resume: %v %v", ok, err)
	}
	requireRestoredCPUQuota(t)
	read.RequestID = "req-" + executortest.Nonce()
	if res := execute(t, e2, read); res.Stdout != "v-9999900000 (100000, 2)\n" || res.Cell == nil || res.Cell.KernelRestarted {
		t.Fatalf("after the second restore: stdout %q stderr %q", res.Stdout, res.Stderr)
	}
	if err := e2.ReleaseSession(ctx, s.SessionID); err != nil {
		t.Fatal(err)
	}
	e2.DropPaused(ctx, s.SessionID)
	if n := e2.RestoredSandboxes(); n != 0 {
		t.Fatalf("restored sandboxes after release %d", n)
	}
	if ok, err := e2.ResumeSession(ctx, s.SessionID); ok || err != nil {
		t.Fatalf("resume after drop: %v %v", ok, err)
	}
}

// requireRestoredCPUQuota fails unless every restored kernel sandbox
// that has processes runs under a CPU quota: runsc restores without one
// and the executor sets it afterwards (docker/checkpoint_cpu.go).
func requireRestoredCPUQuota(t *testing.T) {
	t.Helper()
	groups, _ := filepath.Glob("/sys/fs/cgroup/cpu/sandgate-restored/*")
	quota := func(g string) int64 {
		raw, _ := os.ReadFile(filepath.Join(g, "cpu.cfs_quota_us"))
		n, _ := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
		return n
	}
	if len(groups) == 0 { // cgroup v2
		groups, _ = filepath.Glob("/sys/fs/cgroup/sandgate-restored/*")
		quota = func(g string) int64 {
			raw, _ := os.ReadFile(filepath.Join(g, "cpu.max"))
			n, err := strconv.ParseInt(strings.Fields(string(raw) + " max")[0], 10, 64)
			if err != nil {
				return -1
			}
			return n
		}
	}
	seen := 0
	for _, g := range groups {
		if procs, _ := os.ReadFile(filepath.Join(g, "cgroup.procs")); len(strings.TrimSpace(string(procs))) == 0 {
			continue
		}
		seen++
		if q := quota(g); q <= 0 {
			t.Errorf("restored sandbox %s runs with no CPU quota (%d)", filepath.Base(g), q)
		}
	}
	if seen == 0 {
		t.Fatal("no restored sandbox's cgroup has processes")
	}
}
