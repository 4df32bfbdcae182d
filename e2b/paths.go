package e2b

import (
	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/workspace"
)

// Paths. An E2B sandbox's files are its session's workspace. The SDK
// names them under the E2B user's home, /home/user (its default, and
// where relative paths point), and sandgate's executors show the same
// tree at /workspace, the commands' working directory. So the file and
// filesystem calls take /home/user/..., /workspace/... and relative
// paths alike, and answer in the spelling the request used; any other
// absolute path (/tmp, /etc) is outside the persistent tree and refused.
//
// Commands see the tree at both names too: every executor mounts the
// session workspace at /home/user as well as /workspace (Layout), and
// /home/user is their working directory and HOME, as in E2B's own
// sandboxes. A file written to /home/user/a.txt is ./a.txt,
// /home/user/a.txt and /workspace/a.txt to a command.

// The layout: relative paths answer in the home spelling.
const (
	spellWorkspace workspace.Spelling = workspace.Mount
	spellHome      workspace.Spelling = homeDir
)

var layout = workspace.Layout{Home: spellHome, Relative: spellHome}

// FrontEnd names the sessions this front end creates (OpenOptions), by
// which the manager finds their Layout.
const FrontEnd = frontEnd

// Layout is the E2B sandbox's paths inside every executor (wired in
// main as manager.Deps.Layouts): the workspace at /home/user too, the
// commands' cwd and HOME.
// SessionSandbox: an E2B sandbox is one sandbox for the session's life,
// as E2B users expect (processes, /tmp and installed packages persist),
// so the policy sends its commands to an executor that can hold one
// (session_sandbox) and docker and gVisor run them all in one container
// (executors/docker/session.go). Daytona and DeerFlow sessions do not ask
// for it: each of their commands gets a sandbox of its own.
var Layout = manager.Layout{Layout: executors.Layout{Root: homeDir, Workdir: homeDir, SessionSandbox: true}}

// toWorkspace is layout.Resolve.
func toWorkspace(p string) (string, workspace.Spelling, bool) { return layout.Resolve(p) }

// errOutside is the refusal of a path outside the tree.
const errOutside = "only the sandbox's home (/home/user, the same tree commands see at /workspace) is served; other absolute paths are not"
