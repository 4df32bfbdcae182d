package subprocess

// zygoteBoot is the program of a session's Python zygote, started as
// `python3 -I -u -c zygoteBoot` through the launch chain of a cold run
// (same PID and network namespace for the session, the session's mount
// namespace with its own /proc, the run's environment, cwd and stdin), but
// as root: the zygote itself never runs sandboxed code. It says "R" on
// descriptor 100 (a SOCK_SEQPACKET socket) and then serves one run per
// message: "rel\0cpu\0as\0nofile\0nproc\0fsize\0uid\0gid\0tmp" (rlimits in
// bytes and seconds, tmp the size of the run's /tmp) with three descriptors attached, the run's stdout and
// stderr pipes and its control socket, and for a run granted network a
// fourth, the network namespace of the run's egress bridge
// (egress_linux.go). End-of-file on 100 ends the zygote.
//
// For each run it forks three levels, because a new PID namespace takes a
// new process to unshare it and another to be its init:
//
//   - C joins the run's bridge namespace when it got one (setns; the
//     zygote's own namespace has only lo, down, and is what runs without
//     network share), unshares a PID and a mount namespace, forks P1 and, once P1 is
//     reaped, exits. The kernel reaps P1 only after every process of the
//     run's namespace is gone, and C holds the control socket until then,
//     so end-of-file on it tells the gateway that the whole tree is dead.
//   - P1 is PID 1 of the run: it mounts a fresh /proc (the run sees only
//     itself and its init, as in a cold run) and a fresh /tmp (the
//     zygote's root is the session's minimal root; each run gets its own
//     empty, size-capped /tmp, as a cold run does), forks R, reaps orphans and
//     waits for R or for end-of-file on the control socket (the gateway's
//     timeout or cancel). When R ended, it reports a death by signal on
//     stderr as the init shell of a cold run does ("Killed"; blocking
//     again, and best effort: the program shares that pipe and may have
//     made it non-blocking and full), writes
//     "X<status>\n" with the shell's 128+signal convention, and exits;
//     the kernel then kills whatever is left in the namespace, setsid'd
//     and double-forked processes included.
//   - R becomes the run: the run's rlimits (soft and hard, as ulimit sets
//     them), no supplementary groups, the sandbox uid/gid, no capability
//     left (checked: with SECBIT_NO_SETUID_FIXUP inherited from the
//     gateway the uid change would keep them, and there is no exec to drop
//     them, so R gives up and the run goes cold), the pipes as stdout and
//     stderr, every other descriptor closed (those /proc/self/fd lists:
//     os.closerange can fall back to a close(2) per number), dumpable
//     again (a cold run's exec would reset it; without it /proc/self
//     would be root's), the modules the zygote imported dropped from
//     sys.modules,
//     and then pythonMainSetup and pythonBootEnd exactly as a warm
//     interpreter: "G" on the control socket, and the program runs at
//     the top level of the -c program, where a file run's code runs.
//
// The spare. Forking C and P1, unsharing and mounting is about 3 ms of a
// run on a 2-core VM, and none of it depends on the run. So after each
// run without network the zygote prepares the next one ahead, while the
// session is idle: a spare C that has unshared, its P1 with /proc and a
// /tmp of the last run's size mounted, and R forked below it, each
// waiting on a SOCK_SEQPACKET pair of its own. A run that matches (three
// descriptors, the same /tmp size) is sent to all three, C first: C keeps
// the control socket, P1 and R go on exactly as above. From there the
// run cannot tell: its namespaces, /proc, /tmp, rlimits (set by R after
// the message) and uid are the ones an on-demand fork gives, and R's CPU
// limit still counts from the message, since R waited blocked. A send
// that fails before C took the run falls back to forking on demand; after
// that, the run ends without "G" and goes cold. A run granted network
// (its own bridge namespace, a fourth descriptor) is always forked on
// demand. The spare dies with the zygote: its sockets end, and the
// session's PID namespace ends with the zygote's init.
//
// The spare's R also copies its pages while it waits
// (madvise(MADV_POPULATE_WRITE) over every private writable mapping).
// A run's interpreter finalization writes the reference counts of nearly
// every object the zygote made, and each first write to a page the zygote
// shares is a copy-on-write fault: measured on the reference VM, go to exit
// of sys.exit(0) in a forked child took 5.0 ms, and 1.8 ms once its pages
// were copied ahead. The price is memory: R holds its own copy of the
// zygote's heap (~10 MB) while the session is idle; C and P1 share theirs.
// On a kernel without MADV_POPULATE_WRITE (before 5.14) the call fails
// and nothing changes.
//
// Before serving, the zygote moves every object it has to the garbage
// collector's permanent generation (gc.freeze): a run's collections, the
// ones at its exit included, then never walk the zygote's objects, whose
// pages a walk would copy-on-write one by one (measured: a print(1) run
// 14 ms without, 10 ms with). A run sees gc.get_freeze_count() non-zero;
// nothing else of it differs.
//
// A message without descriptors whose last field is a /tmp size only
// prepares the spare (a pooled zygote, zygote_pool_idle.go, is sent one
// when it is ready, so that its first run finds the spare there). R
// changes to its cwd again by name once it is the sandbox uid: a pooled
// zygote started in its slot's empty directory, which the claim's mount
// of the session workspace covers, and a cwd held across that mount would
// stay the covered directory.
//
// A failure before "G" exits silently: the gateway then runs the program
// cold. R inherits no_new_privs from the launch chain.
const zygoteBoot = pythonBootStart + `    _z = frozenset(_s.modules)
    import _socket as _S, _signal as _G, select as _P, resource as _L, ctypes as _C, gc as _F
    _lc = _C.CDLL(None, use_errno=True)
    _F.freeze()
    _q = _S.socket(fileno=100)
    _q.send(b"R")
    _h = _hz = None
    _sp = False
    while True:
        try:
            while _o.waitpid(-1, _o.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass
        _m, _a, _f, _x = _q.recvmsg(4096, _S.CMSG_SPACE(16))
        _d = []
        for _l, _t, _b in _a:
            if _l == _S.SOL_SOCKET and _t == _S.SCM_RIGHTS:
                _d += [int.from_bytes(_b[_i:_i + 4], _s.byteorder) for _i in range(0, len(_b) - 3, 4)]
        if not _m:
            _o._exit(0)
        _e = _m.split(b"\0")
        _k = len(_d) in (3, 4) and not _f & _S.MSG_CTRUNC and len(_e) == 9
        if _k and len(_d) == 3 and _h and _e[8] == _hz:
            _b = b"".join(_i.to_bytes(4, _s.byteorder) for _i in _d)
            try:
                for _y in _h:
                    _y.sendmsg([_m], [(_S.SOL_SOCKET, _S.SCM_RIGHTS, _b)])
                    _k = False
            except OSError:
                pass
            for _y in _h:
                _y.close()
            _h = None
        if _k and _o.fork() == 0:
            break
        for _i in _d:
            _o.close(_i)
        if len(_d) in (0, 3) and len(_e) == 9:
            _hz = _e[8]
        if _h is None and _hz is not None:
            _v = [_S.socketpair(_S.AF_UNIX, _S.SOCK_SEQPACKET) for _i in range(3)]
            if _o.fork() == 0:
                for _y in _v:
                    _y[1].close()
                _v = [_y[0] for _y in _v]
                _sp = True
                break
            for _y in _v:
                _y[0].close()
            _h = [_y[1] for _y in _v]
    _q.detach()
    if _sp:
        _o.close(100)
        if _lc.unshare(0x20000000 | 0x00020000):
            _o._exit(1)
        _p = _o.fork()
        if _p:
            _v[1].close()
            _v[2].close()
            _m, _a, _f, _x = _v[0].recvmsg(4096, _S.CMSG_SPACE(12))
            if not _m or _f & _S.MSG_CTRUNC or len(_a) != 1 or len(_a[0][2]) != 12:
                _o._exit(0)
            _d = [int.from_bytes(_a[0][2][_i:_i + 4], _s.byteorder) for _i in range(0, 12, 4)]
            _o.dup2(_d[2], 100)
            for _i in _d:
                _o.close(_i)
            _o.waitpid(_p, 0)
            _o._exit(0)
        _v[0].close()
        if _lc.mount(b"proc", b"/proc", b"proc", 2 | 4 | 8, None) or _lc.mount(b"tmpfs", b"/tmp", b"tmpfs", 2 | 4, b"size=" + _hz + b",mode=1777"):
            _o._exit(1)
        _p = _o.fork()
        _y = _v[2 if _p == 0 else 1]
        _v[1 if _p == 0 else 2].close()
        if _p == 0:
            with open("/proc/self/maps") as _b:
                for _l in _b:
                    _a = _l.split()
                    if _a[1].startswith("rw") and _a[1][3] == "p":
                        _i, _j = (int(_t, 16) for _t in _a[0].split("-"))
                        _lc.madvise(_C.c_void_p(_i), _C.c_size_t(_j - _i), 23)
        _m, _a, _f, _x = _y.recvmsg(4096, _S.CMSG_SPACE(12))
        if not _m or _f & _S.MSG_CTRUNC or len(_a) != 1 or len(_a[0][2]) != 12:
            _o._exit(0)
        _y.close()
        _e = _m.split(b"\0")
        _d = [int.from_bytes(_a[0][2][_i:_i + 4], _s.byteorder) for _i in range(0, 12, 4)]
        _o.dup2(_d[2], 100)
        _o.close(_d[2])
    else:
        if _h:
            for _y in _h:
                _y.close()
        _o.dup2(_d[2], 100)
        _o.close(_d[2])
        if len(_d) == 4:
            if _lc.setns(_d[3], 0x40000000):
                _o._exit(1)
            _o.close(_d[3])
        if _lc.unshare(0x20000000 | 0x00020000):
            _o._exit(1)
        _p = _o.fork()
        if _p:
            _o.close(_d[0])
            _o.close(_d[1])
            _o.waitpid(_p, 0)
            _o._exit(0)
        if _lc.mount(b"proc", b"/proc", b"proc", 2 | 4 | 8, None) or _lc.mount(b"tmpfs", b"/tmp", b"tmpfs", 2 | 4, b"size=" + _e[8] + b",mode=1777"):
            _o._exit(1)
        _p = _o.fork()
    if _p:
        _o.close(_d[0])
        _v = _P.poll()
        _v.register(_o.pidfd_open(_p), _P.POLLIN)
        _v.register(100, _P.POLLIN)
        _u = None
        while _u is None:
            _k = _v.poll(1000)
            while True:
                try:
                    _i, _t = _o.waitpid(-1, _o.WNOHANG)
                except ChildProcessError:
                    break
                if not _i:
                    break
                if _i == _p:
                    _u = _t
            if _u is None and any(_j == 100 for _j, _y in _k):
                _o._exit(0)
        _t = _o.waitstatus_to_exitcode(_u)
        if _t < 0 and _t not in (-2, -13):
            try:
                _o.set_blocking(_d[1], True)
                _o.write(_d[1], ("%s\n" % (_G.strsignal(-_t) or "Signal %d" % -_t)).encode())
            except OSError:
                pass
        _o.write(100, b"X%d\n" % (128 - _t if _t < 0 else _t))
        _o._exit(0)
    for _i, _j in zip((_L.RLIMIT_CPU, _L.RLIMIT_AS, _L.RLIMIT_NOFILE, _L.RLIMIT_NPROC, _L.RLIMIT_FSIZE), _e[1:6]):
        _L.setrlimit(_i, (int(_j), int(_j)))
    _o.setgroups([])
    _o.setresgid(int(_e[7]), int(_e[7]), int(_e[7]))
    _o.setresuid(int(_e[6]), int(_e[6]), int(_e[6]))
    _o.chdir(_o.getcwd())
    with open("/proc/self/status") as _b:
        if any(_l.startswith(("CapPrm:", "CapEff:", "CapAmb:")) and int(_l.split()[1], 16) for _l in _b):
            _o._exit(1)
    _o.dup2(_d[0], 1)
    _o.dup2(_d[1], 2)
    for _i in [int(_j) for _j in _o.listdir("/proc/self/fd")]:
        if _i > 2 and _i != 100:
            try:
                _o.close(_i)
            except OSError:
                pass
    if _lc.prctl(4, 1, 0, 0, 0):
        _o._exit(1)
    for _k in [_k for _k in _s.modules if _k not in _z]:
        del _s.modules[_k]
    _r = _o.fsdecode(_e[0])
` + pythonMainSetup + pythonBootEnd
