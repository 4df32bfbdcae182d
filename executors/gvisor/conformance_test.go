package gvisor

import (
	"os"
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
		New:       func(t *testing.T) executors.Executor { return newTestExecutor(t, shippedWarmAfter) },
		DataStack: true, // docker's image, built on the runtime root (images/)
	})
}

// TestNetworkGrant: with runsc registered as scripts/dockerd.sh registers
// it (--host-uds=open), the executor grants network through the egress
// bridge, so the conformance suite's egress cases ran rather than
// checking a refusal. Where gVisor is required, an engine without the
// flag fails here instead of passing those cases as refusals.
func TestNetworkGrant(t *testing.T) {
	needGVisor(t)
	e := newTestExecutor(t)
	if err := e.Available(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !e.Capabilities().NetworkGrant {
		msg := "runsc is registered without --host-uds=open: no egress bridge under gVisor (README: registering runsc)"
		if os.Getenv(requireGVisorEnv) == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}
