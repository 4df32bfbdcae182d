package aio

import (
	"github.com/moby/moby/api/types/mount"

	"github.com/sandgate/sandgate/executors"
)

// Path layouts (executors.Layout). An instance started ahead does not
// know its session, and Docker fixes a container's mounts at creation, so
// every instance has the instance's workspace directory at each of
// executors.LayoutRoots as well as at /workspace, all rslave: binding a
// session makes its workspace appear at all of them at once. The roots
// other than the session's layout show the same session's own files and
// nothing else. What is per session is the cwd of each run (the layout's
// workdir, sent with the run) and HOME (sandboxd's --home, given when
// the session is bound).

// layoutMounts binds the instance's workspace directory at every layout
// root.
func layoutMounts(ws string) []mount.Mount {
	out := make([]mount.Mount, 0, len(executors.LayoutRoots))
	for _, r := range executors.LayoutRoots {
		out = append(out, mount.Mount{Type: mount.TypeBind, Source: ws, Target: r,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRSlave}})
	}
	return out
}

// homeOf is a Workspace's Home for layout l.
func homeOf(l executors.Layout) string {
	if l.Dir() == workspaceMount {
		return ""
	}
	return l.Dir()
}

// homeArgs are sandboxd's arguments for ws's HOME.
func homeArgs(ws Workspace) []string {
	if ws.Home == "" {
		return nil
	}
	return []string{"--home", ws.Home}
}
