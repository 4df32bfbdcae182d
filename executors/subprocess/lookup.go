package subprocess

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// lookPath resolves name in the directories of path (a PATH-style list),
// not in the gateway's own PATH, inside root (the system directories runs
// see: "/" or the runtime root filesystem). The result is the path as a
// run sees it. An absolute name is checked as is.
func lookPath(root, name, path string) (string, error) {
	if filepath.IsAbs(name) {
		return name, checkExecutable(root, name)
	}
	if strings.ContainsRune(name, '/') {
		return "", fmt.Errorf("%q: relative paths are not allowed", name)
	}
	for _, dir := range filepath.SplitList(path) {
		if !filepath.IsAbs(dir) {
			continue
		}
		candidate := filepath.Join(dir, name)
		if checkExecutable(root, candidate) == nil {
			return candidate, nil
		}
	}
	return "", fmt.Errorf("%q not found in %s", name, path)
}

// checkExecutable reports whether p, inside root, is a regular file with an
// execute bit for everyone: the sandbox uid is neither its owner nor in
// its group.
func checkExecutable(root, p string) error {
	fi, err := statIn(root, p)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o001 == 0 {
		return fmt.Errorf("%s: not a world-executable file", p)
	}
	return nil
}

// statIn stats p as a process whose root is root would: an absolute
// symlink (Debian's /etc/alternatives) is followed inside root, not on
// the host.
func statIn(root, p string) (os.FileInfo, error) {
	if root == "/" {
		return os.Stat(p)
	}
	for range 40 {
		host := filepath.Join(root, p)
		fi, err := os.Lstat(host)
		if err != nil {
			return nil, err
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			return os.Stat(host)
		}
		target, err := os.Readlink(host)
		if err != nil {
			return nil, err
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(p), target)
		}
		p = target
	}
	return nil, errors.New(p + ": too many levels of symbolic links")
}
