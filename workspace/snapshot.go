package workspace

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Named snapshots (issue 30) keep a copy of a session's workspace outside
// the workspace root, on storage every replica reaches, and start new
// sessions from it. A session started from a snapshot restores the
// snapshot's kernel, which keeps the uid it ran as, so its workspace is
// owned by the snapshot's uid, as a fork's is (fork.go). While the
// snapshot exists that uid is held by a hidden entry in the root, which
// allocateUID counts as used: no unrelated session is given the uid of a
// snapshot that may still be restored.

// SaveCopy copies sessionID's workspace into dst, which must not exist,
// keeping owners and modes, and holds its uid under holder (a snapshot
// id) until DropHold.
func (w *Workspaces) SaveCopy(ctx context.Context, sessionID, dst, holder string) (Dir, error) {
	if err := ValidateKey(sessionID); err != nil {
		return Dir{}, err
	}
	src := filepath.Join(w.root, sessionID)
	fi, err := os.Lstat(src)
	if err != nil || !fi.IsDir() {
		return Dir{}, fmt.Errorf("%w: %s", ErrNotFound, sessionID)
	}
	uid, gid := owner(fi)
	if err := w.hold(holder, uid, gid); err != nil {
		return Dir{}, err
	}
	if err := copyTree(ctx, src, dst, uid, gid); err != nil {
		w.DropHold(holder)
		return Dir{}, err
	}
	return Dir{Path: dst, UID: uid, GID: gid}, nil
}

// FromCopy makes child's workspace (which must not exist) a copy of src,
// a directory SaveCopy wrote, owned as src is.
func (w *Workspaces) FromCopy(ctx context.Context, src, child string) (Dir, error) {
	if err := ValidateKey(child); err != nil {
		return Dir{}, err
	}
	fi, err := os.Lstat(src)
	if err != nil || !fi.IsDir() {
		return Dir{}, fmt.Errorf("%w: the snapshot's workspace", ErrNotFound)
	}
	uid, gid := owner(fi)
	dst := filepath.Join(w.root, child)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := copyTree(ctx, src, dst, uid, gid); err != nil {
		return Dir{}, err
	}
	return Dir{Path: dst, UID: uid, GID: gid}, nil
}

// copyTree copies src's content into dst, created here with uid and gid.
func copyTree(ctx context.Context, src, dst string, uid, gid int) error {
	if err := os.Mkdir(dst, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("copy workspace: %s exists", filepath.Base(dst))
		}
		return fmt.Errorf("copy workspace: %w", err)
	}
	if err := os.Lchown(dst, uid, gid); err != nil && os.Geteuid() == 0 {
		_ = os.Remove(dst)
		return fmt.Errorf("copy workspace: %w", err)
	}
	out, err := exec.CommandContext(ctx, "cp", "-a", "--reflink=auto", "--", src+"/.", dst+"/").CombinedOutput()
	if err != nil {
		_ = os.RemoveAll(dst)
		return fmt.Errorf("copy workspace: cp: %w: %.200s", err, out)
	}
	return nil
}

// holdPrefix starts the hidden entries that hold a snapshot's uid; no
// session key starts with a dot.
const holdPrefix = ".uid-held-"

func (w *Workspaces) hold(holder string, uid, gid int) error {
	if holder == "" || strings.ContainsAny(holder, `/\`) || strings.HasPrefix(holder, ".") {
		return fmt.Errorf("hold a uid: invalid holder %q", holder)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	p := filepath.Join(w.root, holdPrefix+holder)
	if err := os.Mkdir(p, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("hold a uid: %w", err)
	}
	if err := os.Lchown(p, uid, gid); err != nil && os.Geteuid() == 0 {
		_ = os.Remove(p)
		return fmt.Errorf("hold a uid: %w", err)
	}
	return nil
}

// DropHold ends the hold SaveCopy took for holder (its snapshot is
// deleted).
func (w *Workspaces) DropHold(holder string) {
	if holder == "" || strings.ContainsAny(holder, `/\`) || strings.HasPrefix(holder, ".") {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	_ = os.Remove(filepath.Join(w.root, holdPrefix+holder))
}
