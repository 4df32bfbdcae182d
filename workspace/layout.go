package workspace

import (
	"path"
	"strings"
)

// Spelling is a prefix a front end's clients name the workspace by:
// Mount itself, or the home directory their framework expects (E2B's
// /home/user, Daytona's /home/daytona), which is the same tree.
type Spelling string

// Layout maps a front end's paths onto the workspace: Mount and Home name
// the same tree, and a relative path (or ~) is relative to it, answered
// in the Relative spelling.
type Layout struct {
	Home     Spelling
	Relative Spelling
}

// Resolve maps a client's path to the workspace API's path (Mount/...),
// and says which spelling to answer with. ok is false for an absolute
// path outside the tree (/tmp, /etc): it is not the session's.
func (l Layout) Resolve(p string) (ws string, sp Spelling, ok bool) {
	switch {
	case p == "" || p == "." || p == "~":
		return Mount, l.Relative, true
	case strings.HasPrefix(p, "~/"):
		return Mount + "/" + p[2:], l.Relative, true
	case !strings.HasPrefix(p, "/"):
		return Mount + "/" + p, l.Relative, true
	}
	c := path.Clean(p)
	for _, sp := range []Spelling{Mount, l.Home} {
		if c == string(sp) {
			return Mount, sp, true
		}
		if rest, found := strings.CutPrefix(c, string(sp)+"/"); found {
			return Mount + "/" + rest, sp, true
		}
	}
	return "", "", false
}

// Show is the workspace API's path (as code sees it, Mount/...) in the
// spelling sp.
func (sp Spelling) Show(display string) string {
	if sp == Mount {
		return display
	}
	if display == Mount {
		return string(sp)
	}
	if rest, ok := strings.CutPrefix(display, Mount+"/"); ok {
		return string(sp) + "/" + rest
	}
	return display
}
