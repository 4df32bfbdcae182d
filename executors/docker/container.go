package docker

import (
	"maps"
	"strconv"
	"strings"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/sandgate/sandgate/executors"
)

// Labels on every container the executor creates. labelManaged and
// labelExecutor are what the acceptance tooling and operators filter on;
// labelInstance scopes the orphan reaper to this gateway.
const (
	labelPrefix   = "sandgate."
	labelManaged  = labelPrefix + "managed"
	labelExecutor = labelPrefix + "executor"
	labelInstance = labelPrefix + "instance"
	labelSession  = labelPrefix + "session"
	labelRequest  = labelPrefix + "request"
	labelWarm     = labelPrefix + "warm"
)

// Paths inside the container: the ones every backend shows the code
// (executors.WorkspaceMount, executors.CodeDir).
const (
	workspaceMount = executors.WorkspaceMount
	codeDir        = executors.CodeDir
)

// codeTmpfsMB caps the tmpfs that holds the program file (the manager caps
// code at 256 KiB by default).
const codeTmpfsMB = 4

// bootScript is the container's command. It is fixed text: the code never
// passes through it. It reads the language and the request id from the
// first line of stdin, copies the rest of stdin (the program text, any
// bytes, any size) to codeDir/<request id>.<ext> on a tmpfs of its own
// (the path every backend gives a program: executors.ProgramPath), and runs the interpreter on it with stdin
// /dev/null. A warm container sits in `read` until its run arrives, so one
// container serves whichever language comes next. $1 is Node's heap cap in
// MB.
//
// The shell stays as PID 1 (like docker --init): the program gets normal
// signal semantics, and when the shell exits the kernel kills whatever the
// program left behind. Once the interpreter has exited the shell writes
// the exit status as a trailer (see exitTrailer) to stdout, then to
// stderr: the gateway has the whole output and the status as soon as both
// trailers arrive (runOutput), without waiting for the engine to close the
// streams and process the exit. A program can only forge its own exit
// status that way, which it controls anyway; a program forging both
// trailers makes its run answer early, and whatever it still does then is
// cut short by the container's removal, which starts at once.
//
// The interpreter flags match the subprocess executor: python3 -I (no
// PYTHON* variables, no user site, script dir not on sys.path) -u
// (unbuffered, so output written before a timeout kill is kept); bash
// without rc files.
const bootScript = `umask 022
IFS=' ' read -r lang id || exit 125
case "$lang" in
python) f=/run/sandgate/code/$id.py; set -- python3 -I -u ;;
bash) f=/run/sandgate/code/$id.sh; set -- bash --noprofile --norc ;;
javascript) f=/run/sandgate/code/$id.js; set -- node --max-old-space-size="$1" ;;
*) echo "sandgate: unknown language" >&2; exit 125 ;;
esac
cat >"$f" || exit 125
"$@" "$f" </dev/null
s=$?
printf '\0\036sandgate-exit:%d\036\0' "$s"
printf '\0\036sandgate-exit:%d\036\0' "$s" >&2
exit "$s"`

// bootScriptRelay is bootScript for a runtime with its own kernel
// (Config.OwnKernel). gVisor's kernel completes a write to the host pipe
// that carries the container's stdout only as far as the pipe has room and
// returns the short count, where Linux blocks until the whole buffer is
// written. POSIX allows that above PIPE_BUF, but programs rely on Linux:
// `python3 -u -c "print('x' * 10**6)"` loses all but 64 KiB (measured).
// So the program writes into FIFOs on the code tmpfs (not /tmp, where its
// own listing would show them), which are pipes of gVisor's
// own kernel with Linux's semantics, and one cat per stream, which retries
// short writes, relays them to the host pipes. The relays start before the
// program arrives, so a warm container has them running already.
//
// Once the program has exited, whatever it left running is killed (as the
// shell's exit would, being PID 1) so that the relays see the end of their
// FIFOs, then the shell waits for them to drain before it writes the exit
// trailer. The kill passes are bounded: a leftover that forks faster than
// eight passes kill keeps the relays open, and the run ends at its
// timeout. The relays are two processes of the run's MaxProcs.
const bootScriptRelay = `umask 022
o=/run/sandgate/code/.out e=/run/sandgate/code/.err
mkfifo -m 600 "$o" "$e" || exit 125
cat "$o" & r1=$!
cat "$e" >&2 & r2=$!
IFS=' ' read -r lang id || exit 125
case "$lang" in
python) f=/run/sandgate/code/$id.py; set -- python3 -I -u ;;
bash) f=/run/sandgate/code/$id.sh; set -- bash --noprofile --norc ;;
javascript) f=/run/sandgate/code/$id.js; set -- node --max-old-space-size="$1" ;;
*) echo "sandgate: unknown language" >&2; exit 125 ;;
esac
cat >"$f" || exit 125
"$@" "$f" </dev/null >"$o" 2>"$e"
s=$?
for _ in 1 2 3 4 5 6 7 8; do
n=0
for d in /proc/[0-9]*; do
p=${d#/proc/}
case "$p" in 1|"$r1"|"$r2") ;; *) kill -9 "$p" 2>/dev/null && n=1 ;; esac
done
[ "$n" = 0 ] && break
done
wait "$r1" "$r2"
printf '\0\036sandgate-exit:%d\036\0' "$s"
printf '\0\036sandgate-exit:%d\036\0' "$s" >&2
exit "$s"`

