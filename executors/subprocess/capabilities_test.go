package subprocess

import (
	"testing"

	"github.com/sandgate/sandgate/executors"
)

// TestCapabilitiesFollowIsolation: what the executor claims is what its
// mode enforces: everything with namespaces or user namespaces, nothing
// without (where it is unavailable anyway); network through the egress
// bridge with namespaces, and with user namespaces when the root has
// socat (the forwarder).
func TestCapabilitiesFollowIsolation(t *testing.T) {
	e := newTestExecutor(t)
	c := e.Capabilities()
	spec := executors.Spec{Limits: executors.Limits{MemoryMB: 256, MaxProcs: 32}}
	if err := c.Check(executors.KindSubprocess, spec); err != nil || !c.FilesystemIsolation {
		t.Errorf("isolation %q: Capabilities %+v, Check = %v", e.Isolation(), c, err)
	}
	if c.RootFS != e.RootID() || c.RootFS == "" || c.Isolation != string(e.Isolation()) ||
		c.NetworkGrant != (e.Isolation() == IsolationNamespaces || e.forwarder) || c.RequiresSession {
		t.Errorf("Capabilities = %+v", c)
	}
	e.isolation = IsolationNone
	err := e.Capabilities().Check(executors.KindSubprocess, spec)
	if err == nil || err.Error() != "subprocess cannot enforce network isolation, the timeout on detached processes, "+
		"the memory limit, the process limit (none mode)" {
		t.Errorf("with no isolation: Check = %v", err)
	}
}
