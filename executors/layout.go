package executors

import (
	"fmt"
	"path"
	"slices"
	"strings"
)

// Layout is the path layout a front end's framework expects inside its
// sandbox (DESIGN.md §14): the name its tools give the session workspace
// and the directory its commands start in. E2B's SDK writes to
// /home/user and runs commands there; DeerFlow's tools name
// /mnt/user-data/{workspace,uploads,outputs}; REST, MCP and deepagents
// use /workspace, the zero Layout.
//
// Every backend presents it over the session workspace: Root is a second
// mount of the same directory as WorkspaceMount (not a copy, not a
// symlink: `pwd` and os.getcwd() answer the framework's path), so what a
// command writes under Root the file API reads under the same name, and
// the reverse. WorkspaceMount stays where it is, so spill files, the
// program directory and every other backend contract are unchanged.
type Layout struct {
	// Root is where the framework's sandbox has the workspace, besides
	// WorkspaceMount; "" for none. One of LayoutRoots.
	Root string
	// Workdir is the cwd and HOME of every run: "" (WorkspaceMount),
	// Root, or a directory under either that the caller makes before the
	// run (the manager does, for DeerFlow's /mnt/user-data/workspace). A
	// backend never creates it: inside the sandbox it would be created
	// with the backend's identity, not the session's.
	Workdir string
	// SessionSandbox: the framework expects one sandbox for the session's
	// life (E2B's): its processes, /tmp and installed packages outlive
	// each command. A backend with the session_sandbox capability runs
	// every command of the session in one long-lived sandbox; the policy
	// sees it as request.session_sandbox and routes such runs only to
	// such a backend. Declared by the front end (e2b.Layout).
	SessionSandbox bool
}

// LayoutRoots are the roots a Layout may name. Each is an empty
// directory of the runtime image (images/runtime/trim.sh) that a backend
// mounts the workspace over; a path outside this list could shadow a
// system directory, and a read-only root has no mount point for it.
var LayoutRoots = []string{"/home/user", "/home/daytona", "/mnt/user-data"}

// Dir is the run's cwd and HOME.
func (l Layout) Dir() string {
	if l.Workdir == "" {
		return WorkspaceMount
	}
	return l.Workdir
}

// Validate refuses a Layout no backend may present: a Root outside
// LayoutRoots, a Workdir that is not clean and absolute or is outside
// both WorkspaceMount and Root.
func (l Layout) Validate() error {
	if l.Root != "" && !slices.Contains(LayoutRoots, l.Root) {
		return fmt.Errorf("layout root %q is not one of %v", l.Root, LayoutRoots)
	}
	if l.Workdir == "" {
		return nil
	}
	if !path.IsAbs(l.Workdir) || path.Clean(l.Workdir) != l.Workdir {
		return fmt.Errorf("layout workdir %q is not a clean absolute path", l.Workdir)
	}
	if !within(l.Workdir, WorkspaceMount) && (l.Root == "" || !within(l.Workdir, l.Root)) {
		return fmt.Errorf("layout workdir %q is outside %s and the layout's root", l.Workdir, WorkspaceMount)
	}
	return nil
}

// Rel is Workdir relative to the workspace ("." for its top), the
// directory the caller makes before a run.
func (l Layout) Rel() string {
	d := l.Dir()
	for _, top := range []string{WorkspaceMount, l.Root} {
		if top == "" {
			continue
		}
		if d == top {
			return "."
		}
		if rest, ok := strings.CutPrefix(d, top+"/"); ok {
			return rest
		}
	}
	return "."
}

func within(p, top string) bool { return p == top || strings.HasPrefix(p, top+"/") }

// EnvFor is Env for a run in layout l: HOME is its Workdir, and NODE_PATH
// the node_modules an `npm install` there makes.
func EnvFor(pathVar, lang string, l Layout) []string {
	env := Env(pathVar, lang)
	if d := l.Dir(); d != WorkspaceMount {
		for i, kv := range env {
			switch {
			case strings.HasPrefix(kv, "HOME="):
				env[i] = "HOME=" + d
			case strings.HasPrefix(kv, "NODE_PATH="):
				env[i] = "NODE_PATH=" + d + "/node_modules"
			}
		}
	}
	return env
}
