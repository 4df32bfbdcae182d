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
