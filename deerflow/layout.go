package deerflow

import (
	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/manager"
)

// dfWorkdir is where DeerFlow's tools work (its prompt tells the model
// to use it): the commands' cwd and HOME.
const dfWorkdir = dfUserData + "/workspace"

// FrontEnd names the sessions this front end creates (OpenOptions), by
// which the manager finds their Layout.
const FrontEnd = frontEnd

// Layout is DeerFlow's sandbox paths inside every executor (wired in main
// as manager.Deps.Layouts): the session workspace is /mnt/user-data too,
// with DeerFlow's three directories always there (its own sandboxes
// mount them from the host's thread directory), and commands start in
// /mnt/user-data/workspace. So a file written through /v1/file/write to
// /mnt/user-data/workspace/hello.py is where `cd /mnt/user-data/workspace
// && python hello.py` finds it, and what a command writes under
// /mnt/user-data/outputs /v1/file/read reads.
var Layout = manager.Layout{
	Layout: executors.Layout{Root: dfUserData, Workdir: dfWorkdir},
	Dirs:   []string{"workspace", "uploads", "outputs"},
}
