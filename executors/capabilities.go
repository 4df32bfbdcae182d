package executors

import (
	"errors"
	"fmt"
)

// Capabilities say what a backend can enforce, on the model of Nomad's
// drivers.Capabilities: a plain value the backend reports about itself,
// which the caller matches against what a run needs. They travel in the
// policy input (input.executors.<kind>.capabilities, JSON names below), so
// the policy never routes a run to a backend that cannot enforce the
// run's obligations, and /readyz and GET /v1/policy show them.
//
// A backend reports what it enforces today, on this host, in its current
// mode: a field it cannot guarantee for every run is false.
type Capabilities struct {
	// NetworkIsolation: a run can be given no network at all (only a
	// loopback of its own). Needed by every run whose obligation is
	// network=false.
	NetworkIsolation bool `json:"network_isolation"`
	// NetworkGrant: a run can be given network through the gateway's
	// egress proxy (DESIGN.md §9). Needed by network=true; no backend has
	// it until the egress proxy exists, so such runs are denied rather
	// than given the host's network.
	NetworkGrant bool `json:"network_grant"`
	// MemoryLimit: Limits.MemoryMB is enforced per run.
	MemoryLimit bool `json:"memory_limit"`
	// ProcessLimit: Limits.MaxProcs is enforced per run.
	ProcessLimit bool `json:"process_limit"`
	// KillDetached: processes that left the run's process group (setsid,
	// double fork) are killed at the timeout too. Without it the timeout
	// obligation does not hold for such processes.
	KillDetached bool `json:"kill_detached"`
	// FilesystemIsolation: the run sees /workspace and a root filesystem,
	// not the host's paths.
	FilesystemIsolation bool `json:"filesystem_isolation"`
	// Kernels: stateful runs (DESIGN.md §11).
	Kernels bool `json:"kernels"`
	// RequiresSession: every run must name a session.
	RequiresSession bool `json:"requires_session"`
	// SessionSandbox: the runs of a session whose Layout asks for it
	// (Layout.SessionSandbox) share one sandbox for the session's life:
	// a process one command starts is seen by the next, /tmp and what
	// was installed persist (docker and gvisor in session mode, the k8s
	// pod, the aio instance).
	SessionSandbox bool `json:"session_sandbox"`
	// Snapshot is what a pause keeps of a session (SnapshotMemory,
	// SnapshotFilesystem, SnapshotNone; pause.go); empty is none.
	Snapshot string `json:"snapshot"`
	// RootFS identifies the root filesystem runs see: "rootfs:<name>" for
	// the runtime root (scripts/images.sh names each build
	// runtime-<recipe hash>; every executor on that root reports the same
	// name, so a policy can compare them), "image:<ref>@<image id>" for an
	// image not built on it, or "host" for the host's system directories.
	// An image not inspected yet (the engine is down) is "image:<ref>".
	RootFS string `json:"root_fs"`
	// Isolation names the mode the backend is in ("namespaces",
	// "process-group", "container", ...): the reason, for operators and
	// for deny messages, why a capability is missing.
	Isolation string `json:"isolation"`
}

// Capability names, as the policy input and reason messages spell them.
const (
	CapNetworkIsolation    = "network_isolation"
	CapNetworkGrant        = "network_grant"
	CapMemoryLimit         = "memory_limit"
	CapProcessLimit        = "process_limit"
	CapKillDetached        = "kill_detached"
	CapFilesystemIsolation = "filesystem_isolation"
	CapKernels             = "kernels"
	CapSessionSandbox      = "session_sandbox"
)

// Map is the policy-input form of c (the JSON names). The input is built
// as map[string]any so that OPA takes its fast path (see policy.Input).
func (c Capabilities) Map() map[string]any {
	return map[string]any{
		CapNetworkIsolation:    c.NetworkIsolation,
		CapNetworkGrant:        c.NetworkGrant,
		CapMemoryLimit:         c.MemoryLimit,
		CapProcessLimit:        c.ProcessLimit,
		CapKillDetached:        c.KillDetached,
		CapFilesystemIsolation: c.FilesystemIsolation,
		CapKernels:             c.Kernels,
		CapSessionSandbox:      c.SessionSandbox,
		"requires_session":     c.RequiresSession,
		"snapshot":             c.Snapshot,
		"root_fs":              c.RootFS,
		"isolation":            c.Isolation,
	}
}

