// Package subprocess is the hardened host-process executor (DESIGN.md §6).
//
// # What a run gets
//
// As root (IsolationNamespaces), each run is:
//
//   - in a minimal root of its own (rootfs_linux.go, bubblewrap's model):
//     the system directories read-only (from Config.RootDir, the runtime
//     root filesystem the images build exports, or the host's own with
//     only the /etc entries a run needs), the session workspace
//     read-write at /workspace (the cwd and HOME), a private size-capped
//     /tmp, a minimal /dev, a fresh /proc, and no other host path: no
//     /home, /root, /var, data directory or gateway source tree. The
//     system part is built once per executor as a base mount namespace
//     (a tmpfs root, the binds, pivot_root, the old root detached); each
//     run is forked from a thread of its own that enters a private copy
//     of it and attaches the run's workspace, /tmp and program
//     directory (startInRoot). That costs a setns, an unshare and a few
//     mounts, no extra exec, and measured about what starting in the
//     host's root costs, whose larger mount table each new namespace
//     copies (BenchmarkRootCost, the launch chain running true, launches
//     alternating: 1.055×, 3.14 ms against 2.97 ms, n=300 on a quiet
//     machine; 0.94× at load average ~30). A zygote run's /tmp is
//     mounted ahead by the zygote's spare; the zygote path measured 0.51×
//     raw python3 (BenchmarkStartCost/python, n=300);
//   - PID 1 of a new PID namespace is the init step (a POSIX shell, root,
//     Pdeathsig=SIGKILL): when it dies, on a timeout, a cancelled request
//     or the gateway's own death, the kernel kills every process in the
//     namespace, setsid'd and double-forked ones included;
//   - a new network namespace with only lo (down); a run granted network
//     gets one with lo up and the gateway's egress listener in it (see
//     "Network by policy");
//   - a new mount namespace (propagation private) with a fresh /proc, so
//     the gateway's processes, their environ and cmdline are not visible;
//   - the sandbox uid/gid (default 60000) with no supplementary groups, so
//     0600 root files (tokens, config) are unreadable;
//   - no_new_privs, so setuid/file-capability binaries cannot raise it;
//   - RLIMIT_CPU, RLIMIT_AS, RLIMIT_NOFILE, RLIMIT_NPROC, RLIMIT_FSIZE
//     (and RLIMIT_CORE=0) set before the interpreter starts;
//   - its own process group, an environment of PATH, HOME and LANG only
//     (plus PWD, which the init shell exports), stdin /dev/null, and no
//     other inherited descriptor: New sets close-on-exec on any
//     descriptor the gateway itself inherited without it (os/exec would
//     otherwise pass it to every run).
//
// A gateway that is not root (IsolationUserNS) gets the same root, PID and
// network namespaces, uid/gid (mapped onto its own uid), rlimits and
// no_new_privs through unprivileged user namespaces: the init shell sets
// the rlimits and execs Debian's bubblewrap with the same plan
// (rootPlan.bwrapArgs). Zygotes need root, so Python uses warm
// interpreters there. Where neither works (no root and no bubblewrap, or
// user namespaces disabled), the executor is IsolationNone: Available
// fails with the reason, which /readyz and the policy input show, and
// nothing runs. There is no weaker mode to fall back to.
//
// # Launch chain and its measured cost
//
// The rlimits and the /proc mount need a step between fork and exec. The
// chain is
//
//	Go fork (CLONE_NEWPID|CLONE_NEWNET, Setpgid, Pdeathsig, on a thread
//	with no_new_privs) → /bin/sh: ulimit …; fork → unshare --mount-proc
//	--setuid --setgid → interpreter
//
// Measured on the 2-core development VM while other builds ran, p50 over
// 300 iterations, each running python3 -I -u -c 'print(1)' once raw (same
// binary, same minimal environment) and once through the executor:
//
//	go test -run '^$' -bench StartCost -benchtime 300x -count 3 ./executors/subprocess/
//	load average ~20: raw p50 9.1–10.0 ms, executor p50 12.5–14.2 ms, overhead 3.4–4.2 ms
//	quieter runs:     raw p50 9.0–9.6 ms,  executor p50 12.7 ms,      overhead 3.1–3.5 ms
//
// The executor figure includes the workspace checks and writing and
// removing the code file (~0.7 ms together) and the network namespace
// (~0.3 ms). The target is raw + 5 ms. Alternatives measured with
// the same method before choosing (p50 over raw):
//
//   - Go clone flags and Credential alone: +0.6–0.9 ms, but no rlimits and
//     no fresh /proc (the Go runtime has no hook between fork and exec);
//   - prlimit(1) → unshare(1): +2.8 ms; adding setpriv(1) for
//     no_new_privs and Pdeathsig: +4.0 ms (hence the no_new_privs spawner
//     thread and the shell staying as PID 1 instead);
//   - re-exec of a tiny Go helper binary: +3 ms; a binary that only links
//     OPA takes 4.0 ms to start and exit (/bin/true: 0.5 ms), so re-exec'ing
//     the gateway itself would cost ≥ +6 ms before doing anything: rejected.
//
// The same measurements for warm runs are under "Warm interpreters".
//
// New runs a probe through the same chain and checks from inside every
// limit, the ids, no_new_privs, the interfaces and /proc's PID 1: a host
// where the chain silently fails (a container without CAP_SYS_ADMIN, a
// shell whose ulimit units differ) is caught at start, not in production.
//
// # Warm interpreters
//
// Most of what is left is the interpreter's own start-up, which a cold run
// pays on the request's critical path. Unless Config.DisableWarm is set,
// when a run of a session (Spec.SessionID not empty) ends, the executor
// starts that session's next interpreter in the background through
// exactly the launch chain above (same namespaces, rlimits, uid/gid, cwd,
// environment, stdin), blocked in a tiny bootstrap that waits on
// descriptor 100, one end of a socketpair; Prewarm does the same ahead of
// a session's first run. The session's next run is handed to it when it
// names the same language, uid/gid, workspace (path, and the directory's
// device and inode), Network flag and rlimit-relevant limits (MemoryMB,
// CPUSeconds, MaxProcs, MaxOpenFiles, MaxFileSizeMB), and the interpreter
// binary is unchanged on disk. Anything else kills the warm interpreter
// and the run goes cold. The code file is written as for a cold run and
// its relative path sent to the bootstrap, which then runs it as the cold
// path would:
//
//   - python: as __main__ with the same sys.argv, sys.orig_argv, sys.path,
//     -I isolation, __file__/__loader__/__cached__, tracebacks (absolute
//     path, masked to /workspace), exit codes, excepthook and atexit
//     behaviour (see pythonBoot);
//   - javascript: as the main module, loaded by node's own loader from its
//     real path (see nodeBootTemplate), so require.main, module paths,
//     the CommonJS/ES module decision and stack traces are the cold ones;
//   - bash: the waiting shell execs bash with the cold argv and
//     environment at the hand-off; only the launch chain was warm.
//
// Then nothing differs from a cold run: the same proc, await and output
// code apply, so timeouts and cancellation kill the whole tree at PID 1,
// and capture, caps, masking and spill are the run's own (output caps are
// not part of the match: they apply from the hand-off). The timeout counts
// from the hand-off. The bootstraps print nothing; should an interpreter
// print at start-up, that output is kept (up to 64 KiB) and becomes the
// start of the run's output, as it would cold. A bootstrap says "G" before
// anything of the program runs; a warm interpreter that dies before that
// is not used and the run goes cold, so a broken warm interpreter costs
// time, never a wrong result.
//
// A warm interpreter is single-use and per session: it runs one program
// of its own session and is never reused or shared. It is killed by
// ReleaseSession (which returns once it is gone, and stops a run still in
// progress from starting a successor), after Config.WarmIdleTTL unused
// (default 30 s), by Close, and to make room: at most Config.WarmMax
// (default 8) are idle or starting at once, the oldest evicted first. It
// dies with the gateway like a run (Pdeathsig on its init step). The
// node preload lives in a root-owned 0711 directory the executor makes
// under Config.WarmDir (default os.TempDir()) and removes on Close.
//
// Measured like the cold figures above (the same 2-core VM, load average
// 13–23 from other builds, 300 iterations each; the warm run waits,
// untimed, until the session's interpreter is ready, as it is when an
// agent thinks between requests):
//
//	go test -run '^$' -bench StartCost -benchtime 300x -count 3 ./executors/subprocess/
//	python3 -I -u -c 'print(1)': raw 10.9–13.7 ms, cold 13.5–18.3 ms, warm 4.2–5.3 ms (warm/raw 0.38–0.39)
//	node -e 'console.log(1)':    raw 67–96 ms,     cold 97–105 ms,    warm 29–35 ms   (warm/raw 0.30–0.46)
//	bash -c 'echo 1':            raw 1.7 ms,       cold 5.6–6.9 ms,   warm 4.2–5.3 ms
//
// A warm python run costs the hand-off (~0.5 ms), running print(1), the
// interpreter's exit and the tree's teardown, plus the workspace checks
// and the code file (~0.7 ms). Bash starts cheaply, so warm only saves it
// part of the chain. Through the gateway (bench/, c=1, python print(1),
// alternating with raw; two runs each), with a copy of bench/ that pauses
// 30 ms after every request on both sides: warm p50 7.5–9.1 ms against
// raw 10.3–11.1 ms, and with warm interpreters disabled 15.7–18.2 ms. With
// requests back to back in one session, as bench/ sends them, warm and
// cold are the same (~17 ms against raw ~10 ms): the next interpreter
// starts when a run ends, so it is a millisecond into its start-up when
// the next request arrives (the run waits for it rather than start
// another, but gains nothing).
//
// What a warm run can observe that a cold one cannot:
//
//   - Its processes' start time (/proc/self/stat, ps, psutil) is the
//     spawn's, up to WarmIdleTTL earlier, and for python and node
//     /proc/self/cmdline (ps) shows the bootstrap's command line (python3
//     -I -u -c <bootstrap>; node --max-old-space-size=N --require
//     <warm dir>/boot.js <placeholder>), not the code file. For bash the
//     command line and environ are the cold ones.
//   - Python: the bootstrap's frame stays below the program's. Stack
//     introspection from module level (sys._getframe(1), inspect.stack(),
//     traceback.print_stack(), warnings.warn with a stacklevel past the
//     module) sees a "<string>" frame, and the recursion limit leaves two
//     fewer levels (996 instead of 998 reachable at the default 1000).
//     Tracebacks of uncaught exceptions are cleaned of it. An audit hook
//     the program installs sees, after an uncaught exception, the
//     bootstrap's one-shot hook in the "sys.excepthook" event.
//   - Node 18 (the runtime root's, Debian bookworm): process.moduleLoadList
//     lists a few more internal modules (the preload's require of fs
//     comes before the ES module loader's set-up); Node 20 loads none.
//   - Node: require('module')._pathCache (internal) holds the placeholder
//     path's entry, and while the run lasts the placeholder symlink exists
//     in the warm directory (outside the workspace).
//   - The interpreter's start-up happened at spawn time: a change to what
//     it reads at start-up (site-packages .pth files, say) made in between
//     is not seen; a replaced interpreter binary is (it is in the match).
//   - RLIMIT_CPU counts from the spawn, as a cold run's counts from its
//     start: both include the interpreter's start-up, and a waiting
//     interpreter is blocked in read(2) and uses no CPU
//     (TestWarmIdleCostsNothing), so the bound is unchanged. For bash the
//     waiting shell's start-up (~1 ms of CPU) is counted too.
//   - RLIMIT_NPROC counts per uid: a waiting interpreter holds one process
//     (node: 7 threads) of its session's budget. It is started only after
//     a run ended, so it never shares the budget with the run that started
//     it, but a concurrent run of the same session does.
//   - Memory: a waiting python3 holds ~8.5 MB resident, node ~38 MB, bash
//     ~4 MB, plus ~1.7 MB for its init shell, under the same RLIMIT_AS as a
//     run; at most WarmMax of them exist.
//
// # Zygotes (Python, namespace isolation)
//
// A warm interpreter takes the interpreter's start-up off the critical
// path but not off the CPU: every run still pays the init chain, a new
// network namespace and a whole interpreter start-up (~12 ms of CPU here),
// which bounds throughput once requests are concurrent. So with namespace
// isolation, unless Config.DisableZygote (or DisableWarm) is set, Python
// runs of a session go to the session's zygote instead: one interpreter
// started through the launch chain above, but as root, in the session's
// PID and network namespaces and a private mount namespace, that forks a
// new process tree per run (see zygoteBoot): C unshares a PID and a mount
// namespace; P1, PID 1 of the run, mounts a fresh /proc and waits; R sets
// the run's rlimits (soft = hard, as ulimit does), drops every group and
// becomes the sandbox uid/gid, takes the run's stdout and stderr pipes
// (received over the zygote's socket with SCM_RIGHTS), closes every other
// descriptor, drops the modules the zygote imported from sys.modules, and
// runs the code file exactly as a warm interpreter does. P1 reports R's
// status, and the init shell's "Killed"-style line for a death by signal;
// when P1 exits the kernel kills whatever is left in the run's namespace.
// The timeout and cancellation shut the run's control socket, on which P1
// exits; a run that does not end within KillGrace of that takes the whole
// zygote down with it. The gateway's end of the control socket sees
// end-of-file only once C has reaped P1, which the kernel allows only
// once the run's namespace is empty: so a run is over when its tree is
// gone, as a cold run is.
//
// The C, P1 and R of the session's next run are forked ahead, while the
// session is idle (the spare, see zygoteBoot), so a run pays for passing
// its message and descriptors, not for three forks and the mounts.
//
// The first run of a session starts its zygote and runs in it; every later
// run of the session with the same uid/gid, workspace (path, device and
// inode), Network flag and interpreter binary does too, whatever its
// limits, concurrently if need be. Anything else replaces the zygote. A
// zygote dies with the gateway, and is killed by ReleaseSession (once its
// runs ended), after WarmIdleTTL without a run, to make room (at most
// WarmMax, least recently used first), and by Close. Three zygotes in a
// row that never become ready (a Python older than 3.9) turn zygotes off
// and Python falls back to warm interpreters. A zygote run that cannot
// start (nothing of the program ran: no "G") goes cold.
//
// Measured on the same 2-core VM (print(1), 300 iterations, the run
// waiting untimed until the zygote is ready):
//
//	go test -run '^$' -bench StartCost/python -benchtime 300x ./executors/subprocess/
//	raw 10.2 ms, cold 13.0 ms, zygote 5.2 ms (0.51× raw)
//
// and through the gateway (make bench-report: requests back to back in one
// session, alternating with raw python3 in the same run): p50 7.97 ms
// against raw 10.3 ms at c=1 (0.77×); 161 against 171 req/s at c=8, where
// the CPU is the bound. A run forked on demand costs three forks (~1 ms
// each on this VM), an unshare and two mounts, and R's interpreter
// finalization, whose writes copy the zygote's pages one by one; the spare
// (zygoteBoot) takes all of that off the run's path while the session is
// idle, and gc.freeze in the zygote keeps the collector from walking (and
// copying) its objects. Before the spare: zygote 0.78× raw, the gateway
// 1.04×.
//
// What a zygote run can observe that a cold one cannot, beyond the warm
// list above (frames, start-up time, cmdline):
//
//   - The zygote's state is every run's starting state: runs of a session
//     share the hash seed (set iteration order), the address-space layout,
//     and gc.get_freeze_count() is not zero. Runs of other sessions never
//     share a zygote.
//   - The session's network namespace is the same for all its runs (a run
//     still has no network: no interface but the namespace's own
//     loopback); two concurrent runs of the session could meet on it or on
//     an abstract UNIX socket.
//   - /proc/self/mountinfo lists one more proc mount (the session's).
//   - RLIMIT_CPU counts from R's fork: the interpreter's start-up is not
//     in it, so a run gets slightly more CPU than cold. RLIMIT_AS covers
//     the zygote's mappings, as a cold run's covers its own start-up.
//   - Memory: a zygote holds ~9.7 MB resident (its pages are shared with
//     its runs until written), plus ~1.6 MB for its init shell.
//
// # Pooled zygotes (a session's first run)
//
// A session's first Python run used to start its zygote on the request's
// path: an interpreter start-up, then the run forked on demand (no spare
// yet). Timing points in the gateway (bench -only ttfo-subprocess, n=30,
// load average ~20, p50) put the zygote's start at 33 ms and that first
// run at 26 ms of a session create to first output of 88 ms; every other
// step (HTTP, the session record, the policy decision, the write-ahead
// audit record, the code file) was under 1 ms at p50. So the executor
// keeps zygotes of no session ready, each with its spare forked, and a
// first run claims one (zygote_pool_idle.go: the claim mounts the
// session's workspace onto the zygote's slot, which mount propagation
// carries into its namespaces; zygote_pool_slots_linux.go: the slots
// exist only in a mount namespace of the executor's). A pooled zygote
// serves one session and nothing of any session was in its root before
// the claim (TestZygotePoolServesOneSession); a gateway killed with a
// full pool leaves nothing behind (TestZygotePoolGoneWithGateway).
// Config.ZygotePool sizes it. Measured the same way after: 15.1 ms p50
// against raw python3 9.1 ms in the same run (was 86 ms against 11.8
// ms). Sessions created back to back faster than zygotes start (the
// pool refills one at a time, after the claiming run) drain it, and
// those runs start their own zygote as before: under load average ~26 a
// later run measured 75 ms against raw 19.8 ms. Only as root: a rootless
// gateway has no zygotes, and PoolStatus says so.
//
// # Network by policy (the egress bridge)
//
// A run granted network (Spec.Network, with Spec.Egress) still has no
// interface but lo: it reaches the gateway's egress proxy at
// 127.0.0.1:3128 and nothing else (DESIGN.md §9). The gateway makes the
// run's network namespace itself before the run starts (egress_linux.go):
// a thread of its own unshares a new network namespace, brings lo up and
// listens on 127.0.0.1:3128 there (a socket belongs to the namespace of
// the thread that made it), and the namespace is kept by a descriptor.
// The run then joins that namespace instead of making an empty one: a
// cold run is forked from a thread that setns'd into it, a zygote run's
// C process setns's into it (the descriptor travels with the run's pipes
// over the zygote's socket), and a warm interpreter started for runs
// granted network waits in a namespace of its own made the same way,
// whose listener serves the run it is handed to. The listener is the
// gateway's: each accepted connection goes to Spec.Egress.ServeConn under
// the run's context (executors.ServeEgress), and the run's end closes the
// listener and every connection before Execute returns. Because the
// listener exists before the program's first instruction, the first
// connection never races it; because nothing else is in the namespace,
// a tool that ignores the proxy variables finds nothing to connect to.
//
// The run's environment gets the proxy variables (executors.EgressEnv),
// and when the Egress has a CA, the CA variables pointing at
// /run/sandgate/egress/ca.pem: the root's own system bundle plus the
// gateway CA (executors.EgressBundle), written once per CA in the
// executor's run directory and bound read-only into the run's root. A
// warm interpreter or zygote read its environment when it started, so
// the grant and the CA are part of their match (warmKey.egress): a
// session alternating network and no network replaces them.
//
// Only as root (IsolationNamespaces): making or joining a network
// namespace needs CAP_SYS_ADMIN, and a gateway that is not root can do
// neither (unshare of a user namespace needs a single-threaded process;
// setns into bubblewrap's needs CAP_SYS_ADMIN in the gateway's own user
// namespace). So in IsolationUserNS network_grant is false and a run
// granted network is refused (executors.ErrCapabilityMissing), as is one
// without an Egress in any mode: never the host's network instead.
//
// # Workspace
//
// The code's cwd and HOME are /workspace, the session directory bound into
// its root; the host path is still replaced by /workspace in all output,
// as /proc/self/mountinfo can name it. The directory itself (never its
// contents, never by path) is chowned to the sandbox uid through an
// O_NOFOLLOW descriptor. The program text is written outside the
// workspace, to a per-workspace directory of the executor's that the run
// sees read-only as /run/sandgate/code/<request_id>.<ext> (so an agent's
// ls or grep of /workspace never finds it), and removed after the run;
// output beyond the response cap goes to .sandgate/outputs/<request_id>.log. The code
// owns the workspace and may plant symlinks or hard links there, so the
// gateway touches it only through an os.Root and creates files with O_EXCL.
//
// # Known limits
//
//   - As root, each session has its own uid (Spec.UID), but RLIMIT_NPROC
//     is per uid, so concurrent runs of a session share its process
//     budget. Without root every run is the gateway's uid on the host.
//   - RLIMIT_AS is not a memory cgroup: it bounds virtual memory per
//     process, and OOMKilled is never set.
//   - WebAssembly memories do not fit Node's address-space limit.
//   - With no runtime root configured, the toolchain is the host's: the
//     data stack imports only if the host has it.
//   - Linux only.
package subprocess
