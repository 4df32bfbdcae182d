package aio

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/moby/moby/api/types/mount"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/internal/wsmount"
)

// Path layouts (executors.Layout). Docker fixes a container's mounts when
// it is created, and an instance started ahead does not know its session
// yet, so layout roots take the path the workspace itself takes: each
// instance has an empty directory of its own per layout root,
// <StateDir>/<slot>/layout/<i>, bind-mounted (rslave) at
// executors.LayoutRoots[i]. Binding a session bind-mounts its workspace
// onto the one of its layout's root, and onto no other: inside, the
// session's root shows its workspace and the other roots stay the empty
// directories they are in the runtime image. The cwd of each run is the
// layout's workdir (sent with the run) and HOME is sandboxd's --home,
// given when the session is bound. The layout is part of the instance's
// Workspace, so a session is never served by an instance bound for
// another layout.

// stateLayout holds the instance's layout root mount points.
const stateLayout = "layout"

// layoutDirs are the instance's mount points, one per layout root.
func layoutDirs(h *handle) []string {
	out := make([]string, len(executors.LayoutRoots))
	for i := range executors.LayoutRoots {
		out[i] = filepath.Join(h.dir, stateLayout, strconv.Itoa(i))
	}
	return out
}

// makeLayoutDirs makes the mount points: root's, 0755, as the image's
// empty directories are.
func makeLayoutDirs(h *handle) error {
	for _, d := range append([]string{filepath.Join(h.dir, stateLayout)}, layoutDirs(h)...) {
		if err := os.Mkdir(d, 0o755); err != nil {
			return fmt.Errorf("aio: state dir: %w", err)
		}
		if err := os.Chmod(d, 0o755); err != nil {
			return fmt.Errorf("aio: state dir: %w", err)
		}
	}
	return nil
}

// layoutMounts binds each mount point at its layout root.
func layoutMounts(h *handle) []mount.Mount {
	dirs := layoutDirs(h)
	out := make([]mount.Mount, 0, len(dirs))
	for i, r := range executors.LayoutRoots {
		out = append(out, mount.Mount{Type: mount.TypeBind, Source: dirs[i], Target: r,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRSlave}})
	}
	return out
}

// bindLayout shows ws at its layout's root, and nothing at the others.
// An instance made before layouts has no mount points: a session with a
// layout root cannot use it.
func bindLayout(h *handle, ws Workspace) error {
	if err := unmountLayout(h); err != nil {
		return err
	}
	for i, r := range executors.LayoutRoots {
		if r != ws.Root {
			continue
		}
		d := layoutDirs(h)[i]
		if _, err := os.Stat(d); err != nil {
			return fmt.Errorf("aio: the instance has no mount point for %s: %w", r, err)
		}
		return wsmount.Bind(ws.Dir, d)
	}
	return nil
}

// unmountLayout takes the workspace off every layout mount point.
func unmountLayout(h *handle) error {
	var errs []error
	for _, d := range layoutDirs(h) {
		if _, err := os.Stat(d); errors.Is(err, os.ErrNotExist) {
			continue
		}
		errs = append(errs, wsmount.UnmountAll(d))
	}
	return errors.Join(errs...)
}

// layoutEntries are the state entries cleanState removes, innermost
// first.
func layoutEntries(h *handle) []string {
	return append(layoutDirs(h), filepath.Join(h.dir, stateLayout))
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
