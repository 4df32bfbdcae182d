package aio

import (
	"errors"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/executortest"
)

// TestCapabilitiesByNetworkMode: sandboxd (none mode) enforces every
// per-run obligation; the image's own server on the bridge enforces none
// of them, so the policy never sends it a run.
func TestCapabilitiesByNetworkMode(t *testing.T) {
	spec := executors.Spec{Limits: executors.Limits{MemoryMB: 512, MaxProcs: 64}}
	none := capabilitiesFor(NetworkNone, "image:x")
	if err := none.Check(executors.KindAIO, spec); err != nil || !none.RequiresSession || !none.FilesystemIsolation {
		t.Errorf("none mode: %+v, Check = %v", none, err)
	}
	bridge := capabilitiesFor(NetworkBridge, "image:x")
	err := bridge.Check(executors.KindAIO, spec)
	if err == nil || !strings.Contains(err.Error(), "network isolation") || !strings.Contains(err.Error(), "bridge network") {
		t.Errorf("bridge mode: %+v, Check = %v; want network isolation missing", bridge, err)
	}
}

// TestCapabilitiesNameTheRoot: after a probe the root filesystem is the
// runtime root the image is built on (its sandgate.rootfs label), the name
// the other executors give the same root.
func TestCapabilitiesNameTheRoot(t *testing.T) {
	e := newTestExecutor(t)
	if got := e.Capabilities().RootFS; got != "image:"+e.cfg.Image {
		t.Errorf("before a probe: RootFS = %q", got)
	}
	if err := e.Available(t.Context()); err != nil {
		t.Fatalf("Available: %v", err)
	}
	if got := e.Capabilities().RootFS; !strings.HasPrefix(got, "rootfs:runtime-") {
		t.Errorf("RootFS = %q, want rootfs:runtime-<hash>", got)
	}
}

// TestProbeInspectsTheImageOnce: probes inspect the image only when its
// last check has lapsed or the engine stopped answering (package recheck):
// the manager probes each second while requests arrive, beside the runs.
func TestProbeInspectsTheImageOnce(t *testing.T) {
	eng := executortest.NewCountingEngine(t)
	e := newTestExecutor(t, func(c *PoolConfig) { c.Host = eng.Host() })
	inspects := func() int { return eng.Calls(executortest.EngineImageInspect) }
	before := inspects()
	for i := range 3 {
		if err := e.Available(t.Context()); err != nil {
			t.Fatalf("probe %d: %v", i, err)
		}
	}
	if got := inspects() - before; got != 1 {
		t.Errorf("three probes inspected the image %d times, want 1", got)
	}
	eng.Down.Store(true)
	if err := e.Available(t.Context()); !errors.Is(err, executors.ErrUnavailable) {
		t.Fatalf("probe while the engine answers 503: %v", err)
	}
	eng.Down.Store(false)
	before = inspects()
	if err := e.Available(t.Context()); err != nil || inspects() != before+1 {
		t.Errorf("probe once the engine is back: %v, %d inspects, want 1", err, inspects()-before)
	}
}