// exitTrailer prefixes and suffixes the exit status the boot script
// writes at the end of stdout and of stderr.
const (
	exitTrailerPrefix = "\x00\x1esandgate-exit:"
	exitTrailerSuffix = "\x1e\x00"
	exitTrailerMax    = len(exitTrailerPrefix) + 3 + len(exitTrailerSuffix)
)

// bootArg0 names the boot step in ps output.
const bootArg0 = "sandgate-boot"

// shape is everything fixed when a container is created. A warm container
// may serve a run only when the run's shape equals the container's.
type shape struct {
	image   string
	dir     string // host workspace, bind-mounted at /workspace
	uid     int
	gid     int
	limits  executors.Limits // output caps zeroed: they are not the container's
	runtime string
	// egress says the container is granted network (its environment has
	// the proxy variables, its boot script starts the forwarder) and ca
	// is the gateway CA its bundle adds ("" for none): both are fixed at
	// creation, so a warm container serves only runs that agree.
	egress bool
	ca     string
	// netns is the container whose network namespace the container
	// joins (a session's network holder, detached.go); "" is a
	// namespace of its own.
	netns string
	// layout is the session's path layout (layout.go): fixed at
	// creation, its mounts, cwd and HOME.
	layout executors.Layout
	// sandbox: a session sandbox (session.go), whose commands are execs:
	// docker-init is its PID 1, and a pooled one sleeps once claimed
	// instead of reading a program (poolsandbox.go).
	sandbox bool
}

// newShape resolves the shape of a run.
func newShape(image, dir string, uid, gid int, lim executors.Limits, runtime string) shape {
	lim.MaxOutputBytes, lim.MaxSpillBytes = 0, 0
	return shape{image: image, dir: dir, uid: uid, gid: gid, limits: lim, runtime: runtime}
}

// withEgress is s for a run granted network through eg (nil: none).
func (s shape) withEgress(eg executors.Egress) shape {
	if eg != nil {
		s.egress, s.ca = true, string(eg.CACertPEM())
	}
	return s
}

// createOptions turns a shape into the engine's create request.
func (e *Executor) createOptions(s shape, labels map[string]string, eb *egressBox) client.ContainerCreateOptions {
	hc := e.hostConfig(s)
	if eb != nil {
		hc.Mounts = append(hc.Mounts, eb.mount())
	}
	return client.ContainerCreateOptions{
		Config:     e.containerConfig(s, labels),
		HostConfig: hc,
	}
}

func (e *Executor) containerConfig(s shape, labels map[string]string) *container.Config {
	host := executors.Hostname
	if s.netns != "" {
		host = "" // the engine refuses one with a joined network namespace
	}
	return &container.Config{
		Image:           s.image,
		Hostname:        host,
		NetworkDisabled: e.netOff.Load() && s.netns == "", // netfiles.go
		User:            strconv.Itoa(s.uid) + ":" + strconv.Itoa(s.gid),
		// The attach stream carries the program text in and the output
		// out; StdinOnce closes the container's stdin when the gateway
		// closes its side.
		AttachStdin: true, AttachStdout: true, AttachStderr: true,
		OpenStdin: true, StdinOnce: true,
		Env:        sandboxEnv(s),
		Entrypoint: []string{"/bin/sh", "-c", e.bootScript(), bootArg0},
		Cmd:        []string{strconv.Itoa(s.limits.MemoryMB), map[bool]string{true: "egress", false: "-"}[s.egress]},
		WorkingDir: s.layout.Dir(),
		Labels:     labels,
	}
}

// bootScript is the container's command for this executor's runtime.
func (e *Executor) bootScript() string {
	if e.cfg.OwnKernel {
		return bootScriptRelayEgress
	}
	return bootScriptEgress
}

// The boot scripts with the egress bridge's part (egress.go), which does
// nothing unless the container is granted network ($2 = egress).
var (
	bootScriptEgress      = withEgressScript(bootScript)
	bootScriptRelayEgress = withEgressScript(bootScriptRelay)
)

// withEgressScript starts the egress forwarder first thing (so a warm
// container has it running before its run arrives) and puts its
// readiness check right before the program runs. A script without the
// anchors is a programming error caught at start-up.
func withEgressScript(script string) string {
	const first, beforeRun = "umask 022\n", "cat >\"$f\" || exit 125\n"
	if !strings.HasPrefix(script, first) || strings.Count(script, beforeRun) != 1 {
		panic("docker: boot script without the egress anchors")
	}
	script = first + egressScriptStart + strings.TrimPrefix(script, first)
	return strings.Replace(script, beforeRun, beforeRun+egressScriptReady, 1)
}

