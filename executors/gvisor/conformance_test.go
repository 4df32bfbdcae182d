package gvisor

import (
	"testing"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/executortest"
)

// TestConformance runs the whole suite under runsc. ProcessesVisible is
// false: the code's processes live in gVisor's sentry, not in this host's
// /proc, so the tree tests can only show that nothing is left over (the
// container is gone, which TestNoContainerLeft checks from the engine).
func TestConformance(t *testing.T) {
	needGVisor(t)
	executortest.Run(t, executortest.Harness{
		New:       func(t *testing.T) executors.Executor { return newTestExecutor(t) },
		DataStack: true, // docker's image, built on the runtime root (images/)
	})
}
