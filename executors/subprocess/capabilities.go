package subprocess

import "github.com/sandgate/sandgate/executors"

// Capabilities implements executors.Executor. Both isolation modes build
// the same environment (new PID, mount and network namespaces, the minimal
// root, rlimits), so both enforce every obligation the default policy
// attaches:
//
//   - network isolation: the run's own network namespace, only lo;
//   - killing detached processes: the run's PID namespace dies with it;
//   - filesystem isolation: the minimal root, /workspace and no host path;
//   - the memory limit: RLIMIT_AS;
//   - the process limit: RLIMIT_NPROC. As root it counts the session's own
//     uid (concurrent runs of a session share it). In IsolationUserNS it is
//     set inside the run's own user namespace (nprocScript), where the
//     kernel counts only that run's tasks.
//
// Network through the egress proxy (network_grant): as root the gateway
// makes the run's network namespace and its listener on 127.0.0.1:3128
// itself (egress_linux.go). A gateway that is not root can neither make
// nor join one (making a user namespace needs a single-threaded process,
// which the gateway never is, and setns(2) into bubblewrap's needs
// CAP_SYS_ADMIN in the gateway's own user namespace), so there the run's
// root gets the proxy's socket and socat forwards to it inside: granted
// only when the root has socat (the runtime root does). Otherwise a run
// granted network is refused (the policy sees network_grant false and
// never routes it here), never given the host's network.
//
// IsolationNone enforces nothing; Available refuses every run then, and
// the capabilities say so too. RootFS is the root's identity ("host", or
// the runtime root's).
func (e *Executor) Capabilities() executors.Capabilities {
	isolated := e.isolation == IsolationNamespaces || e.isolation == IsolationUserNS
	return executors.Capabilities{
		NetworkIsolation:    isolated,
		NetworkGrant:        e.isolation == IsolationNamespaces || (e.isolation == IsolationUserNS && e.forwarder),
		MemoryLimit:         isolated,
		ProcessLimit:        isolated,
		KillDetached:        isolated,
		FilesystemIsolation: isolated,
		RootFS:              e.rootID,
		Isolation:           string(e.isolation),
		// A pause keeps the workspace (it is the host directory); no
		// process outlives its run.
		Snapshot: executors.SnapshotFilesystem,
	}
}
