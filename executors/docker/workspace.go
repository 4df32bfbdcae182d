package docker

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"

	"golang.org/x/sys/unix"
)

// The spill file's place in the workspace. The code owns the workspace and
// may have planted a symlink or a hard link at any of these names: the
// gateway opens them only through an os.Root on the workspace, and creates
// the file with O_EXCL after removing whatever entry was there.
const (
	stateDir   = ".sandgate"
	outputsDir = stateDir + "/outputs"
)

var requestIDRe = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// ErrInvalidRequestID is returned for a RequestID that cannot name a file.
var ErrInvalidRequestID = errors.New("docker: invalid request id")

// ErrRootIdentity is returned for a run that would execute as uid or gid 0.
var ErrRootIdentity = errors.New("docker: refusing to run sandboxed code as root")

// ErrInvalidWorkspace is returned when Spec.WorkspaceDir is not an
// absolute path to a real directory.
var ErrInvalidWorkspace = errors.New("docker: invalid workspace")

// requestID validates id, or makes one when the caller gave none.
func requestID(id string) (string, error) {
	if id == "" {
		var b [12]byte
		_, _ = rand.Read(b[:])
		return "run-" + hex.EncodeToString(b[:]), nil
	}
	if !requestIDRe.MatchString(id) || id == "." || id == ".." {
		return "", fmt.Errorf("%w: %q", ErrInvalidRequestID, id)
	}
	return id, nil
}

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
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", fmt.Errorf("%w: stat: %w", ErrInvalidWorkspace, err)
	}
	if int(st.Uid) != uid || int(st.Gid) != gid {
		if err := unix.Fchown(fd, uid, gid); err != nil {
			return "", fmt.Errorf("docker: hand workspace to uid %d: %w", uid, err)
		}
	}
	if st.Mode&0o700 != 0o700 {
		if err := unix.Fchmod(fd, st.Mode&0o7777|0o700); err != nil {
			return "", fmt.Errorf("docker: chmod workspace: %w", err)
		}
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
func spillTarget(id string) (rel, shown string) {
	rel = path.Join(outputsDir, id+".log")
	return rel, path.Join(workspaceMount, rel)
}

// openSpill creates the spill file rel in the workspace dir. The os.Root
// keeps every step inside the workspace whatever symlinks the code planted.
func openSpill(dir, rel string) (io.WriteCloser, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	if err := realDirs(root, path.Dir(rel)); err != nil {
		return nil, err
	}
	for range 3 {
		f, err := root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if !errors.Is(err, fs.ErrExist) {
			return f, err
		}
		// Something is there already (a planted link, a name reused):
		// remove the entry itself, never what it points to.
		if err := root.Remove(rel); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("create %s: %w", rel, fs.ErrExist)
}

// realDirs makes every component of dir a real directory under root,
// replacing a symlink or file the code put in the way (the .sandgate tree
// is the gateway's).
func realDirs(root *os.Root, dir string) error {
	cur := "."
	for _, part := range splitPath(dir) {
		cur = path.Join(cur, part)
		fi, err := root.Lstat(cur)
		if err == nil && fi.IsDir() {
			continue
		}
		if err == nil {
			if err := root.Remove(cur); err != nil {
				return err
			}
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if err := root.Mkdir(cur, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	return nil
}

func splitPath(p string) []string {
	var parts []string
	for p != "." && p != "/" && p != "" {
		parts = append([]string{path.Base(p)}, parts...)
		p = path.Dir(p)
	}
	return parts
}
