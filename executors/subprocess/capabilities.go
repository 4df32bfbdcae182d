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
// IsolationNone enforces nothing; Available refuses every run then, and
// the capabilities say so too. RootFS is the root's identity ("host", or
// the runtime root's).
func (e *Executor) Capabilities() executors.Capabilities {
	isolated := e.isolation == IsolationNamespaces || e.isolation == IsolationUserNS
	return executors.Capabilities{
		NetworkIsolation:    isolated,
		MemoryLimit:         isolated,
		ProcessLimit:        isolated,
		KillDetached:        isolated,
		FilesystemIsolation: isolated,
		RootFS:              e.rootID,
		Isolation:           string(e.isolation),
	}
}
