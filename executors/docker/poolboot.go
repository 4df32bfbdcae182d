package docker

import (
	"slices"
	"strconv"
	"strings"

	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"
)

// poolBootPrefix is a pooled container's command, fixed text like
// bootScript. It runs as root with CAP_SETUID, CAP_SETGID and CAP_SETPCAP
// (plus CAP_SYS_ADMIN inside gVisor's kernel, for the binds) and waits for
// its claim: the first line of stdin is the session's uid and gid, which
// the gateway writes after it has mounted the workspace on the slot. Both
// must be decimal and neither 0. Under gVisor it then binds the slot's
// workspace (mounted in the sandbox at poolSlotMount) onto each target
// ($4...). A /workspace that still holds the slot's marker (the mount
// never reached the container: an engine in another mount namespace) is
// refused with exit 125 and the reason, never run in. Then setpriv sets the identity, with the gid as the only
// supplementary group (what the engine gives a container's user, so a
// pooled run sees the groups an unpooled one does), clears the inheritable, ambient and bounding capability sets
// (the permitted and effective ones go with the uid change) and execs
// the run's boot script ($3), which enters the working directory anew
// (the claim's mount covers the one the container started in) and reads
// the program as in any run. $1 and $2 are the boot script's own.
const poolBootPrefix = `IFS=' ' read -r u g || exit 125
case "$u" in ''|0|*[!0-9]*) exit 125 ;; esac
case "$g" in ''|0|*[!0-9]*) exit 125 ;; esac
m=$1 x=$2 s=$3
shift 3
for t in "$@"; do mount --bind /run/sandgate/slot/ws "$t" || exit 125; done
if [ -e /workspace/.sandgate-unclaimed ]; then echo "sandgate: the workspace did not reach the pooled sandbox" >&2; exit 125; fi
exec setpriv --reuid="$u" --regid="$g" --groups="$g" --inh-caps=-all --bounding-set=-all -- /bin/sh -c "$s" sandgate-boot "$m" "$x"`

// poolBootLauncher is a pooled container's command: it runs the claim
// step in Python when the image has python3 (poolBootPython, $1), and
// poolBootPrefix ($2) in the shell otherwise, or when that python3 lacks
// what the step needs. Both do the same; the Python step makes the binds
// and changes the identity with system calls in its own process, where
// the shell's execs mount and setpriv after the claim: under gVisor each
// of those is a process start of 10-13 ms on the path of a session's
// first output (issue 34). Python starts while the container idles,
// before any claim. Its $0 is bootArg0.
const poolBootLauncher = `p=$1 q=$2
shift 2
if command -v python3 >/dev/null 2>&1; then exec python3 -I -S -c "$p" "$0" "$q" "$@"; fi
exec /bin/sh -c "$q" "$0" "$@"`

// poolBootPython is poolBootPrefix as one Python process, fixed text: it
// reads the claim's line "uid gid" byte by byte (what follows on stdin is
// the boot script's), refuses anything but two decimals other than 0,
// binds the slot's workspace onto each target (under gVisor), refuses a
// /workspace still marked unclaimed, then clears the bounding set (it
// holds CAP_SETPCAP; every capability up to the kernel's last, where the
// drop fails), the ambient and inheritable sets, sets the supplementary
// groups to the gid alone (as the engine does), sets the gid and the uid (which clears the permitted and
// effective sets), checks the identity and that no capability is left in
// any set (/proc/self/status), puts every signal at its default
// (pyIdentity's drop and defaults), and execs the boot script as setpriv
// does. Any failure, an exception included, exits
// 125 before the exec.
// argv: bootArg0, poolBootPrefix, the boot script's $1 and $2, the
// script, targets.
const poolBootPython = `import os
import sys
` + pyIdentity + `def die(msg=""):
    if msg:
        os.write(2, b"sandgate: " + msg.encode() + b"\n")
    os._exit(125)
def claim_line():
    b = b""
    while not b.endswith(b"\n"):
        c = os.read(0, 1)
        if not c or len(b) > 40:
            die()
        b += c
    f = b.decode("ascii", "replace").split()
    if len(f) != 2 or not all(x.isascii() and x.isdigit() and int(x) > 0 for x in f):
        die()
    return int(f[0]), int(f[1])
def main(ctypes, signal):
    u, g = claim_line()
    name, _, m, x, script = sys.argv[1:6]
    libc = ctypes.CDLL(None, use_errno=True)
    for t in sys.argv[6:]:
        if libc.mount(b"/run/sandgate/slot/ws", t.encode(), None, 4096, None) != 0:
            die("bind " + t + ": " + os.strerror(ctypes.get_errno()))
    if os.path.exists("/workspace/.sandgate-unclaimed"):
        die("the workspace did not reach the pooled sandbox")
    try:
        drop(libc, ctypes, u, g)
    except OSError as e:
        die(str(e))
    defaults(libc, ctypes, signal)
    os.execv("/bin/sh", ["/bin/sh", "-c", script, name, m, x])
try:
    try:
        import ctypes
        import signal
    except ImportError:
        # A python3 without ctypes: the shell step, which has read nothing.
        os.execv("/bin/sh", ["/bin/sh", "-c", sys.argv[2], sys.argv[1]] + sys.argv[3:])
    main(ctypes, signal)
except BaseException as e:
    die(type(e).__name__)
`

