package e2b

import (
	"path"
	"strings"

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
// Commands see the tree at /workspace (their working directory): a file
// written to /home/user/a.txt is ./a.txt and /workspace/a.txt to a
// command. That /home/user also exists inside every executor is issue
// 28's path-layout item, not done yet.

// spelling is the prefix a request used.
type spelling string

const (
	spellHome      spelling = homeDir
	spellWorkspace spelling = workspace.Mount
)

// toWorkspace maps a client's path to the workspace API's path
// (/workspace/...), and says which spelling to answer with. ok is false
// for an absolute path outside the tree.
func toWorkspace(p string) (ws string, sp spelling, ok bool) {
	switch {
	case p == "" || p == "~":
		return workspace.Mount, spellHome, true
	case strings.HasPrefix(p, "~/"):
		return workspace.Mount + "/" + p[2:], spellHome, true
	case !strings.HasPrefix(p, "/"):
		return workspace.Mount + "/" + p, spellHome, true
	}
	c := path.Clean(p)
	for _, sp := range []spelling{spellHome, spellWorkspace} {
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
const errOutside = "only the sandbox's home (/home/user, the same tree commands see at /workspace) is served; other absolute paths are not"
