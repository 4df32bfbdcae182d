package workspace

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"
)

// Walks (list, glob, grep) read directories through the session's Root and
// never follow a symlink into a directory: a link shows as an entry of
// type "symlink" whose target is never read or revealed. A directory
// swapped for a link during the walk is opened through the Root like
// everything else, so it can only lead to another place inside.

// Entry is one item of a listing. Path is as code sees it (/workspace/...).
type Entry struct {
	Path     string    `json:"path"`
	Type     string    `json:"type"` // file | dir | symlink | other
	Size     int64     `json:"size"`
	Modified time.Time `json:"modified"`
}

// Listing is the result of a list or a glob, sorted by path.
type Listing struct {
	Entries []Entry `json:"entries"`
	// Truncated is set when the entry cap or the walk budget cut it.
	Truncated bool `json:"truncated"`
}

func entryOf(rel string, fi fs.FileInfo) Entry {
	e := Entry{Path: DisplayPath(rel), Size: fi.Size(), Modified: fi.ModTime().UTC()}
	switch m := fi.Mode(); {
	case m.IsDir():
		e.Type, e.Size = "dir", 0
	case m.IsRegular():
		e.Type = "file"
	case m&fs.ModeSymlink != 0:
		e.Type, e.Size = "symlink", 0 // a link's size is its target's length
	default:
		e.Type, e.Size = "other", 0
	}
	return e
}

// readDir returns at most max entries of dir, sorted by name, and whether
// there were more. Entries carry lstat information.
func readDir(r *os.Root, dir string, max int) ([]fs.DirEntry, bool, error) {
	if max <= 0 {
		return nil, true, nil
	}
	d, err := openDir(r, dir)
	if err != nil {
		return nil, false, err
	}
	defer d.Close()
	var out []fs.DirEntry
	for {
		batch, err := d.ReadDir(256)
		out = append(out, batch...)
		if len(out) > max {
			out = out[:max]
			slices.SortFunc(out, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
			return out, true, nil
		}
		if err == io.EOF || (err == nil && len(batch) == 0) {
			break
		}
		if err != nil {
			return nil, false, err
		}
	}
	slices.SortFunc(out, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return out, false, nil
}

// openDir opens a directory for reading its entries. O_DIRECTORY makes the
// kernel refuse anything else before opening it: a directory the code
// swapped for a FIFO must fail, not block the request.
func openDir(r *os.Root, dir string) (*os.File, error) {
	return r.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY, 0)
}

func join(dir, name string) string {
	if dir == "." {
		return name
	}
	return dir + "/" + name
}

func sortEntries(es []Entry) {
	slices.SortFunc(es, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })
}

// ListFiles lists p: a directory's entries down to depth levels (1: its
// children only), or a file's own entry. Shallower levels are listed
// first, so a cut listing keeps the top of the tree.
func (w *Workspaces) ListFiles(ctx context.Context, sessionID, p string, depth int) (Listing, error) {
	rel, err := ResolvePath(p)
	if err != nil {
		return Listing{}, err
	}
	s, err := w.open(ctx, sessionID, false)
	if err != nil {
		return Listing{}, err
	}
	defer s.close()
	fi, err := s.root.Stat(rel)
	if err != nil {
		return Listing{}, mapErr(err)
	}
	out := Listing{Entries: []Entry{}}
	if !fi.IsDir() {
		out.Entries = append(out.Entries, entryOf(rel, fi))
		return out, nil
	}
	depth = min(max(depth, 1), MaxPathDepth-depthOf(rel))
	budget := w.opts.MaxWalkEntries
	type item struct {
		rel   string
		level int
	}
	queue := []item{{rel, 1}}
	for len(queue) > 0 && !out.Truncated {
		if err := ctx.Err(); err != nil {
			return Listing{}, err
		}
		it := queue[0]
		queue = queue[1:]
		entries, cut, err := readDir(s.root, it.rel, budget)
		if err != nil {
			if it.rel == rel {
				return Listing{}, mapErr(err)
			}
			continue // removed or swapped meanwhile
		}
		budget -= len(entries)
		out.Truncated = cut
		for _, e := range entries {
			info, err := e.Info()
			if err != nil {
				continue
			}
			if len(out.Entries) == w.opts.MaxListEntries {
				out.Truncated = true
				break
			}
			child := join(it.rel, e.Name())
			out.Entries = append(out.Entries, entryOf(child, info))
			if e.IsDir() && it.level < depth {
				queue = append(queue, item{child, it.level + 1})
			}
		}
	}
	sortEntries(out.Entries)
	return out, nil
}

