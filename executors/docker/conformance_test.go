package docker

import (
	"testing"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/executortest"
)

func TestConformance(t *testing.T) {
	needEngine(t)
	executortest.Run(t, executortest.Harness{
		New:              func(t *testing.T) executors.Executor { return newTestExecutor(t, shippedWarmAfter) },
		ProcessesVisible: true,
		DataStack:        true, // the image is built on the runtime root (images/)
	})
}

// TestConformancePooled runs the suite with the pool on and ready, on
// one executor: a sub-test's run is served by a pre-started sandbox
// claimed for it (pool.go) when one is idle, which must behave as one
// created for the run does (identity, groups, capabilities, signal
// dispositions, environment, limits).
func TestConformancePooled(t *testing.T) {
	needEngine(t)
	needRoot(t)
	e := newTestExecutor(t, shippedWarmAfter, withPool(t, 2, 4))
	readyPool(t, e, 1)
	executortest.Run(t, executortest.Harness{
		New:              func(*testing.T) executors.Executor { return e },
		ProcessesVisible: true,
		DataStack:        true,
	})
	claims := e.PoolStatus().Claims
	t.Logf("runs served from the pool: %d", claims)
	if claims == 0 {
		t.Error("no run was served from the pool: the suite did not check a pooled sandbox")
	}
}
