package docker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/executors/internal/wsmount"
)

// The host side of the pool's slots. A slot is a directory of its own
// per pooled container, <root>/<boot>-<n>, holding ws: the container
// mounts ws (or, under gVisor, the slot) with rslave propagation, and a
// claim bind-mounts the session's workspace onto ws, which the kernel
// propagates into the container. For propagation to reach it, the pool's
// directory is a shared mount (a bind of itself, made shared once).
// Nothing here ever removes anything recursively: a slot is unmounted
// first and then removed with rmdir, so a workspace still mounted on it
// can never be deleted through it.

// poolRootMu serialises the shared mount of the pool directory between
// executors (docker and gvisor share it).
var poolRootMu sync.Mutex

// preparePoolRoot makes dir a shared mount (binding it onto itself if it
// is not a mount point yet) and makes root under it. Whether dir is a
// mount point is asked of the kernel (a propagation change on a directory
// that is none fails with EINVAL), not read from mountinfo: a path listed
// there can be covered by a later mount of a parent directory, under
// which it is a plain directory again.
func preparePoolRoot(dir, root string) error {
	poolRootMu.Lock()
	defer poolRootMu.Unlock()
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return err
	}
	dir = filepath.Clean(dir)
	err := unix.Mount("", dir, "", unix.MS_SHARED|unix.MS_REC, "")
	if errors.Is(err, unix.EINVAL) {
		if err := unix.Mount(dir, dir, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s onto itself: %w", dir, err)
		}
		err = unix.Mount("", dir, "", unix.MS_SHARED|unix.MS_REC, "")
	}
	if err != nil {
		return fmt.Errorf("make %s shared: %w", dir, err)
	}
	return os.MkdirAll(root, 0o711)
}

// slotWorkspace is the directory of slot that the workspace is mounted on.
func slotWorkspace(slot string) string { return filepath.Join(slot, "ws") }

// slotMarker is a file in an unclaimed slot's ws directory: a pooled
// sandbox that still sees it after its claim did not get the workspace
// (the mount did not reach it), and refuses to run (poolBootPrefix).
const slotMarker = ".sandgate-unclaimed"

// makeSlot makes a slot and its ws directory, empty but for the marker.
func makeSlot(slot string) error {
	if err := os.Mkdir(slot, 0o711); err != nil {
		return err
	}
	ws := slotWorkspace(slot)
	if err := os.Mkdir(ws, 0o755); err != nil {
		_ = unix.Rmdir(slot)
		return err
	}
	if err := os.WriteFile(filepath.Join(ws, slotMarker), nil, 0o444); err != nil {
		removeSlot(slot)
		return err
	}
	return nil
}

// removeSlot unmounts slot's workspace and removes the (then empty but
// for the marker) directories. A failure leaves them for the next
// start's reap. The marker is removed by name, after the unmount: never
// anything of the workspace.
func removeSlot(slot string) {
	ws := slotWorkspace(slot)
	if wsmount.UnmountAll(ws) != nil {
		return
	}
	if err := unix.Unlinkat(unix.AT_FDCWD, filepath.Join(ws, slotMarker), 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return
	}
	if err := unix.Rmdir(ws); err != nil && !errors.Is(err, unix.ENOENT) {
		return
	}
	removeCtl(slot)
	_ = unix.Rmdir(slot)
}

// reapSlots removes the slots under root that the Executor value boot did
// not make: those of a crashed or killed predecessor, whose containers
// the orphan reaper removes. It returns how many it removed.
func reapSlots(root, boot string) int {
	entries, err := os.ReadDir(root)
	if err != nil {
		return 0
	}
	n := 0
	for _, en := range entries {
		if !en.IsDir() || strings.HasPrefix(en.Name(), boot+"-") {
			continue
		}
		slot := filepath.Join(root, en.Name())
		removeSlot(slot)
		if _, err := os.Lstat(slot); errors.Is(err, os.ErrNotExist) {
			n++
		}
	}
	return n
}
