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
// refused with exit 125 and the reason, never run in. Then setpriv sets the identity, drops every supplementary
// group, clears the inheritable, ambient and bounding capability sets
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
exec setpriv --reuid="$u" --regid="$g" --clear-groups --inh-caps=-all --bounding-set=-all -- /bin/sh -c "$s" sandgate-boot "$m" "$x"`

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
			sandboxCommand(o) // poolsandbox.go: no boot step, nothing to hand over
			return
		}
		caps := []string{"SETUID", "SETGID", "SETPCAP"}
		args := []string{strconv.Itoa(key.limits.MemoryMB), "-", "cd " + shellQuote(key.layout.Dir()) + " || exit 125\n" + p.e.bootScript()}
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
		o.Config.Entrypoint = []string{"/bin/sh", "-c", poolBootPrefix, bootArg0}
		o.Config.Cmd = args
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
