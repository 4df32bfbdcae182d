package docker

// pyIdentity is the Python that both of a container's starters use to
// hand a process over to a run's uid: the pooled run's boot step
// (poolBootPython) and the session sandbox's process server
// (procServerPython). It is one text so that a pooled run and a session
// command start with the same identity and signal state, which the
// conformance suite compares with a fresh container's.
//
// drop(libc, ctypes, u, g) clears the bounding set (the caller holds
// CAP_SETPCAP; every capability up to the kernel's last, where the drop
// fails), the ambient and inheritable sets, sets the supplementary groups
// to the gid alone (as the engine does), sets the gid and the uid (which
// clears the permitted and effective sets), and checks the identity and
// that no capability is left in any set (/proc/self/status). It raises
// OSError naming the step that failed.
//
// defaults(libc, ctypes, signal) puts every signal at its default and
// unblocks them all, as a fresh process has them: Python ignores SIGPIPE
// and SIGXFSZ, and the container's process may have been started with
// others ignored (nohup's SIGHUP), which an exec would keep.
// rt_sigaction with a zeroed action (SIG_DFL) reaches the signals glibc
// keeps to itself too.
const pyIdentity = `def drop(libc, ctypes, u, g):
    cap = 0
    while libc.prctl(24, cap, 0, 0, 0) == 0:
        cap += 1
    if libc.prctl(47, 4, 0, 0, 0) != 0:
        raise OSError("ambient set")
    hdr = (ctypes.c_uint32 * 2)(0x20080522, 0)
    data = (ctypes.c_uint32 * 6)()
    if libc.capget(hdr, data) != 0:
        raise OSError("capget")
    data[2] = data[5] = 0
    if libc.capset(hdr, data) != 0:
        raise OSError("inheritable set")
    os.setgroups([g])
    os.setresgid(g, g, g)
    os.setresuid(u, u, u)
    st = dict(l.split(":\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\t" in l)
    if os.getresuid() != (u, u, u) or os.getresgid() != (g, g, g) or os.getgroups() != [g] or any(
            int(st.get(k, "1"), 16) for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")):
        raise OSError("identity")
def defaults(libc, ctypes, signal):
    nr = {"x86_64": 13, "aarch64": 134}.get(os.uname().machine)
    if nr is None:
        for n in range(1, signal.NSIG):
            try:
                signal.signal(n, signal.SIG_DFL)
            except (OSError, ValueError):
                pass
    else:
        act = (ctypes.c_ulong * 4)()
        for n in range(1, 65):
            if n not in (signal.SIGKILL, signal.SIGSTOP):
                libc.syscall(nr, n, act, None, 8)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
`
