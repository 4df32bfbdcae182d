package subprocess

import "github.com/sandgate/sandgate/executors"

// workspaceMount is the workspace as the code sees it: its cwd and HOME
// in the run's minimal root. The gateway itself reaches the workspace
// through an os.Root on the host directory (wsfile), never by this path.
const workspaceMount = executors.WorkspaceMount

// codePath is the name of the program file of one run (see
// Executor.writeCodeFile: it lives outside the workspace, at codeMount).
func codePath(id, lang string) string { return id + "." + executors.ProgramExt(lang) }
