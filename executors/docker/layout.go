package docker

import (
	"github.com/moby/moby/api/types/mount"

	"github.com/sandgate/sandgate/executors"
)

// withLayout is s for a run in the session's path layout. Warm
// containers and kernels match on the whole shape, so a container never
// serves a run of another layout.
func (s shape) withLayout(l executors.Layout) shape {
	s.layout = l
	return s
}

// layoutBinds mounts the workspace a second time at the layout's root
// (/home/user, /mnt/user-data): the same directory, read-write, as
// /workspace is, so what a command writes there is the workspace's. The
// engine makes the mount point in the container's own layer (the runtime
// image already has it), never on the host. The layout's workdir under
// the root is the manager's to make, as the session's uid: the engine
// would create a missing one as root.
func layoutBinds(s shape) []mount.Mount {
	if s.layout.Root == "" {
		return nil
	}
	b := workspaceBind(s.dir)
	b.Target = s.layout.Root
	return []mount.Mount{b}
}
