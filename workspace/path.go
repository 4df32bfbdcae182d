package workspace

import (
	"fmt"
	"path"
	"strings"

	"github.com/sandgate/sandgate/errcode"
)

// ErrPathTraversal is wrapped by every refusal of a path that is, or could
// be read as, outside the session's workspace: by its spelling (the lexical
// checks of ResolvePath) or by a symlink on the way that leads out.
var ErrPathTraversal = errcode.New(errcode.PathTraversal, "the path is not inside the workspace")

// Lexical limits on a client's path. The first two match Linux's PATH_MAX
// and NAME_MAX, so a path that passes can be handed to the kernel whole.
// MaxPathDepth has no kernel counterpart: os.Root resolves every access
// one component at a time from the workspace, so checking each directory
// of a path costs depth² opens; 128 levels keep that bounded (about 8,000
// system calls) and are far beyond any real project. Walks (list, glob,
// grep) do not descend below it either.
const (
	MaxPathBytes      = 4096
	MaxComponentBytes = 255
	MaxPathDepth      = 128
)

// Mount is where code sees the workspace, and the only absolute prefix the
// API accepts. Every path the API shows starts with it.
const Mount = "/workspace"

// The specific reasons, each a path_traversal with a message that helps the
// client fix its request (and says nothing about the host).
var (
	errTraversalNUL       = errcode.New(errcode.PathTraversal, "the path contains a NUL byte")
	errTraversalBackslash = errcode.New(errcode.PathTraversal, "the path contains a backslash; use / as the separator")
	errTraversalAbsolute  = errcode.New(errcode.PathTraversal, "absolute paths must start with /workspace/")
	errTraversalDotDot    = errcode.New(errcode.PathTraversal, "the path leaves the workspace through ..")
	errTraversalLong      = errcode.New(errcode.PathTraversal, "the path is longer than 4096 bytes")
	errTraversalComponent = errcode.New(errcode.PathTraversal, "a path component is longer than 255 bytes")
	errTraversalDepth     = errcode.New(errcode.PathTraversal, "the path has more than 128 components")
	errTraversalSymlink   = errcode.New(errcode.PathTraversal, "a symlink on the path leads out of the workspace")
)

// traversal wraps a specific reason so that errcode.Of finds the reason's
// message first and errors.Is(err, ErrPathTraversal) still holds.
func traversal(reason *errcode.Error, detail string) error {
	return fmt.Errorf("%w (%w): %s", reason, ErrPathTraversal, detail)
}

// ResolvePath turns a client's path into a clean path relative to the
// session's workspace: "." for the workspace itself, otherwise a local path
// with no ".", ".." or empty components (filepath.IsLocal holds).
//
// It refuses, with a wrapped ErrPathTraversal:
//   - NUL bytes;
//   - backslashes. They are not normalised to slashes: on Linux a
//     backslash is an ordinary file-name byte, so "..\\x" names a file in
//     the workspace, but a client (or a Windows-minded proxy) may mean a
//     separator; refusing keeps the two readings from ever disagreeing.
//     Files whose names hold a backslash are reachable through list, glob
//     and grep results only by code, not by the API;
//   - absolute paths, except /workspace and /workspace/..., whose prefix
//     is stripped;
//   - ".." that would leave the workspace. ".." is resolved lexically,
//     before any symlink, so "a/../b" is "b" whatever "a" is;
//   - paths over MaxPathBytes or MaxPathDepth components, and components
//     over MaxComponentBytes.
//
// Nothing else is special. Percent signs are not decoded (the HTTP layer
// decoded the query once; "%2e%2e" is a file name here), and Unicode
// lookalikes of "." and "/" (U+2024, U+FF0F, U+2215...) are ordinary name
// bytes. ResolvePath is purely lexical: symlinks are the job of the os.Root
// every operation goes through.
func ResolvePath(p string) (string, error) {
	if len(p) > MaxPathBytes {
		return "", traversal(errTraversalLong, fmt.Sprintf("%d bytes", len(p)))
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", traversal(errTraversalNUL, "NUL")
	}
	if strings.IndexByte(p, '\\') >= 0 {
		return "", traversal(errTraversalBackslash, "backslash")
	}
	if strings.HasPrefix(p, "/") {
		rest, ok := strings.CutPrefix(p, Mount)
		if !ok || (rest != "" && rest[0] != '/') {
			return "", traversal(errTraversalAbsolute, "absolute")
		}
		p = strings.TrimLeft(rest, "/")
	}
	if p == "" {
		return ".", nil
	}
	c := path.Clean(p)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", traversal(errTraversalDotDot, "dot-dot")
	}
	depth := 0
	for comp := range strings.SplitSeq(c, "/") {
		if len(comp) > MaxComponentBytes {
			return "", traversal(errTraversalComponent, fmt.Sprintf("%d bytes", len(comp)))
		}
		depth++
	}
	if depth > MaxPathDepth {
		return "", traversal(errTraversalDepth, fmt.Sprintf("%d components", depth))
	}
	return c, nil
}

// DisplayPath is how the API shows a path ResolvePath returned: as code
// sees it, under /workspace, never as the host path.
func DisplayPath(rel string) string {
	if rel == "." || rel == "" {
		return Mount
	}
	return Mount + "/" + rel
}
