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
	depth = max(depth, 1)
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
	if err := s.checkDir(rel); err != nil {
		return Listing{}, err
	}
	out := Listing{Entries: []Entry{}}
	budget := w.opts.MaxWalkEntries
	type frame struct {
		dir string
		st  globState
	}
	stack := []frame{{rel, g.start()}}
	for len(stack) > 0 && !out.Truncated {
		if err := ctx.Err(); err != nil {
			return Listing{}, err
		}
		f := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		entries, cut, err := readDir(s.root, f.dir, budget)
		if err != nil {
			if f.dir == rel {
				return Listing{}, mapErr(err)
			}
			continue
		}
		budget -= len(entries)
		out.Truncated = cut
		var sub []frame
		for _, e := range entries {
			st := g.step(f.st, e.Name())
			child := join(f.dir, e.Name())
			if g.matched(st) {
				info, err := e.Info()
				if err != nil {
					continue
				}
				if len(out.Entries) == w.opts.MaxListEntries {
					out.Truncated = true
					break
				}
				out.Entries = append(out.Entries, entryOf(child, info))
			}
			if e.IsDir() && g.alive(st) {
				sub = append(sub, frame{child, st})
			}
		}
		for i := len(sub) - 1; i >= 0; i-- {
			stack = append(stack, sub[i])
		}
	}
	sortEntries(out.Entries)
	return out, nil
}

// checkDir reports whether rel is a directory (following links inside).
func (s *session) checkDir(rel string) error {
	fi, err := s.root.Stat(rel)
	if err != nil {
		return mapErr(err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: %s", ErrNotDir, rel)
	}
	return nil
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
		if err := gr.file(rel, true); err != nil {
			return GrepResult{}, err
		}
		return gr.res, nil
	}
	gr.walkBudget = w.opts.MaxWalkEntries
	gr.filter = func(child string) bool { return filter(relTo(rel, child)) }
	if err := gr.dir(rel, true); err != nil {
		return GrepResult{}, err
	}
	return gr.res, nil
}

// dir searches a directory depth first, in name order, so matches come out
// in path order and a cut result keeps the first ones.
func (g *grepper) dir(dir string, top bool) error {
	if err := g.ctx.Err(); err != nil {
		return err
	}
	entries, cut, err := readDir(g.s.root, dir, g.walkBudget)
	if err != nil {
		if top {
			return mapErr(err)
		}
		return nil // removed or swapped meanwhile
	}
	g.walkBudget -= len(entries)
	for _, e := range entries {
		if g.res.Truncated {
			return nil
		}
		child := join(dir, e.Name())
		switch {
		case e.IsDir():
			err = g.dir(child, false)
		case e.Type().IsRegular() && g.filter(child):
			err = g.file(child, false)
		}
		if err != nil {
			return err
		}
	}
	g.res.Truncated = g.res.Truncated || cut
	return nil
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
	filter     func(rel string) bool
	maxMatches int
	budget     int64
	walkBudget int
	res        GrepResult
}

// file searches one file. Errors opening it skip it, except for the file
// the client named (explicit), whose error is the answer.
func (g *grepper) file(rel string, explicit bool) error {
	f, _, err := g.s.openRead(g.s.root, rel)
	if err != nil {
		if explicit {
			return err
		}
		return nil
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 64<<10)
	if head, _ := r.Peek(sniffBytes); bytes.IndexByte(head, 0) >= 0 {
		return nil
	}
	g.res.FilesScanned++
	line, lastMatch, atStart := 0, 0, true
	for chunks := 0; ; chunks++ {
		chunk, err := r.ReadSlice('\n')
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
