package gvisor

import (
	"context"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/executortest"
)

// TestKindAndCapabilities: the executor is its own kind for the policy,
// and its capabilities say what it enforces (each one is exercised under
// runsc by the conformance suite and the isolation tests). No engine is
// needed: neither reaches it. Without an engine network_grant is false:
// it holds only once the engine shows runsc may use host sockets
// (TestNetworkGrant).
func TestKindAndCapabilities(t *testing.T) {
	e, err := New(t.Context(), Config{Pool: noPool, Instance: "caps-" + executortest.Nonce(), Logger: testLogger(t), Host: "unix:///nonexistent.sock"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	if e.Kind() != executors.KindGVisor {
		t.Errorf("kind %q", e.Kind())
	}
	c := e.Capabilities()
	if !c.NetworkIsolation || !c.MemoryLimit || !c.ProcessLimit || !c.KillDetached || !c.FilesystemIsolation || c.NetworkGrant {
		t.Errorf("capabilities %+v", c)
	}
	if !strings.Contains(c.Isolation, "runsc") {
		t.Errorf("isolation %q does not name runsc", c.Isolation)
	}
	if err := e.Available(t.Context()); err == nil {
		t.Error("available without an engine")
	}
}

func TestNewRejectsAnotherKind(t *testing.T) {
	if _, err := New(t.Context(), Config{Kind: executors.KindDocker}); err == nil {
		t.Fatal("New accepted kind docker")
	}
}
