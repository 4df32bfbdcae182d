package manager

import (
	"context"
	"fmt"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/workspace"
)

// Layout is the path layout a front end declares for its sessions
// (DESIGN.md §14): where its framework's sandbox has the workspace and
// where commands start (executors.Layout, which every executor presents),
// and the directories that sandbox always has. Deps.Layouts maps a front
// end's name (OpenOptions.FrontEnd) to it; a session takes the layout of
// the front end that created it, for its whole life, so its warm state
// (interpreters, containers, instances) never changes layout. A front end
// without one gets /workspace alone (REST, MCP, deepagents).
type Layout struct {
	executors.Layout
	// Dirs are workspace paths (relative, or under /workspace) made before
	// every run when missing: DeerFlow's workspace, uploads and outputs.
	// The layout's workdir, when under its root, must be among them:
	// inside the sandbox it would be made with the backend's identity.
	Dirs []string
}

// validateLayouts checks the declared layouts at start-up: one a backend
// would refuse, or whose workdir nothing makes, is a wiring error.
func validateLayouts(ls map[string]Layout) error {
	for name, l := range ls {
		if err := l.Validate(); err != nil {
			return fmt.Errorf("manager: front end %s: %w", name, err)
		}
		if rel := l.Rel(); rel != "." && !hasDir(l.Dirs, rel) {
			return fmt.Errorf("manager: front end %s: layout workdir %s is not among its dirs", name, l.Dir())
		}
		for _, d := range l.Dirs {
			if _, err := workspace.ResolvePath(d); err != nil {
				return fmt.Errorf("manager: front end %s: layout dir %q: %w", name, d, err)
			}
		}
	}
	return nil
}

func hasDir(dirs []string, rel string) bool {
	for _, d := range dirs {
		if r, err := workspace.ResolvePath(d); err == nil && r == rel {
			return true
		}
	}
	return false
}

// wantsSessionSandbox reports whether sess's front end declares one
// sandbox for the session's life (executors.Layout.SessionSandbox).
func (m *Manager) wantsSessionSandbox(sess *Session) bool {
	sess.mu.Lock()
	fe := sess.rec.FrontEnd
	sess.mu.Unlock()
	return m.deps.Layouts[fe].SessionSandbox
}

// sessionSandboxOf is wantsSessionSandbox for a session that may not be
// open here: the front end is fixed at create, so a session this replica
// holds answers from memory and only another's costs a read of its
// record. A session without a record (not created yet) wants none.
func (m *Manager) sessionSandboxOf(ctx context.Context, ref SessionRef) bool {
	if s, ok := m.table.cached(ref.Key); ok {
		return m.wantsSessionSandbox(s)
	}
	rec, found, err := m.store.load(ctx, ref.Key)
	return err == nil && found && m.deps.Layouts[rec.FrontEnd].SessionSandbox
}

// layoutFor is the layout of sess (its creating front end's), with its
// directories made in the session's workspace.
func (m *Manager) layoutFor(ctx context.Context, sess *Session, key string) (executors.Layout, error) {
	sess.mu.Lock()
	fe := sess.rec.FrontEnd
	sess.mu.Unlock()
	l, ok := m.deps.Layouts[fe]
	if !ok {
		return executors.Layout{}, nil
	}
	if len(l.Dirs) > 0 {
		if err := m.deps.Workspaces.MakeDirs(ctx, key, l.Dirs); err != nil {
			return executors.Layout{}, fmt.Errorf("layout of %s: %w", fe, err)
		}
	}
	return l.Layout, nil
}
