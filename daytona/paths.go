package daytona

import (
	"path"
	"strings"

	"github.com/sandgate/sandgate/workspace"
)

// Paths. A Daytona sandbox's files are its session's workspace, which
// every executor shows at /workspace, the commands' working directory
// and HOME. So the sandbox's home and working directory are /workspace
// (getUserHomeDir and getWorkDir answer it), relative paths are relative
// to it, and Daytona's own home, /home/daytona, which code written for
// Daytona often names, is the same tree. Answers use the spelling the
// request used; any other absolute path (/tmp, /etc) is outside the
// persistent tree and refused.

// homeDaytona is the Daytona user's home as Daytona's images have it.
const homeDaytona = "/home/daytona"

// spelling is the prefix a request used.
type spelling string

const (
	spellWorkspace spelling = workspace.Mount
	spellHome      spelling = homeDaytona
)

// toWorkspace maps a client's path to the workspace API's path
// (/workspace/...), and says which spelling to answer with. ok is false
// for an absolute path outside the tree.
func toWorkspace(p string) (ws string, sp spelling, ok bool) {
	switch {
	case p == "" || p == "." || p == "~":
		return workspace.Mount, spellWorkspace, true
	case strings.HasPrefix(p, "~/"):
		return workspace.Mount + "/" + p[2:], spellWorkspace, true
	case !strings.HasPrefix(p, "/"):
		return workspace.Mount + "/" + p, spellWorkspace, true
	}
	c := path.Clean(p)
	for _, sp := range []spelling{spellWorkspace, spellHome} {
		if c == string(sp) {
			return workspace.Mount, sp, true
		}
		if rest, found := strings.CutPrefix(c, string(sp)+"/"); found {
			return workspace.Mount + "/" + rest, sp, true
		}
	}
	return "", "", false
}

// show is the workspace API's path (as code sees it, /workspace/...) in
// the request's spelling.
func (sp spelling) show(display string) string {
	if sp == spellWorkspace {
		return display
	}
	if display == workspace.Mount {
		return string(sp)
	}
	if rest, ok := strings.CutPrefix(display, workspace.Mount+"/"); ok {
		return string(sp) + "/" + rest
	}
	return display
}

// errOutside is the refusal of a path outside the tree.
const errOutside = "only the sandbox's files are served: /workspace (also /home/daytona, the same tree) and paths relative to it"