// Glob lists the entries under base whose path relative to base matches
// pattern (path.Match syntax per segment, "**" for any number of
// directories), sorted by path.
func (w *Workspaces) Glob(ctx context.Context, sessionID, base, pattern string) (Listing, error) {
	g, err := compileGlob(pattern)
	if err != nil {
		return Listing{}, err
	}
	rel, err := ResolvePath(base)
	if err != nil {
		return Listing{}, err
	}
	s, err := w.open(ctx, sessionID, false)
	if err != nil {
		return Listing{}, err
	}
	defer s.close()
	top, err := s.openTree(rel)
	if err != nil {
		return Listing{}, err
	}
	defer top.Close()
	out := Listing{Entries: []Entry{}}
	wk := walker{ctx: ctx, budget: w.opts.MaxWalkEntries}
	err = walkTree(&wk, top, rel, depthOf(rel), g.start(),
		func(_ *os.Root, child string, e fs.DirEntry, st globState) (globState, bool, bool) {
			st = g.step(st, e.Name())
			if g.matched(st) {
				if len(out.Entries) == w.opts.MaxListEntries {
					out.Truncated = true
					return st, false, true
				}
				if info, err := e.Info(); err == nil {
					out.Entries = append(out.Entries, entryOf(child, info))
				}
			}
			return st, g.alive(st), false
		})
	if err != nil {
		return Listing{}, err
	}
	out.Truncated = out.Truncated || wk.cut
	sortEntries(out.Entries)
	return out, nil
}

// GrepQuery is a search. Pattern is a literal string, or with Literal
// false a Go (RE2) regular expression, matched against each line. Path is
// a file or the directory to search under; Glob, if set, filters files: a
// pattern without "/" matches the file name, one with "/" the path
// relative to Path ("**" allowed).
type GrepQuery struct {
	Pattern string
	Path    string
	Glob    string
	Literal bool
}

// GrepMatch is one matching line; Line counts from 1.
type GrepMatch struct {
	Path string `json:"path"`
	Line int    `json:"line"`
	Text string `json:"text"`
}

// GrepResult is the matches, in path then line order.
type GrepResult struct {
	Matches []GrepMatch `json:"matches"`
	// Truncated is set when the match cap, the walk budget or the byte
	// budget cut the search.
	Truncated    bool  `json:"truncated"`
	FilesScanned int   `json:"files_scanned"`
	BytesScanned int64 `json:"-"`
}

// Grep limits.
const (
	maxGrepPatternBytes = 1000
	maxMatchTextBytes   = 1000
)

