package workspace

import (
	"fmt"
	"path"
	"strings"
)

// Glob pattern limits.
const (
	maxPatternBytes    = 1024
	maxPatternSegments = 64
)

// globPattern is a compiled glob: path.Match syntax per "/"-separated
// segment, plus "**" as a whole segment matching zero or more directories.
// It is matched one path component at a time during a walk, so a directory
// no match can lie under is never entered.
type globPattern struct {
	segs []string
}

// compileGlob checks a pattern. It is relative to the walk's base; the
// /workspace/ prefix is accepted and stripped, other absolute patterns and
// ".." segments are path_traversal (a walk never leaves its base anyway,
// but a pattern that says so is a client mistake worth naming).
func compileGlob(pattern string) (*globPattern, error) {
	if pattern == "" {
		return nil, fmt.Errorf("%w: empty", ErrBadPattern)
	}
	if len(pattern) > maxPatternBytes {
		return nil, fmt.Errorf("%w: longer than %d bytes", ErrBadPattern, maxPatternBytes)
	}
	if strings.IndexByte(pattern, 0) >= 0 {
		return nil, traversal(errTraversalNUL, "pattern")
	}
	if strings.HasPrefix(pattern, "/") {
		rest, ok := strings.CutPrefix(pattern, Mount)
		if !ok || (rest != "" && rest[0] != '/') {
			return nil, traversal(errTraversalAbsolute, "pattern")
		}
		pattern = rest
	}
	var segs []string
	for seg := range strings.SplitSeq(pattern, "/") {
		switch seg {
		case "", ".":
			continue
		case "..":
			return nil, traversal(errTraversalDotDot, "pattern")
		case "**":
			if len(segs) > 0 && segs[len(segs)-1] == "**" {
				continue // a/**/**/b is a/**/b
			}
		default:
			if _, err := path.Match(seg, ""); err != nil {
				return nil, fmt.Errorf("%w: %w", ErrBadPattern, err)
			}
		}
		segs = append(segs, seg)
	}
	if len(segs) == 0 {
		return nil, fmt.Errorf("%w: no segments", ErrBadPattern)
	}
	if len(segs) > maxPatternSegments {
		return nil, fmt.Errorf("%w: more than %d segments", ErrBadPattern, maxPatternSegments)
	}
	return &globPattern{segs: segs}, nil
}

// globState is the set of pattern positions a walk has reached: bit i set
// means segs[:i] matched the components so far.
type globState []bool

func (g *globPattern) start() globState {
	st := make(globState, len(g.segs)+1)
	st[0] = true
	g.close(st)
	return st
}

// close adds the positions reachable by letting "**" match nothing.
func (g *globPattern) close(st globState) {
	for i, seg := range g.segs {
		if st[i] && seg == "**" {
			st[i+1] = true
		}
	}
}

// step consumes one path component.
func (g *globPattern) step(st globState, name string) globState {
	next := make(globState, len(st))
	for i, seg := range g.segs {
		if !st[i] {
			continue
		}
		if seg == "**" {
			next[i] = true
			continue
		}
		if ok, _ := path.Match(seg, name); ok {
			next[i+1] = true
		}
	}
	g.close(next)
	return next
}

// matched reports whether the components consumed so far match the whole
// pattern; alive whether more components could still lead to a match.
func (g *globPattern) matched(st globState) bool { return st[len(g.segs)] }

func (g *globPattern) alive(st globState) bool {
	for _, ok := range st[:len(g.segs)] {
		if ok {
			return true
		}
	}
	return false
}

// matchPath matches a whole relative path.
func (g *globPattern) matchPath(rel string) bool {
	st := g.start()
	for comp := range strings.SplitSeq(rel, "/") {
		if st = g.step(st, comp); !g.alive(st) && !g.matched(st) {
			return false
		}
	}
	return g.matched(st)
}
