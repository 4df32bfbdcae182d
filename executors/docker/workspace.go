package docker

import (
	"errors"
	"fmt"
	"github.com/sandgate/sandgate/executors/internal/wsfile"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ErrInvalidRequestID is returned for a RequestID that cannot name a file.
var ErrInvalidRequestID = errors.New("docker: invalid request id")

// ErrRootIdentity is returned for a run that would execute as uid or gid 0.
var ErrRootIdentity = errors.New("docker: refusing to run sandboxed code as root")

// ErrInvalidWorkspace is returned when Spec.WorkspaceDir is not an
// absolute path to a real directory.
var ErrInvalidWorkspace = errors.New("docker: invalid workspace")

// requestID validates id, or makes one when the caller gave none.
func requestID(id string) (string, error) { return wsfile.RequestID(id, ErrInvalidRequestID) }

// checkWorkspace validates the workspace and, when the gateway runs as
// root, makes the directory itself usable by the run's identity. Only the
// directory is touched, through an O_NOFOLLOW descriptor: never by path,
// never recursively, never anything the sandbox could have planted. The
// workspace package already gives each session's directory to the session
// uid, so this only changes anything for callers without an identity.
func checkWorkspace(dir string, uid, gid int) (string, error) {
	if !filepath.IsAbs(dir) {
		return "", fmt.Errorf("%w: %q is not an absolute path", ErrInvalidWorkspace, dir)
	}
	dir = filepath.Clean(dir)
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("%w: open %s: %w", ErrInvalidWorkspace, dir, err)
	}
	defer unix.Close(fd)
	if os.Geteuid() != 0 {
		return dir, nil
	}
	if err := wsfile.GiveFD(fd, uid, gid); err != nil {
		return "", fmt.Errorf("docker: hand workspace to uid %d: %w", uid, err)
	}
	return dir, nil
}

// hostPaths are the spellings of the workspace's host path that output
// could show (the mount table inside the container names it, say).
func hostPaths(dir string) []string {
	out := []string{dir}
	if real, err := filepath.EvalSymlinks(dir); err == nil && real != dir {
		out = append(out, real)
	}
	return out
}

// spillTarget returns the spill file's name relative to the workspace and
// as the code sees it.
func spillTarget(id string) (rel, shown string) { return wsfile.SpillPaths(id) }

// openSpill creates the spill file rel in the workspace dir. The os.Root
// keeps every step inside the workspace whatever symlinks the code planted.
func openSpill(dir, rel string) (io.WriteCloser, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	f, err := wsfile.CreateExclusive(root, rel)
	if err != nil {
		return nil, err
	}
	return f, nil
}
