package workspace

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"

	"github.com/sandgate/sandgate/errcode"
)

// Modes of what the API creates. The session directory itself is 0700 and
// owned by the session's uid, so no other uid can reach anything below it
// and these bits only matter to that uid (and to root). They are what the
// code's own umask (022) gives the files it creates, so a file looks the
// same whichever side wrote it; 0600/0700 would protect nothing more.
const (
	filePerm fs.FileMode = 0o644
	dirPerm  fs.FileMode = 0o755
)

// maxSymlinkHops is Linux's limit on symlinks followed in one lookup.
const maxSymlinkHops = 40

var errTraversalHardlink = errcode.New(errcode.PathTraversal, "the file is a hard link to a file the session does not own")

// session is one operation's handle on a workspace: an os.Root opened on
// the session directory, and the identity new entries must belong to.
type session struct {
	id   string
	root *os.Root
	// uid and gid own the session directory. When the gateway is root,
	// every file and directory the API creates is given to them through
	// the descriptor it was created with (fchown, never by path), so the
	// session's code can change what the agent wrote.
	uid, gid int
	chown    bool
	// checkLinks refuses to read hard links the session does not own (see
	// openRead).
	checkLinks bool
}

// open returns a handle on the session's workspace. Reads never create a
// workspace (a missing one is ErrNotFound); writes create it, with its
// identity, on first use.
func (w *Workspaces) open(ctx context.Context, id string, create bool) (*session, error) {
	var dir string
	if create {
		d, err := w.Ensure(ctx, id)
		if err != nil {
			return nil, err
		}
		dir = d.Path
	} else {
		info, err := w.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		dir = info.Dir
	}
	root, err := os.OpenRoot(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id) // removed meanwhile
	}
	if err != nil {
		return nil, fmt.Errorf("open workspace: %w", err)
	}
	fi, err := root.Stat(".")
	if err != nil {
		root.Close()
		return nil, fmt.Errorf("stat workspace: %w", err)
	}
	uid, gid := owner(fi)
	isRoot := os.Geteuid() == 0
	return &session{id: id, root: root, uid: uid, gid: gid, chown: isRoot && uid != 0, checkLinks: isRoot}, nil
}

func (s *session) close() { s.root.Close() }

// canonical resolves rel (from ResolvePath) to the path of the entry it
// names with no symlink among its directories and, with followFinal, none
// at its end either. Symlinks are followed the kernel's way (a relative
// target is taken from the link's real directory) but confined: an
// absolute target, or one that climbs above the workspace, is a
// path_traversal. Components that do not exist are kept as they are, for
// a write to create.
//
// The result is a name, not a capability: every later access still goes
// through the os.Root, so a directory swapped for a symlink after this
// check cannot lead out either. The result is what writes rename onto, and
// what per-file locks are keyed on, so two names for one file share a lock.
func (s *session) canonical(rel string, followFinal bool) (string, error) {
	if rel == "." {
		return rel, nil
	}
	todo := strings.Split(rel, "/")
	var done []string
	for hops := 0; len(todo) > 0; {
		name := todo[0]
		todo = todo[1:]
		cur := path.Join(path.Join(done...), name)
		last := len(todo) == 0
		fi, err := s.root.Lstat(cur)
		if errors.Is(err, fs.ErrNotExist) {
			done = append(append(done, name), todo...)
			break
		}
		if err != nil {
			return "", mapErr(err)
		}
		if fi.Mode()&fs.ModeSymlink == 0 || (last && !followFinal) {
			if !last && !fi.IsDir() {
				return "", fmt.Errorf("%w: %s", ErrNotDir, cur)
			}
			done = append(done, name)
			continue
		}
		if hops++; hops > maxSymlinkHops {
			return "", ErrSymlinkLoop
		}
		target, err := s.root.Readlink(cur)
		if errors.Is(err, syscall.EINVAL) {
			todo = append([]string{name}, todo...) // no longer a link: look again
			continue
		}
		if err != nil {
			return "", mapErr(err)
		}
		if target == "" {
			return "", fmt.Errorf("%w: empty symlink %s", ErrFileNotFound, cur)
		}
		if path.IsAbs(target) {
			return "", traversal(errTraversalSymlink, cur+": absolute target")
		}
		next := path.Join(path.Join(done...), target, path.Join(todo...))
		if next == ".." || strings.HasPrefix(next, "../") {
			return "", traversal(errTraversalSymlink, cur+": climbs out")
		}
		done, todo = nil, nil
		if next != "." {
			todo = strings.Split(next, "/")
		}
	}
	if len(done) == 0 {
		return ".", nil
	}
	return path.Join(done...), nil
}