// SnapshotMode is c.Snapshot, "none" when the backend names none.
func (c Capabilities) SnapshotMode() string {
	if c.Snapshot == "" {
		return SnapshotNone
	}
	return c.Snapshot
}

// Has reports whether c includes the named boolean capability. Unknown
// names are not had: a requirement nobody can meet fails closed.
func (c Capabilities) Has(name string) bool {
	switch name {
	case CapNetworkIsolation:
		return c.NetworkIsolation
	case CapNetworkGrant:
		return c.NetworkGrant
	case CapMemoryLimit:
		return c.MemoryLimit
	case CapProcessLimit:
		return c.ProcessLimit
	case CapKillDetached:
		return c.KillDetached
	case CapFilesystemIsolation:
		return c.FilesystemIsolation
	case CapKernels:
		return c.Kernels
	case CapSessionSandbox:
		return c.SessionSandbox
	}
	return false
}

// Required lists the capabilities spec's obligations need, in a stable
// order: the network obligation either way, the timeout (which must reach
// detached processes too), the memory and process limits, a kernel
// for a stateful run, and one sandbox for the session's life for any
// other run of a session whose front end asks for it. The default Rego policy applies the same rule
// (policy/rego/sandgate/exec).
func Required(spec Spec) []string {
	req := make([]string, 0, 6)
	if spec.Network {
		req = append(req, CapNetworkGrant)
	} else {
		req = append(req, CapNetworkIsolation)
	}
	req = append(req, CapKillDetached)
	if spec.Limits.MemoryMB > 0 {
		req = append(req, CapMemoryLimit)
	}
	if spec.Limits.MaxProcs > 0 {
		req = append(req, CapProcessLimit)
	}
	if spec.Stateful {
		req = append(req, CapKernels)
	}
	if spec.Layout.SessionSandbox && !spec.Stateful {
		req = append(req, CapSessionSandbox)
	}
	return req
}

// Check returns a *CapabilityError naming every capability spec needs and
// c lacks, or nil. The manager calls it before it calls a backend, so a
// run whose obligations cannot be enforced is refused whichever policy
// decided it; a backend whose capabilities depend on its mode (aio in
// bridge mode) calls it too.
func (c Capabilities) Check(kind Kind, spec Spec) error {
	var missing []string
	for _, name := range Required(spec) {
		if !c.Has(name) {
			missing = append(missing, name)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return &CapabilityError{Kind: kind, Missing: missing, Isolation: c.Isolation}
}

// ErrCapabilityMissing is wrapped by every error that means "this backend
// cannot enforce an obligation of this run". It is not unavailability:
// probing again would not help, so the manager turns it into a policy
// deny (403, executor.capability_missing), never into a 503.
var ErrCapabilityMissing = errors.New("executor cannot enforce an obligation")

// CapabilityError names the capabilities a run needed and the backend
// lacks.
type CapabilityError struct {
	Kind      Kind
	Missing   []string
	Isolation string
}

func (e *CapabilityError) Error() string {
	msg := fmt.Sprintf("%s cannot enforce %s", e.Kind, CapabilityText(e.Missing[0]))
	for _, m := range e.Missing[1:] {
		msg += ", " + CapabilityText(m)
	}
	if e.Isolation != "" {
		msg += " (" + e.Isolation + " mode)"
	}
	return msg
}

// Is makes errors.Is(err, ErrCapabilityMissing) hold.
func (e *CapabilityError) Is(target error) bool { return target == ErrCapabilityMissing }

// capabilityText is how reason messages name a capability; the default
// Rego policy uses the same words.
var capabilityText = map[string]string{
	CapNetworkIsolation:    "network isolation",
	CapNetworkGrant:        "network access through the egress proxy",
	CapMemoryLimit:         "the memory limit",
	CapProcessLimit:        "the process limit",
	CapKillDetached:        "the timeout on detached processes",
	CapFilesystemIsolation: "filesystem isolation",
	CapKernels:             "stateful kernels",
	CapSessionSandbox:      "one sandbox for the session's life",
}

// CapabilityText is the human name of a capability, for messages.
func CapabilityText(name string) string {
	if t, ok := capabilityText[name]; ok {
		return t
	}
	return name
}
