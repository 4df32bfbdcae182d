package subprocess

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// lookPath resolves name in the directories of path (a PATH-style list),
// not in the gateway's own PATH. An absolute name is checked as is.
func lookPath(name, path string) (string, error) {
	if filepath.IsAbs(name) {
		return name, checkExecutable(name)
	}
	if strings.ContainsRune(name, '/') {
		return "", fmt.Errorf("%q: relative paths are not allowed", name)
	}
	for _, dir := range filepath.SplitList(path) {
		if !filepath.IsAbs(dir) {
			continue
		}
		candidate := filepath.Join(dir, name)
		if checkExecutable(candidate) == nil {
			return candidate, nil
		}
	}
	return "", fmt.Errorf("%q not found in %s", name, path)
}

// checkExecutable reports whether p is a regular file with an execute bit
// for everyone: the sandbox uid is neither its owner nor in its group.
func checkExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o001 == 0 {
		return fmt.Errorf("%s: not a world-executable file", p)
	}
	return nil
}