// Grep searches regular files for Pattern. Binary files (a NUL in the first
// 8000 bytes), symlinks met during the walk and files the session may not
// read (see openRead) are skipped. RE2 matching is linear in the input,
// and the input is bounded by Options.MaxGrepBytes; lines longer than 64
// KiB are matched in 64 KiB pieces.
func (w *Workspaces) Grep(ctx context.Context, sessionID string, q GrepQuery) (GrepResult, error) {
	match, err := compileMatcher(q.Pattern, q.Literal)
	if err != nil {
		return GrepResult{}, err
	}
	filter := func(string) bool { return true }
	if q.Glob != "" {
		g, err := compileGlob(q.Glob)
		if err != nil {
			return GrepResult{}, err
		}
		if strings.Contains(q.Glob, "/") {
			filter = g.matchPath
		} else {
			filter = func(rel string) bool { ok, _ := path.Match(q.Glob, path.Base(rel)); return ok }
		}
	}
	rel, err := ResolvePath(q.Path)
	if err != nil {
		return GrepResult{}, err
	}
	s, err := w.open(ctx, sessionID, false)
	if err != nil {
		return GrepResult{}, err
	}
	defer s.close()
	fi, err := s.root.Stat(rel)
	if err != nil {
		return GrepResult{}, mapErr(err)
	}
	gr := grepper{ctx: ctx, s: s, match: match, maxMatches: w.opts.MaxGrepMatches, budget: w.opts.MaxGrepBytes,
		res: GrepResult{Matches: []GrepMatch{}}}
	if !fi.IsDir() {
		if err := gr.file(s.root, rel, rel, true); err != nil {
			return GrepResult{}, err
		}
		return gr.res, nil
	}
	top, err := s.openTree(rel)
	if err != nil {
		return GrepResult{}, err
	}
	defer top.Close()
	wk := walker{ctx: ctx, budget: w.opts.MaxWalkEntries}
	err = walkTree(&wk, top, rel, depthOf(rel), struct{}{},
		func(r *os.Root, child string, e fs.DirEntry, _ struct{}) (struct{}, bool, bool) {
			if e.Type().IsRegular() && filter(relTo(rel, child)) {
				_ = gr.file(r, e.Name(), child, false)
			}
			return struct{}{}, true, gr.res.Truncated || gr.err != nil
		})
	if err == nil {
		err = gr.err
	}
	if err != nil {
		return GrepResult{}, err
	}
	gr.res.Truncated = gr.res.Truncated || wk.cut
	return gr.res, nil
}

func relTo(base, rel string) string {
	if base == "." {
		return rel
	}
	return strings.TrimPrefix(rel, base+"/")
}

func compileMatcher(pattern string, literal bool) (func([]byte) bool, error) {
	if pattern == "" {
		return nil, fmt.Errorf("%w: empty", ErrBadPattern)
	}
	if len(pattern) > maxGrepPatternBytes {
		return nil, fmt.Errorf("%w: longer than %d bytes", ErrBadPattern, maxGrepPatternBytes)
	}
	if literal {
		pat := []byte(pattern)
		return func(line []byte) bool { return bytes.Contains(line, pat) }, nil
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadPattern, err)
	}
	return re.Match, nil
}

type grepper struct {
	ctx        context.Context
	s          *session
	match      func([]byte) bool
	maxMatches int
	budget     int64
	res        GrepResult
	err        error // the context's, which ends the walk
}

// file searches the file name under r, shown as rel. Errors opening it
// skip it, except for the file the client named (explicit), whose error is
// the answer.
func (g *grepper) file(r *os.Root, name, rel string, explicit bool) error {
	f, _, err := g.s.openRead(r, name)
	if err != nil {
		if explicit {
			return err
		}
		return nil
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 64<<10)
	if head, _ := br.Peek(sniffBytes); bytes.IndexByte(head, 0) >= 0 {
		return nil
	}
	g.res.FilesScanned++
	line, lastMatch, atStart := 0, 0, true
	for chunks := 0; ; chunks++ {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			if atStart {
				line++
			}
			atStart = chunk[len(chunk)-1] == '\n'
			g.res.BytesScanned += int64(len(chunk))
			text := bytes.TrimSuffix(bytes.TrimSuffix(chunk, []byte("\n")), []byte("\r"))
			if line != lastMatch && g.match(text) {
				if len(g.res.Matches) == g.maxMatches {
					g.res.Truncated = true
					return nil
				}
				lastMatch = line
				g.res.Matches = append(g.res.Matches, GrepMatch{Path: DisplayPath(rel), Line: line, Text: matchText(text)})
			}
			if g.res.BytesScanned > g.budget {
				g.res.Truncated = true
				return nil
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return nil // the file went away or turned unreadable: skip the rest
		}
		if chunks%256 == 255 {
			if err := g.ctx.Err(); err != nil {
				g.err = err
				return err
			}
		}
	}
}

