package subprocess

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
	"strings"
)

// Paths inside the workspace. The sandboxed code owns the workspace and may
// have planted any of these as symlinks (to /etc, say) or hard links: every
// gateway-side access goes through an os.Root opened on the workspace, and
// files are created with O_EXCL so an existing entry is never written
// through.
const (
	workspaceMount = "/workspace"
	stateDir       = ".sandgate"
	outputsDir     = stateDir + "/outputs"
	runDir         = stateDir + "/run"
)

var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// ErrInvalidRequestID is returned for a RequestID that could not be used as
// a file name.
var ErrInvalidRequestID = errors.New("invalid request id")

// requestID validates id, or makes a random one when the caller gave none.
func requestID(id string) (string, error) {
	if id == "" {
		var b [12]byte
		_, _ = rand.Read(b[:])
		return "run-" + hex.EncodeToString(b[:]), nil
	}
	if !requestIDPattern.MatchString(id) || id == "." || id == ".." {
		return "", fmt.Errorf("%w: %q", ErrInvalidRequestID, id)
	}
	return id, nil
}

// spillPaths returns the spill file's path relative to the workspace and as
// the code sees it.
func spillPaths(id string) (rel, shown string) {
	rel = path.Join(outputsDir, id+".log")
	return rel, path.Join(workspaceMount, rel)
}

// codePath is where the program text goes for one run, relative to the
// workspace (which is the code's cwd, so tracebacks show this relative
// path, not a host path). It is removed after the run.
func codePath(id, lang string) string {
	ext := map[string]string{"python": ".py", "bash": ".sh", "javascript": ".js"}[lang]
	return path.Join(runDir, id+ext)
}

// createExclusive creates name under root, never opening an existing entry:
// a planted symlink or hard link is removed and the creation retried. The
// parent directories are created first; os.Root refuses any that escape.
func createExclusive(root *os.Root, name string) (*os.File, error) {
	if err := ensureDir(root, path.Dir(name)); err != nil {
		return nil, err
	}
	for range 3 {
		f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
		if err := root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("create %s: %w", name, fs.ErrExist)
}

// ensureDir makes dir and its parents real directories under root. The
// code may have replaced one with a symlink or a file: .sandgate is the
// gateway's, so such an entry is removed (the link itself, never its
// target) and the directory recreated. Were the code to race and plant it
// again, os.Root still refuses to leave the workspace.
func ensureDir(root *os.Root, dir string) error {
	cur := ""
	for _, part := range strings.Split(dir, "/") {
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

// writeCode stores the program text in the workspace for the interpreter.
// Passing it as a file (not through a shell or argv) keeps it free of any
// quoting and of the 128 KiB limit on one argv string.
func writeCode(root *os.Root, name, code string) error {
	f, err := createExclusive(root, name)
	if err != nil {
		return fmt.Errorf("write code file: %w", err)
	}
	if _, err := io.WriteString(f, code); err != nil {
		f.Close()
		return fmt.Errorf("write code file: %w", err)
	}
	return f.Close()
}

// hostAliases returns the spellings of the host workspace path that can
// show up in output: as given, and with symlinks resolved (what getcwd(2)
// reports).
func hostAliases(dir string) []string {
	aliases := []string{filepath.Clean(dir)}
	if real, err := filepath.EvalSymlinks(dir); err == nil && real != aliases[0] {
		aliases = append(aliases, real)
	}
	return aliases
}
