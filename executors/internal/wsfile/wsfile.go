// Package wsfile is how executors write the gateway's own files (the code
// file, and through executors/output the spill file of truncated output)
// into a session workspace that sandboxed code controls: through an
// os.Root, never opening an entry that already exists, and replacing any
// symlink or file planted where the gateway's .sandgate directories
// belong.
package wsfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// Paths inside the workspace, as the gateway and the code see them.
const (
	Mount      = "/workspace"
	StateDir   = ".sandgate"
	OutputsDir = StateDir + "/outputs"
	RunDir     = StateDir + "/run"
)

// CreateExclusive creates name under root, never opening an existing entry:
// a planted symlink or hard link is removed (the link itself, never its
// target) and the creation retried. Parent directories are made real
// directories first; os.Root refuses any that escape.
func CreateExclusive(root *os.Root, name string) (*os.File, error) {
	if err := EnsureDir(root, path.Dir(name)); err != nil {
		return nil, err
	}
	for range 3 {
		f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if !errors.Is(err, fs.ErrExist) {
			return f, err
		}
		if err := root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("create %s: %w", name, fs.ErrExist)
}

// EnsureDir makes every component of dir a real directory under root. The
// .sandgate tree is the gateway's, so a symlink or file the code put in the
// way is removed and the directory made. Were the code to race and plant it
// again, os.Root still refuses to leave the workspace.
func EnsureDir(root *os.Root, dir string) error {
	cur := ""
	for _, part := range strings.Split(path.Clean(dir), "/") {
		if part == "." || part == "" {
			continue
		}
		cur = path.Join(cur, part)
		fi, err := root.Lstat(cur)
		switch {
		case err == nil && fi.IsDir():
			continue
		case err == nil:
			if err := root.Remove(cur); err != nil {
				return err
			}
		case !errors.Is(err, fs.ErrNotExist):
			return err
		}
		if err := root.Mkdir(cur, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	return nil
}

// GiveDir makes the workspace directory dir itself (never its content)
// owned by uid/gid and enterable by that owner, so sandboxed code running
// as them can use it. It opens dir with O_NOFOLLOW and changes it only
// through that descriptor, never by path and never recursively: a symlink
// the sandbox planted cannot redirect a privileged chown.
func GiveDir(dir string, uid, gid int) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open workspace: %w", err)
	}
	defer unix.Close(fd)
	return GiveFD(fd, uid, gid)
}

// GiveFD is GiveDir on a directory the caller opened (O_NOFOLLOW).
func GiveFD(fd, uid, gid int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat workspace: %w", err)
	}
	if int(st.Uid) != uid || int(st.Gid) != gid {
		if err := unix.Fchown(fd, uid, gid); err != nil {
			return fmt.Errorf("chown workspace: %w", err)
		}
	}
	if st.Mode&0o700 != 0o700 {
		if err := unix.Fchmod(fd, st.Mode&0o7777|0o700); err != nil {
			return fmt.Errorf("chmod workspace: %w", err)
		}
	}
	return nil
}
