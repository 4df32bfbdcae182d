package aio

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/executors"
)

// Direct binding: the pool under a gateway that is not root.
//
// Binding a session to an instance started ahead mounts the session's
// workspace onto the instance's mount point on the host (mount
// propagation carries it into the running container), which needs
// CAP_SYS_ADMIN in the engine's mount namespace. A non-root gateway has
// neither, so there the pool binds directly: an instance is created for
// its session only, with the session's workspace (and its layout's root)
// as Docker bind mounts made at create time. The engine does the mounts;
// the gateway makes none, and unmounts none.
//
// What it costs: no instance is started ahead (min_instances is taken as
// 0 and the log says so), so a session's first run waits for a container
// and sandboxd to start (about a second here, against a few tens of
// milliseconds for a claim); an instance is never bound to another
// session, so an idle one is removed rather than reused; and at a restart
// a session's instance is not adopted (its workspace is not a host mount
// the new process could check) but removed, its next run starting a new
// one. Everything a run gets is the same: the hardening, sandboxd's
// per-run limits, the egress bridge, the layout.
//
// sandboxd's socket directory cannot be handed to root once the socket
// exists, as under a root gateway: the gateway pins the socket instead
// (an O_PATH descriptor opened without following links, checked to be a
// socket, before any code of the session runs) and always connects
// through /proc/self/fd/N, so code in the sandbox that later swaps the
// socket for a link cannot make the gateway connect anywhere else. Code
// in the sandbox runs as the gateway's uid here (the owner of the
// workspaces a non-root gateway makes), as in every executor under such
// a gateway, and may write in that directory as in its workspace.

// directMode reports whether this process must bind directly: not root,
// and sandboxd's mode (bridge mode has no workspace binding of its own to
// change).
func directMode(network string) bool {
	return os.Geteuid() != 0 && network == NetworkNone
}

// createDirect is create under direct binding: the state directory only;
// the container is made by bindDirect, which knows the workspace.
func (b *localBackend) createDirect(slot, session string, labels map[string]string) (*handle, error) {
	if session == "" {
		return nil, unavailable("instances cannot be started ahead under a non-root gateway", nil)
	}
	h := &handle{slot: slot, dir: filepath.Join(b.cfg.StateDir, slot), key: newKey()}
	if err := b.prepareState(h); err != nil {
		return nil, err
	}
	h.name, h.labels = b.containerName(session), labels
	return h, nil
}

// startDirect creates and starts the container of h with ws mounted by
// the engine: at /workspace and at its layout's root.
func (b *localBackend) startDirect(ctx context.Context, h *handle, ws Workspace) error {
	cfg, hc := b.containerConfig(h, h.labels)
	mounts := hc.Mounts[:0:0]
	for _, m := range hc.Mounts {
		switch {
		case m.Target == workspaceMount:
			m.Source = ws.Dir
			m.BindOptions = &mount.BindOptions{Propagation: mount.PropagationRPrivate}
		case isLayoutRoot(m.Target):
			if m.Target != ws.Root {
				continue // the image's empty directory stays
			}
			m.Source = ws.Dir
			m.BindOptions = &mount.BindOptions{Propagation: mount.PropagationRPrivate}
		}
		mounts = append(mounts, m)
	}
	hc.Mounts = mounts
	res, err := b.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: cfg, HostConfig: hc, Name: h.name})
	if err != nil {
		return b.engineError("create container", err)
	}
	h.containerID = res.ID
	if err := b.openEgress(h); err != nil {
		return err
	}
	if _, err := b.cli.ContainerStart(ctx, h.containerID, client.ContainerStartOptions{}); err != nil {
		return b.engineError("start container", err)
	}
	return nil
}

func isLayoutRoot(p string) bool {
	for _, r := range executors.LayoutRoots {
		if r == p {
			return true
		}
	}
	return false
}

// pinSocket opens sandboxd's socket without following a link, checks it
// is a socket, and returns the path that reaches it through the
// descriptor (kept in h until destroy).
func pinSocket(h *handle, path string) (string, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("aio: pin sandboxd socket: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		unix.Close(fd)
		return "", unavailable("sandboxd socket replaced during start-up", err)
	}
	h.sockFD = fd
	return "/proc/self/fd/" + strconv.Itoa(fd), nil
}

// unpin closes h's socket descriptor.
func unpin(h *handle) {
	if h.sockFD > 0 {
		unix.Close(h.sockFD)
		h.sockFD = 0
	}
}
