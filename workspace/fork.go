package workspace

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
)

// Fork makes child's workspace a copy of parent's (issue 30: a forked
// session starts with its parent's files), owned by the parent's
// identity: a child's kernel is a restore of the parent's process, which
// keeps the parent's uid, so the child's files must be that uid's too.
// The family of a fork shares one uid; each still sees only its own
// directory. The copy is cp -a with reflinks where the filesystem has
// them. child must not exist.
func (w *Workspaces) Fork(ctx context.Context, parent, child string) (Dir, error) {
	if err := ValidateKey(parent); err != nil {
		return Dir{}, err
	}
	if err := ValidateKey(child); err != nil {
		return Dir{}, err
	}
	src, dst := filepath.Join(w.root, parent), filepath.Join(w.root, child)
	fi, err := os.Lstat(src)
	if err != nil || !fi.IsDir() {
		return Dir{}, fmt.Errorf("%w: %s", ErrNotFound, parent)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := os.Mkdir(dst, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return Dir{}, fmt.Errorf("fork workspace: %s exists", child)
		}
		return Dir{}, fmt.Errorf("fork workspace: %w", err)
	}
	uid, gid := owner(fi)
	if err := os.Lchown(dst, uid, gid); err != nil && os.Geteuid() == 0 {
		_ = os.Remove(dst)
		return Dir{}, fmt.Errorf("fork workspace: %w", err)
	}
	out, err := exec.CommandContext(ctx, "cp", "-a", "--reflink=auto", "--", src+"/.", dst+"/").CombinedOutput()
	if err != nil {
		_ = os.RemoveAll(dst)
		return Dir{}, fmt.Errorf("fork workspace: cp: %w: %.200s", err, out)
	}
	return Dir{Path: dst, UID: uid, GID: gid}, nil
}