// poolSlotMount is where a sandbox with its own kernel sees its slot.
const poolSlotMount = "/run/sandgate/slot"

// adjust turns a run's create request of shape key into a pooled
// container's: root until claimed, the prefix above, and the slot in
// place of the workspace.
func (p *sandboxPool) adjust(slot string, key shape) func(*client.ContainerCreateOptions) {
	return func(o *client.ContainerCreateOptions) {
		own := p.e.cfg.OwnKernel
		targets := useSlot(o, slot, key, own)
		if key.sandbox {
			// poolsandbox.go: no boot step, nothing to hand over.
			if p.e.procServers() {
				procServerCommand(slot)(o)
			} else {
				sandboxCommand(o)
			}
			return
		}
		caps := []string{"SETUID", "SETGID", "SETPCAP"}
		// The cd sets OLDPWD, which an unpooled run does not have (the
		// conformance fingerprint): unset before the boot script.
		args := []string{strconv.Itoa(key.limits.MemoryMB), "-", "cd " + shellQuote(key.layout.Dir()) + " || exit 125\nunset OLDPWD\n" + p.e.bootScript()}
		if own {
			o.HostConfig.Mounts = append(o.HostConfig.Mounts, mount.Mount{Type: mount.TypeBind, Source: slot, Target: poolSlotMount,
				BindOptions: &mount.BindOptions{Propagation: mount.PropagationRSlave}})
			caps = append(caps, "SYS_ADMIN")
			args = append(args, targets...)
		}
		o.HostConfig.CapAdd = caps
		o.Config.User = "0:0"
		// The runtime would make a workdir under the layout's root inside
		// the empty slot, which then could not be removed (rmdir) after the
		// run; the prefix enters the workdir once the claim mounted it.
		o.Config.WorkingDir = "/"
		o.Config.Entrypoint = []string{"/bin/sh", "-c", poolBootLauncher, bootArg0}
		o.Config.Cmd = append([]string{poolBootPython, poolBootPrefix}, args...)
	}
}

// useSlot puts the slot's workspace in place of the workspace's
// mounts in o (propagated from the host, except into a sandbox with its
// own kernel, where the boot step binds it) and returns their targets.
func useSlot(o *client.ContainerCreateOptions, slot string, key shape, own bool) []string {
	targets := []string{workspaceMount}
	if key.layout.Root != "" {
		targets = append(targets, key.layout.Root)
	}
	o.HostConfig.Mounts = slices.DeleteFunc(o.HostConfig.Mounts, func(m mount.Mount) bool {
		return slices.Contains(targets, m.Target)
	})
	ws := slotWorkspace(slot)
	for _, t := range targets {
		m := mount.Mount{Type: mount.TypeBind, Source: ws, Target: t,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRSlave}}
		if own {
			m.BindOptions.Propagation = mount.PropagationRPrivate // covered in the sandbox
		}
		o.HostConfig.Mounts = append(o.HostConfig.Mounts, m)
	}
	return targets
}

// shellQuote quotes s for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
