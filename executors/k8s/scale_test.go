package k8s

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/executortest"
)

// TestFiftySessions: 50 sessions created at once (a pool of 5 takes
// some, the rest get pods of their own) all run, each on a pod of its
// own, and once they are deleted no pod of theirs is left. The pods are
// small (10m CPU, 320 MiB requested) so that 50 fit the test node's
// 2 cores and 24 GiB, and so does the node's real load: a pod at rest
// is a pause process, a shell and sandboxd.
func TestFiftySessions(t *testing.T) {
	const n = 50
	e := newTestExecutor(t, func(c *Config) {
		c.Pool.Size = 5
		c.PodCPU = "10m"
		c.PodMemoryMB = 320
		c.WorkspaceMB = 64
	})
	waitIdle(t, e, 5, nil)
	began := time.Now()
	var wg sync.WaitGroup
	sessions := make([]string, n)
	errs := make([]error, n)
	for i := range sessions {
		sessions[i] = fmt.Sprintf("many-%02d-%s", i, executortest.Nonce())
		wg.Go(func() {
			spec := bashSpec(t, sessions[i], "echo $((40+2)) session "+fmt.Sprint(i))
			spec.Limits = executors.Limits{MemoryMB: 64}
			ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
			defer cancel()
			res, err := e.Execute(ctx, spec)
			if err == nil && res.Stdout != fmt.Sprintf("42 session %d\n", i) {
				err = fmt.Errorf("stdout %q stderr %q exit %d", res.Stdout, res.Stderr, res.ExitCode)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	t.Logf("%d sessions created and run at once in %v", n, time.Since(began).Round(time.Millisecond))
	pods := map[string]bool{}
	for i, s := range sessions {
		if errs[i] != nil {
			t.Errorf("session %d: %v", i, errs[i])
			continue
		}
		p := mustSessionPod(t, e, s)
		if pods[p.Name] {
			t.Fatalf("pod %s serves two sessions", p.Name)
		}
		pods[p.Name] = true
	}
	if t.Failed() {
		return
	}
	for _, s := range sessions {
		wg.Go(func() {
			if err := e.ReleaseSession(context.Background(), s); err != nil {
				t.Errorf("release %s: %v", s, err)
			}
		})
	}
	wg.Wait()
	waitNoPods(t, e, labelSession)
}