// mkdirAll creates the directories of dir that do not exist, each owned by
// the session, and returns those it created, outermost first.
func (s *session) mkdirAll(dir string) ([]string, error) {
	if dir == "." {
		return nil, nil
	}
	var created []string
	parts := strings.Split(dir, "/")
	for i := range parts {
		p := strings.Join(parts[:i+1], "/")
		err := s.root.Mkdir(p, dirPerm)
		if errors.Is(err, fs.ErrExist) {
			continue // a directory, or something the next step refuses
		}
		if err != nil {
			return created, mapErr(err)
		}
		created = append(created, p)
		if err := s.ownDir(p); err != nil {
			return created, err
		}
	}
	return created, nil
}

// ownDir gives a directory just created to the session. It is opened
// through the Root with O_DIRECTORY, so whatever sits at p by now (the
// code may have swapped it) is a directory inside the workspace: the
// worst a race achieves is handing the session one of its own directories.
func (s *session) ownDir(p string) error {
	d, err := s.root.OpenFile(p, os.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		return mapErr(err)
	}
	defer d.Close()
	return s.own(d, dirPerm)
}

// own sets the owner (when the gateway is root) and the mode of a file or
// directory the API created, through its descriptor.
func (s *session) own(f *os.File, perm fs.FileMode) error {
	if s.chown {
		if err := f.Chown(s.uid, s.gid); err != nil {
			return fmt.Errorf("chown: %w", err)
		}
	}
	if err := f.Chmod(perm); err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	return nil
}

// removeCreated removes directories mkdirAll created, innermost first, when
// the write they were made for failed. Only empty directories go.
func (s *session) removeCreated(created []string) {
	for i := len(created) - 1; i >= 0; i-- {
		_ = s.root.Remove(created[i])
	}
}

// openRead opens a regular file under r (the session's Root or one of its
// directories) for reading. Symlinks inside the workspace
// are followed; one leading out is a path_traversal (os.Root). The open is
// non-blocking, so a FIFO planted by the code cannot hang the request: it
// is opened, seen not to be a regular file, and refused.
//
// A hard link is the one way code could put a file from outside (one it
// can name but not read, such as /etc/shadow) into its workspace; the
// gateway reads as root, so such a file would leak. Linux's
// fs.protected_hardlinks forbids making those links, and as defence in
// depth a file with other links that the session's uid does not own is
// refused too.
func (s *session) openRead(r *os.Root, rel string) (*os.File, fs.FileInfo, error) {
	if rel == "." {
		return nil, nil, ErrIsDir
	}
	f, err := r.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, mapErr(err)
	}
	fi, err := f.Stat()
	switch {
	case err != nil:
		err = fmt.Errorf("stat: %w", err)
	case fi.IsDir():
		err = ErrIsDir
	case !fi.Mode().IsRegular():
		err = ErrNotRegular
	default:
		err = s.linkCheck(fi)
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

func (s *session) linkCheck(fi fs.FileInfo) error {
	if !s.checkLinks {
		return nil
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if ok && st.Nlink > 1 && int(st.Uid) != s.uid {
		return traversal(errTraversalHardlink, fi.Name())
	}
	return nil
}

// split returns the directory and the name of a canonical path.
func split(rel string) (dir, name string) {
	dir, name = path.Split(rel)
	if dir == "" {
		return ".", name
	}
	return strings.TrimSuffix(dir, "/"), name
}
