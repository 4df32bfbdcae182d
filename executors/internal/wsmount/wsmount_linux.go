// Package wsmount bind-mounts a session's workspace onto a sandbox's slot
// and takes it off again: the docker executor's pool, the subprocess
// executor's zygote slots and the aio instances mount workspaces the same
// way, and the safety of it (what is mounted is exactly the directory
// checked; nothing under a mount is ever touched) lives in one place.
package wsmount

import (
	"errors"
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"
)

// maxStacked bounds the mounts UnmountAll detaches from one path.
const maxStacked = 16

// Bind mounts the directory dir onto target. dir is opened without
// following a link in its last component, and the descriptor is what is
// mounted, so a name changed in between cannot redirect the mount.
func Bind(dir, target string) error {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open workspace: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Mount("/proc/self/fd/"+strconv.Itoa(fd), target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind workspace: %w", err)
	}
	return nil
}

// UnmountAll detaches every mount stacked on path. It returns nil once
// nothing is mounted there (the kernel says EINVAL: not a mount point, or
// ENOENT), so that what the caller does next touches the directory, never
// a workspace.
func UnmountAll(path string) error {
	for range maxStacked {
		err := unix.Unmount(path, unix.MNT_DETACH)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("unmount %s: %w", path, err)
		}
	}
	return fmt.Errorf("unmount %s: still mounted after %d", path, maxStacked)
}