// matchText is a matched line as shown: valid UTF-8, at most
// maxMatchTextBytes, cut on a rune boundary.
func matchText(b []byte) string {
	s := string(b)
	if len(s) > maxMatchTextBytes {
		s = s[:maxMatchTextBytes]
		// Drop a rune the cut split (at most UTFMax-1 bytes).
		for i := 0; i < utf8.UTFMax-1 && s != "" && !utf8.FullRuneInString(s[lastRuneStart(s):]); i++ {
			s = s[:len(s)-1]
		}
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

func lastRuneStart(s string) int {
	for i := len(s) - 1; i > 0 && i >= len(s)-utf8.UTFMax; i-- {
		if utf8.RuneStart(s[i]) {
			return i
		}
	}
	return 0
}

// walker bounds a walk: its context and the entries it may still visit.
type walker struct {
	ctx     context.Context
	budget  int
	cut     bool // the budget ran out
	stopped bool // visit said stop
}

// walkTree visits the entries under the directory r (shown as rel, depth
// components below the workspace) depth first, in name order. visit gets
// the Root of the entry's directory, the entry's path and the state of its
// directory; it returns the state for the entry's children, whether to
// descend into it (directories only; symlinks never), and whether to stop.
//
// Each directory is entered through a Root pinned on it (subRoot), so a
// walk costs one open per directory whatever the depth, and a directory
// swapped for a link while the walk is inside it changes nothing: children
// are always opened from the directory already open, never by path from
// the top. The walk goes no deeper than MaxPathDepth.
func walkTree[T any](wk *walker, r *os.Root, rel string, depth int, st T,
	visit func(r *os.Root, rel string, e fs.DirEntry, st T) (child T, descend, stop bool)) error {
	if err := wk.ctx.Err(); err != nil {
		return err
	}
	entries, cut, err := readDir(r, ".", wk.budget)
	if err != nil {
		return nil // removed or swapped meanwhile: nothing to see
	}
	wk.budget -= len(entries)
	wk.cut = wk.cut || cut
	for _, e := range entries {
		child := join(rel, e.Name())
		cst, descend, stop := visit(r, child, e, st)
		if stop {
			wk.stopped = true
			return nil
		}
		if !descend || !e.IsDir() || depth+1 >= MaxPathDepth {
			continue
		}
		sub, err := subRoot(r, e.Name())
		if err != nil {
			continue
		}
		err = walkTree(wk, sub, child, depth+1, cst, visit)
		sub.Close()
		if err != nil || wk.stopped {
			return err
		}
	}
	return nil
}

// openTree opens the directory a walk starts from, through the session's
// Root (a link on the way that leads out is path_traversal).
func (s *session) openTree(rel string) (*os.Root, error) {
	fi, err := s.root.Stat(rel)
	if err != nil {
		return nil, mapErr(err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%w: %s", ErrNotDir, rel)
	}
	r, err := subRoot(s.root, rel)
	if err != nil {
		return nil, mapErr(err)
	}
	return r, nil
}

// subRoot returns a Root on the directory name under r, pinned to the
// directory opened now. The directory is opened once, with O_DIRECTORY (a
// FIFO swapped in fails at once rather than blocking, which r.OpenRoot
// would do), and the Root is made from that descriptor through
// /proc/self/fd, so the path is never resolved a second time.
func subRoot(r *os.Root, name string) (*os.Root, error) {
	d, err := openDir(r, name)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	rc, err := d.SyscallConn()
	if err != nil {
		return nil, err
	}
	var sub *os.Root
	cerr := rc.Control(func(fd uintptr) {
		sub, err = os.OpenRoot("/proc/self/fd/" + strconv.FormatUint(uint64(fd), 10))
	})
	if cerr != nil {
		return nil, cerr
	}
	return sub, err
}

// depthOf is the number of components of a path from ResolvePath.
func depthOf(rel string) int {
	if rel == "." {
		return 0
	}
	return strings.Count(rel, "/") + 1
}
