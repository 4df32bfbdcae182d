// Package gvisor is the gVisor executor (DESIGN.md §6): the docker
// executor's container path with every container under gVisor's runsc, so
// that the code talks to a kernel in user space (the Sentry) instead of
// the host's. It is an executor of its own, kind "gvisor", so that the
// policy can name it; everything else (image, hardening, limits, warm
// containers, output, clean-up) is the docker package's.
//
// # Runtime
//
// runsc is built from the Go module proxy, statically, by
// scripts/gvisor.sh (make gvisor) and registered with the engine as the
// runtime "runsc" (scripts/dockerd.sh writes the daemon.json entry; the
// README says how to register it with an engine run otherwise).
// Available requires the engine to list the runtime: an engine without it
// makes the executor unavailable with that reason
// (docker.ErrRuntimeMissing), and a run is refused, never run under runc.
//
// The egress bridge (docker's "Network by policy": a socket directory
// bind-mounted into the container, socat inside on 127.0.0.1:3128)
// needs the Sentry to connect to a host Unix socket, which runsc allows
// only with --host-uds=open: scripts/dockerd.sh registers runsc with it.
// The flag lets the sandbox connect to host sockets that are mounted into
// it, and the executor mounts none but the bridge's. The executor reads
// the flag from the engine's runtime registration: without it
// network_grant is false and runs granted network are refused, never run
// without their proxy (TestNetworkGrant fails where gVisor is required).
// scripts/dockerd.sh also registers runsc with --network=none: each
// sandbox gets a loopback of its own in gVisor's netstack and nothing
// else, so the executor skips the engine's network setup, as under runc
// (docker netfiles.go). Registered without it, runs keep the engine's
// NetworkMode none and are the same, only slower to start.
//
// # What differs from runc
//
// Measured on runsc v0.0.0-20260905035102-160fafc42237, systrap platform
// (runsc's default), cgroup v1, Docker 20.10:
//
//   - The process limit is RLIMIT_NPROC inside the Sentry, which counts the
//     run's tasks only; the pids cgroup counts runsc's host tasks (about 28
//     at rest, two per task of the code) and is a backstop sized for them
//     (docker.Config.OwnKernel).
//   - A write to the container's stdout pipe completes only as far as the
//     pipe has room (Linux blocks until all is written), which loses output
//     of programs that do not retry short writes (python3 -u's print); the
//     boot script relays stdout and stderr through FIFOs, gVisor's own
//     pipes, and one cat each.
//   - The container's seccomp profile is not applied inside the sandbox
//     (Seccomp: 0): runsc's --oci-seccomp would apply it but ignores
//     errnoRet, which breaks thread creation under glibc 2.34+. The
//     Sentry runs under gVisor's own host seccomp filter.
//   - The Sentry's memory counts against the memory limit (of 256 MB,
//     Python reached 232 MB, 248 MB under runc); the OOM kill is reported
//     as under runc.
//   - /proc/version and uname -r name gVisor's kernel (4.19.0-gvisor);
//     dmesg shows its boot banner.
//
// # Cost
//
// python3 print(1), p50, same loop, 2-core VM at a load average of 5 to 8
// (BenchmarkPrint1, -benchtime 20x): fresh 419 ms against 469 ms for
// docker run --runtime=runsc (0.89×) and 280 ms for docker run under runc;
// warm after 1 s of think time 111 ms (0.24× the runsc CLI; the docker
// executor's warm run: 46 ms).
package gvisor
