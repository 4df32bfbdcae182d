package gvisor

import (
	"context"
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