// sandboxEnv is the code's whole environment, every backend's
// (executors.BaseEnv): HOME is the workspace; NODE_PATH lets require()
// find packages installed in the workspace although the program itself
// lives in codeDir. A container granted network adds the proxy variables
// (executors.EgressEnv).
func sandboxEnv(s shape) []string {
	env := executors.EnvFor(executors.SandboxPATH, executors.SandboxLang, s.layout)
	if s.egress {
		env = append(env, executors.EgressEnv(s.ca != "")...)
	}
	return env
}

func (e *Executor) hostConfig(s shape) *container.HostConfig {
	init := s.sandbox // docker-init reaps what a sandbox's commands orphan
	netMode := container.NetworkMode("none")
	if s.netns != "" {
		netMode = container.NetworkMode("container:" + s.netns)
	}
	return &container.HostConfig{
		NetworkMode:    netMode,
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges"}, // and Docker's default seccomp profile
		ReadonlyRootfs: true,
		Tmpfs: map[string]string{
			"/tmp":  "rw,nosuid,nodev,mode=1777,size=" + strconv.Itoa(e.cfg.TmpfsMB) + "m",
			codeDir: "rw,nosuid,nodev,noexec,mode=1777,size=" + strconv.Itoa(codeTmpfsMB) + "m",
		},
		Mounts: append([]mount.Mount{workspaceBind(s.dir)}, layoutBinds(s)...),
		// Output travels over the attach stream only: no log file on the
		// engine's disk for a flood to fill.
		LogConfig: container.LogConfig{Type: "none"},
		Resources: e.resources(s.limits),
		Runtime:   s.runtime,
		Init:      &init,
	}
}

// workspaceBind mounts the session's directory read-write at /workspace.
// Type bind (not Binds) so a missing source is an error, never created.
func workspaceBind(dir string) mount.Mount {
	return mount.Mount{
		Type:        mount.TypeBind,
		Source:      dir,
		Target:      workspaceMount,
		BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate},
	}
}

// resources maps the run's limits onto cgroup limits and rlimits. Under
// a runtime with its own kernel the process limit is RLIMIT_NPROC inside
// it, and the pids cgroup bounds the runtime (see Config.OwnKernel).
func (e *Executor) resources(lim executors.Limits) container.Resources {
	mem := int64(lim.MemoryMB) << 20
	pids := int64(lim.MaxProcs)
	ulimits := []*container.Ulimit{
		{Name: "cpu", Soft: int64(lim.CPUSeconds), Hard: int64(lim.CPUSeconds)},
		{Name: "nofile", Soft: int64(lim.MaxOpenFiles), Hard: int64(lim.MaxOpenFiles)},
		{Name: "fsize", Soft: int64(lim.MaxFileSizeMB) << 20, Hard: int64(lim.MaxFileSizeMB) << 20},
		{Name: "core", Soft: 0, Hard: 0},
	}
	if e.cfg.OwnKernel {
		ulimits = append(ulimits, &container.Ulimit{Name: "nproc", Soft: pids, Hard: pids})
		pids = ownKernelHostPids(lim.MaxProcs)
	}
	return container.Resources{
		Memory:     mem,
		MemorySwap: mem, // memory+swap = memory: no swap
		NanoCPUs:   int64(e.cfg.CPUs * 1e9),
		PidsLimit:  &pids,
		Ulimits:    ulimits,
	}
}

// ownKernelHostPids is the pids cgroup of a sandbox whose code may have
// maxProcs tasks in its own kernel: the runtime's resting tasks plus two
// host tasks per task of the code, doubled for the runtime's threads under
// load. Reaching it kills the sandbox, not the host's ability to fork.
func ownKernelHostPids(maxProcs int) int64 {
	const rest = 64
	return int64(2 * (rest + 2*maxProcs))
}

// labels returns the labels of a container for session (and request, ""
// for a warm container).
func (e *Executor) labels(session, request string) map[string]string {
	l := make(map[string]string, len(e.cfg.Labels)+6)
	maps.Copy(l, e.cfg.Labels)
	l[labelManaged] = "true"
	l[labelExecutor] = string(e.cfg.Kind)
	l[labelInstance] = e.cfg.Instance
	if session != "" {
		l[labelSession] = session
	}
	if request != "" {
		l[labelRequest] = request
	} else {
		l[labelWarm] = "true"
	}
	return l
}

// instanceFilter selects every container of this executor instance.
func (e *Executor) instanceFilter() client.Filters {
	return make(client.Filters).
		Add("label", labelManaged+"=true").
		Add("label", labelExecutor+"="+string(e.cfg.Kind)).
		Add("label", labelInstance+"="+e.cfg.Instance)
}

// stdinHeader is what precedes the program text on the container's stdin:
// the language and the request id (the prologue has checked it names a
// file).
func stdinHeader(lang, requestID string) []byte {
	return []byte(lang + " " + requestID + "\n")
}
