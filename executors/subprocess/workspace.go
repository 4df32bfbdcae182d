package subprocess

import (
	"os"

	"github.com/sandgate/sandgate/executors/internal/wsfile"
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

