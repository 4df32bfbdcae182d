package daytona

import (
	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/workspace"
)

// Paths. A Daytona sandbox's files are its session's workspace, which
// every executor shows at /workspace, the commands' working directory
// and HOME. So the sandbox's home and working directory are /workspace
// (getUserHomeDir and getWorkDir answer it), relative paths are relative
// to it, and Daytona's own home, /home/daytona, which code written for
// Daytona often names, is the same tree, for the file calls and inside
// the sandbox alike (Layout: every executor mounts it there too). Answers use the spelling the
// request used; any other absolute path (/tmp, /etc) is outside the
// persistent tree and refused.

// homeDaytona is the Daytona user's home as Daytona's images have it.
const homeDaytona = "/home/daytona"

// The layout: relative paths answer in the workspace spelling.
const (
	spellWorkspace workspace.Spelling = workspace.Mount
	spellHome      workspace.Spelling = homeDaytona
)

var layout = workspace.Layout{Home: spellHome, Relative: spellWorkspace}

// FrontEnd names the sessions this front end creates (OpenOptions), by
// which the manager finds their Layout.
const FrontEnd = frontEnd

// Layout is the Daytona sandbox's paths inside every executor (wired in
// main as manager.Deps.Layouts): the workspace at /home/daytona too;
// commands keep /workspace as their cwd, which getWorkDir answers.
var Layout = manager.Layout{Layout: executors.Layout{Root: homeDaytona}}

// toWorkspace is layout.Resolve.
func toWorkspace(p string) (string, workspace.Spelling, bool) { return layout.Resolve(p) }

// errOutside is the refusal of a path outside the tree.
const errOutside = "only the sandbox's files are served: /workspace (also /home/daytona, the same tree) and paths relative to it"
