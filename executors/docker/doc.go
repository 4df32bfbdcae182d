// Package docker is the container executor (DESIGN.md §6): every run gets a
// fresh, network-less container from its language's image, created through
// the Docker Engine API (github.com/moby/moby/client, API version
// negotiated; the Debian engine here speaks 1.41).
//
// # What a run gets
//
//   - a network namespace of its own with lo and nothing else, whatever
//     Spec.Network says (NetworkDisabled, the engine's network setup
//     skipped, where the runtime brings lo up itself; NetworkMode none
//     otherwise; netfiles.go); a run granted network reaches the
//     gateway's egress proxy through lo only (see "Network by policy");
//   - the runtime root's /etc/hosts (localhost) and an empty
//     /etc/resolv.conf, read-only, not the engine's (which name the
//     host's resolver);
//   - every capability dropped, no-new-privileges, the engine's default
//     seccomp profile (and AppArmor profile where the host has AppArmor);
//   - the session's own uid:gid (Spec.UID/GID, else Config.SandboxUID/GID),
//     never root, with no supplementary groups;
//   - a read-only root filesystem, a size-capped tmpfs at /tmp (nosuid,
//     nodev), the session workspace bind-mounted read-write at /workspace
//     as the working directory and HOME;
//   - memory (with no swap), pids, CPU quota and rlimits (cpu, nofile,
//     fsize, core=0) from Spec.Limits over Config.Limits;
//   - an environment of PATH, HOME, LANG and NODE_PATH only;
//   - no log driver: output travels over the attach stream only.
//
// Files the code writes belong to the session uid, which also owns the
// workspace, so the workspace API reads and writes them afterwards. The
// executor never chowns anything inside the workspace; only the workspace
// directory itself is handed to the run's uid (through an O_NOFOLLOW
// descriptor) when it is not already its owner, which only happens for
// callers without a workspace identity.
//
// # Life of a run
//
// The container's command is a fixed POSIX shell script (bootScript). The
// executor creates the container, registers the engine's wait for its exit
// and attaches to its streams (both before the start, so nothing is
// missed), starts it, and writes the language and then the program text to
// its stdin: no shell quoting, any bytes, any size (256 KiB is tested). The
// script copies the program to the tmpfs and runs the interpreter on it.
// stdout and stderr are demultiplexed (stdcopy) and then, like the
// subprocess executor: the host workspace path is masked as /workspace, each
// stream is capped at MaxOutputBytes, and the interleaved output is kept up
// to MaxSpillBytes in /workspace/.sandgate/outputs/<request_id>.log when a
// stream was cut (written through an os.Root with O_EXCL, so links the code
// planted are never followed).
//
// The exit status comes in-band: the shell, which stays PID 1, writes it as
// a trailer at the end of stderr after the interpreter exits, so a run ends
// as soon as its stream does. Without the trailer (the shell was killed),
// or for a SIGKILL status, the engine's wait result is used, and exit 137
// asks the engine whether the memory limit did it (Result.OOMKilled).
//
// At the timeout the container is killed with SIGKILL, which kills every
// process in its PID namespace (setsid'd and double-forked ones included):
// exit 124 and TimedOut, output written until then kept. A cancelled ctx
// (the client went away) kills it the same way and Execute returns the
// context's error. Engine calls are not themselves cut short by the request
// ctx (a create whose answer was lost would strand a container); ctx is
// checked between them.
//
// # Clean-up
//
// Every container carries sandgate.managed=true, sandgate.executor=<kind>
// (Config.Kind: docker, or gvisor for executors/gvisor),
// sandgate.instance=<Config.Instance>, sandgate.session, sandgate.request
// (or sandgate.warm) and sandgate.boot (which Executor value made it). It
// is removed after its run, whatever happened, in the background (Close
// waits for removals). A removal that fails because the engine is gone is
// retried when the engine answers again. New (or, if the engine was down
// then, the first successful Available) removes every container of the
// same instance made by an earlier process: what a crash or SIGKILL left.
// Gateways sharing one engine must therefore use distinct instances.
//
// # Engine loss
//
// Available pings the engine and checks that the images exist. A failed
// engine call during a run is classified: if the engine is unreachable (or
// refused the work) the error wraps executors.ErrUnavailable, which the
// manager maps to 503 executor_unavailable. Nothing needs rebuilding when
// the engine is back: each call dials the engine anew.
//
// # Warm starts
//
// A session that runs repeatedly (from its Config.WarmAfter-th run) gets
// its next containers prepared in the background (created, attached,
// started, the script waiting on stdin). A container serves one run. How
// many a session holds follows its pace: one when it pauses between runs
// longer than a container takes to start, prepared after each run; up to
// Config.WarmPerSession (default 3) once its runs come back to back, and
// then the next ones start as soon as a run has its container, alongside
// the run (a start next to a run slows the run, so a session that pauses
// does not get that).
// At most Config.WarmMax exist across sessions; at that cap a session
// without any takes one from the session holding the most. The session's
// next run with the same image, workspace, identity and limits uses one
// and skips container start-up; any language of the image will do, since
// the language arrives on stdin. A warm container is only ever used by its
// own session, and is removed on ReleaseSession, after Config.WarmIdle
// unused, when its shape no longer matches, and at Close.
//
// An idle warm container costs memory: under runc its boot shell (~3 MiB
// in its cgroup) and its containerd shim (~13 MiB RSS); under gVisor a
// whole sandbox: ~15 MiB in its cgroup, ~76 MiB RSS for shim, gofer and
// sentry together (measured, shared pages counted in each). WarmMax and
// WarmPerSession bound that: 8 idle gVisor sandboxes are ~0.6 GiB.
//
// # Pre-started sandboxes of no session (pool.go)
//
// A run its session's warm containers cannot serve (a session's first
// run above all) claims a pre-started, never-used container from a pool
// kept per shape, sized by Config.Pool and by demand, capped by memory:
// the claim mounts the session's workspace into it (mount propagation)
// and hands its boot step the session's uid and gid, which it takes on
// with setpriv before the ordinary boot script runs. The program never
// runs as root and never shares its container; root exists in a pooled
// container only while it idles, with CAP_SETUID, CAP_SETGID and
// CAP_SETPCAP and nothing of anyone inside. The pool needs the gateway
// to be root; it is off (and /readyz says why) otherwise. An idle pooled
// container costs ~0.4 MiB in its cgroup plus its shim (~13 MiB RSS,
// ~3 MiB PSS) under runc, ~15 MiB in its cgroup and ~74 MiB RSS (~25 MiB
// PSS) for shim, gofer and sentry under gVisor (measured with the pool
// idle).
//
// # Network by policy (the egress bridge)
//
// A run granted network (Spec.Network with Spec.Egress, DESIGN.md §9)
// gets a container that still has NetworkMode none. The executor makes
// a directory of its own for the container (random name, under a 0711
// directory in Config.EgressDir), listens on a Unix socket there and
// binds the directory read-only at /run/sandgate/egress; the boot script
// starts socat (in the runtime image) listening on 127.0.0.1:3128 and
// connecting each connection to that socket, and waits until it listens
// before the program runs. Each connection the executor accepts goes to
// the run's Egress.ServeConn, under the run's context; the run's end
// closes them all. A warm container is prepared with its socket before
// its run is known, and since a container serves exactly one run, its
// socket serves the Egress of the run it is handed to. The proxy
// variables (executors.EgressEnv) are in the container's environment, and
// with a CA the combined bundle (the image's own system bundle, read
// through the engine's archive API once per image, plus the CA) is
// written to the directory before the container starts. Whether a
// container is granted network, and with which CA, is part of its shape:
// a warm container never serves a run that differs. socat is one of the
// run's processes (and forks one per connection), within its pids limit;
// the code can kill it, which only cuts its own network. An image without
// socat fails a granted run with exit 125 and the reason.
//
// Under gVisor (executors/gvisor) the sandbox can connect to the host
// socket only when the engine registers runsc with --host-uds=open
// (scripts/dockerd.sh does); network_grant is true only when the engine
// reports that flag (checkRuntime), and such runs are refused otherwise.
//
// # Runtimes with their own kernel
//
// Config.Runtime picks the OCI runtime; executors/gvisor sets runsc and
// Config.OwnKernel, under which the process limit is RLIMIT_NPROC inside
// the sandbox's kernel (the pids cgroup then counts the runtime's host
// tasks) and the boot script relays the program's output through FIFOs
// (bootScriptRelay says why). Available requires the engine to list the
// runtime.
//
// # Images
//
// `make images` builds sandgate/runtime (python3, bash, node from Debian)
// from images/runtime: debootstrap --variant=minbase, the packages through
// apt in the chroot, then docker import; tagged with a hash of the recipe
// and rebuilt only when that changes, with :latest (DefaultImage) pointing
// at the current build. Measured here: 31 s with a warm apt cache (56 s the
// first time), 208 MB.
//
// # Measured cost
//
// On the 2-core development VM (cgroup v1, engine 20.10, runc 1.1.5) with
// other builds running (load average 11-16), p50 of single runs of
// python3 -c 'print(1)' against `docker run --rm --network none
// sandgate/runtime python3 -c 'print(1)'` measured in the same loop:
//
//	go test -run '^$' -bench 'Fresh|Warm' -benchtime 30x ./executors/docker/
//	fresh, concurrency 1: executor 209 ms, CLI 237 ms (0.88×); p95 310 / 324 ms
//	fresh, concurrency 8: executor 1519 ms, CLI 1709 ms (0.89×); 4.5 / 4.3 runs/s
//	warm,  concurrency 1: executor 60 ms, CLI 384 ms (0.16×); p95 134 / 1122 ms; 14.5 runs/s
//	warm,  concurrency 8: executor 395 ms, CLI 2350 ms (0.17×); 11.9 / 3.1 runs/s
//
// A second run at load average 19-23: fresh 427 / 518 ms (0.82×) at
// concurrency 1 and 1820 / 2015 ms (0.90×) at 8; warm 87 / 643 ms (0.14×)
// at 1 and 348 / 2049 ms (0.17×, 13.5 / 3.0 runs/s) at 8.
//
// Container start (runc) is ~200 ms of the fresh path whatever the
// container's options (measured with each option group removed in turn);
// the executor wins by skipping the CLI's own start-up and by removing the
// container after answering, and the engine's exit processing (10-40 ms) by
// the in-band exit status.
//
// # Stateful runs
//
// A stateful Spec (DESIGN.md §11) runs as a cell of the session's IPython
// kernel: a container of the same hardened kind as a run's whose command
// is the kernel driver of package executors/kernel (kernel.go). It lives
// until the session is deleted, the kernel idles for 30 minutes, or the
// gateway stops; its memory and pids limits bound the kernel over its
// whole life. The gvisor executor, being this one under runsc, hosts
// kernels the same way.
//
// # Session sandboxes
//
// A session whose front end expects one sandbox for its life
// (executors.Layout.SessionSandbox: E2B's) gets one long-lived container
// instead of a container per run: every command, detached or not, is an
// exec in it, so processes, /tmp and the user site persist between
// commands. Each command keeps its timeout (its whole tree is killed),
// output caps and spill file; the container's memory and pids limits
// bound the sandbox as a whole. session.go has the details and what a
// run granted network gets instead. Measured: 203 ms p50 a command
// against 269 ms for the CLI's docker exec (BenchmarkSessionSandbox).
//
// # Known limits
//
//   - The code can read the workspace's host path from
//     /proc/self/mountinfo; responses mask it, files the code writes do not.
//   - CPUSeconds is an rlimit per process; the CPU quota (Config.CPUs) and
//     the wall-clock timeout are the real bounds.
//   - A container orphaned by a gateway crash runs on (without network,
//     within its limits) until the next start with the same instance reaps
//     it.
//   - A create whose answer is lost (the engine stopped mid-call) may
//     still have made its container: it is found by its create's label
//     once the engine answers again, within seconds (unconfirmed.go).
//   - The program can forge its own exit status with a trailer of its own
//     at the very end of stderr; it can only report a status it could have
//     exited with anyway.
//   - Tested with cgroup v1 only.
package docker
