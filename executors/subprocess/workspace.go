package subprocess

import (
	"errors"
	"github.com/sandgate/sandgate/executors/internal/wsfile"
	"os"
	"path/filepath"
	"regexp"
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
)

var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// ErrInvalidRequestID is returned for a RequestID that could not be used as
// a file name.
var ErrInvalidRequestID = errors.New("invalid request id")

// requestID validates id, or makes a random one when the caller gave none.
func requestID(id string) (string, error) { return wsfile.RequestID(id, ErrInvalidRequestID) }

// spillPaths returns the spill file's path relative to the workspace and
// as the code sees it.
func spillPaths(id string) (rel, shown string) { return wsfile.SpillPaths(id) }

// codePath is the name of the program file of one run (see
// Executor.writeCodeFile: it lives outside the workspace, at codeMount).
func codePath(id, lang string) string {
	ext := map[string]string{"python": ".py", "bash": ".sh", "javascript": ".js"}[lang]
	return id + ext
}

// createExclusive creates name under root without ever opening an existing
// entry (see wsfile.CreateExclusive).
func createExclusive(root *os.Root, name string) (*os.File, error) {
	return wsfile.CreateExclusive(root, name)
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
