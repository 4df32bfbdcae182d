// Package k8s is the Kubernetes executor tier (issue 29): a session's
// sandbox is a pod of its own in a namespace that enforces Pod Security
// "restricted", running sandboxd on the runtime image.
//
// # A new executor, not the aio pool's remote backend
//
// The aio pool is built around a local engine: instances started ahead
// and bound to a session by bind-mounting its workspace onto a
// propagated mount point, a Unix socket in a host state directory, and
// adoption by container label. None of that exists across a cluster:
// there is no shared mount with a node, and Kubernetes already starts,
// limits, restarts and reaps the pods. So this is an executor of its own
// (Kind "kubernetes") that reuses only the wire: aio.Client and
// aio.RunRemote speak sandboxd's API exactly as the pool does, so a run's
// caps, spill file, streaming and per-run limits are the same.
//
// # The pod
//
// One pod per session, named from a hash of the session id (sbx-<hash>)
// and labelled with it, so any replica computes the same name and a
// second create meets AlreadyExists and adopts the pod instead of
// starting another (podSpec: non-root, read-only root, every capability
// dropped, seccomp RuntimeDefault, no privilege escalation, no service
// account token, no host namespaces or paths, Guaranteed resources,
// restartPolicy Never, the pause container as reaper of a shared PID
// namespace). sandboxd listens on the pod's loopback only, with an API key
// minted at creation and kept in a Secret owned by the pod; the gateway
// reaches it through the apiserver's port-forward (tunnel.go), so neither
// side needs a route to the other. A deny-all NetworkPolicy ships for
// clusters that enforce it; on one that does not, the pod network must
// isolate (the test cluster's bridge isolates every port:
// scripts/k8s-cni-isolate).
//
// # Watches, loss and reaping
//
// One informer watches the tier's pods (by label): it wakes a creation
// waiting for its pod to run, and marks a session's sandbox lost when its
// pod is deleted, evicted or dies. The next request of that session says
// so (ErrSandboxLost, 503) and is never silently served by an empty new
// pod; the request after it gets a new pod, into which the last copy of
// the workspace is put. ReleaseSession deletes the session's pod, Close
// every pod of this gateway instance (by label).
//
// # The workspace
//
// The pod's /workspace is an emptyDir: the pod holds the session's files.
// The gateway's copy (what the workspace API serves) is refreshed from it
// after a run that changed it (sandboxd's workspace fingerprint says
// which), and replaces it before a run when it changed through the API
// (workspace.go), so a host write during a run is not seen until the next
// one. Runs of one session take turns for that reason.
//
// # One pod per session, whoever serves it
//
// A session's binding Secret (binding.go) is created before its pod: its
// creation is the session's lock, it holds the sandbox's key and names
// the pod. Any replica finds the session's pod through it and adopts it
// (pulling the pod's workspace first: the replicas need no shared
// workspace mount); a binding whose pod is gone makes the next request
// say the sandbox was lost, once, on whichever replica gets it.
//
// # The warm pool
//
// pool.size > 0 keeps that many idle, session-agnostic pods, one per
// slot ReplicaSet (pool.go), each as a uid of its own (on a node without
// user namespaces the kernel counts a uid's processes across pods, and
// sandboxd's per-run process limit is an RLIMIT_NPROC), their sandboxd
// already serving but awaiting its key. A claim is a label update
// carrying the resourceVersion read (optimistic concurrency: one claim of
// a pod wins), which also drops the owner reference, so the slot's
// ReplicaSet refills it (as a new uid) and the claimed pod never returns
// to it; the key is then handed to the pod's sandboxd (POST /v1/claim,
// taken once) through the port-forward the session then uses. Stale pool pods (an older template, a restarted sandbox, a claim
// never bound) are reaped when a gateway starts.
//
// # Faults
//
// Each run first checks that sandboxd answers (10 s): a stopped kubelet,
// container runtime or apiserver fails the request as unavailable (503)
// instead of hanging, and the session resumes on the same pod when they
// come back. The informer resumes its watch after an apiserver restart.
//
// # Not yet
//
// Network grants through the egress proxy (network_grant is false, so
// such runs are refused) and stateful kernels. A new session's first
// request while the apiserver does not answer waits up to ready_timeout.
package k8s
