package workspace

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"
)

// The file operations of DESIGN.md §5 "Workspace files".
//
// Every operation takes the client's path through ResolvePath, then works
// through an os.Root opened on the session directory, so neither ".." nor
// a symlink, planted before or swapped in during the operation, can reach
// outside. On top of that:
//
//   - writes never modify a file in place: the new content goes to a temp
//     file in the target's directory, which is then renamed onto the
//     target (linked, for mode=create). A failed write leaves the old file
//     as it was, and a hard link planted at the target is replaced, never
//     written through;
//   - every file and directory a write creates is owned by the session's
//     uid (fchown on the descriptor it was created with), so the code can
//     change what the agent wrote;
//   - mutating operations on one file hold a per-file lock (keyed on the
//     path with symlinks resolved), so concurrent edits apply one after the
//     other and none is lost;
//   - reads open with O_NONBLOCK and refuse anything but a regular file (a
//     FIFO planted by the code cannot hang a request) and hard links the
//     session does not own (see openRead).

// DefaultReadLines is the number of lines a numbered read returns when the
// request names no limit (deepagents' default).
const DefaultReadLines = 2000

// EmptyFileMessage is the content of a numbered read of an empty file
// (deepagents' wording), so an agent cannot mistake it for a failed read.
const EmptyFileMessage = "System reminder: File exists but has empty contents"

// sniffBytes is how much of a file is inspected for a NUL byte to call it
// binary (git's heuristic: text files practically never hold NUL).
const sniffBytes = 8000

// TextPage is one numbered read: "%6d\t%s" per line, lines joined by "\n".
type TextPage struct {
	Content    string `json:"content"`
	TotalLines int    `json:"total_lines"`
	// Truncated is set when the character cap cut the page short.
	Truncated bool `json:"truncated"`
	// NextOffset is the offset to read next when lines remain after this
	// page (cut by the cap or by the limit); zero when none remain.
	NextOffset int `json:"next_offset,omitempty"`
}

// ReadText returns lines [offset, offset+limit) of a text file, numbered
// from 1. A file with a NUL byte in its first 8000 bytes is binary and
// refused (ErrBinaryFile); invalid UTF-8 is shown as U+FFFD. The content
// is capped at Options.MaxReadChars characters (line-number prefixes
// included); a line longer than the whole cap is shown cut when it is the
// first of the page. The file is read to its end to count its lines.
func (w *Workspaces) ReadText(ctx context.Context, sessionID, p string, offset, limit int) (TextPage, error) {
	rel, err := ResolvePath(p)
	if err != nil {
		return TextPage{}, err
	}
	s, err := w.open(ctx, sessionID, false)
	if err != nil {
		return TextPage{}, err
	}
	defer s.close()
	f, fi, err := s.openRead(s.root, rel)
	if err != nil {
		return TextPage{}, err
	}
	defer f.Close()
	offset = max(offset, 0)
	if limit <= 0 {
		limit = DefaultReadLines
	}
	r := bufio.NewReaderSize(f, 64<<10)
	if head, _ := r.Peek(sniffBytes); bytes.IndexByte(head, 0) >= 0 {
		return TextPage{}, ErrBinaryFile
	}
	pg := pager{offset: offset, limit: limit, budget: w.opts.MaxReadChars}
	// Room for the text plus a prefix for every 16 bytes, within the cap.
	pg.out = make([]byte, 0, min(fi.Size()+fi.Size()/2+64, 4*int64(pg.budget)))
	if err := pg.scan(ctx, r); err != nil {
		return TextPage{}, mapErr(err)
	}
	return pg.page()
}

// pager formats one numbered page while counting every line of the file.
type pager struct {
	offset, limit, budget int

	out      []byte
	line     int    // 0-based index of the line being read
	cur      []byte // the current line, when it is on the page
	open     bool   // a line has started and not ended
	emitted  int
	stopped  bool // the cap was hit
	next     int
	chunks   int
	curLimit int
}

func (pg *pager) onPage() bool {
	return !pg.stopped && pg.line >= pg.offset && pg.line-pg.offset < pg.limit
}

func (pg *pager) scan(ctx context.Context, r *bufio.Reader) error {
	// A line is kept only up to what the cap could show (4 bytes a rune).
	pg.curLimit = 4*pg.budget + 4
	for {
		chunk, err := r.ReadSlice('\n')
		if len(chunk) > 0 {
			pg.open = true
			if pg.onPage() && len(pg.cur) < pg.curLimit {
				pg.cur = append(pg.cur, chunk[:min(len(chunk), pg.curLimit-len(pg.cur))]...)
			}
			if chunk[len(chunk)-1] == '\n' {
				pg.endLine()
			}
		}
		switch {
		case err == io.EOF:
			if pg.open {
				pg.endLine()
			}
			return nil
		case err != nil && !errors.Is(err, bufio.ErrBufferFull):
			return err
		}
		if pg.chunks++; pg.chunks%256 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
	}
}

// endLine formats the line just read, "%6d\t%s", if it is on the page.
func (pg *pager) endLine() {
	if pg.onPage() {
		text := bytes.TrimSuffix(bytes.TrimSuffix(pg.cur, []byte("\n")), []byte("\r"))
		if !utf8.Valid(text) {
			text = bytes.ToValidUTF8(text, []byte("\uFFFD"))
		}
		var num [24]byte
		prefix := strconv.AppendInt(num[:0], int64(pg.line+1), 10)
		pad := max(6-len(prefix), 0)
		n := pad + len(prefix) + 1 + utf8.RuneCount(text)
		if pg.emitted > 0 {
			n++ // the joining newline
		}
		switch {
		case n <= pg.budget:
			if pg.emitted > 0 {
				pg.out = append(pg.out, '\n')
			}
			pg.out = append(pg.out, "      "[:pad]...)
			pg.out = append(append(pg.out, prefix...), '\t')
			pg.out = append(pg.out, text...)
			pg.budget -= n
			pg.emitted++
		case pg.emitted == 0: // one line longer than the whole cap
			entry := append(append(append([]byte("      "[:pad]), prefix...), '\t'), text...)
			pg.out = append(pg.out, cutRunes(entry, pg.budget)...)
			pg.emitted++
			pg.stopped, pg.next = true, pg.line+1
		default:
			pg.stopped, pg.next = true, pg.line
		}
	}
	pg.line++
	pg.cur = pg.cur[:0]
	pg.open = false
}

func (pg *pager) page() (TextPage, error) {
	total := pg.line
	if total == 0 {
		return TextPage{Content: EmptyFileMessage}, nil
	}
	if pg.offset >= total {
		return TextPage{}, fmt.Errorf("%w: offset %d, %d lines", ErrOffsetPastEnd, pg.offset, total)
	}
	out := TextPage{Content: string(pg.out), TotalLines: total, Truncated: pg.stopped}
	switch {
	case pg.stopped && pg.next < total:
		out.NextOffset = pg.next
	case !pg.stopped && pg.offset+pg.limit < total:
		out.NextOffset = pg.offset + pg.limit
	}
	return out, nil
}

// cutRunes returns the first n runes of b.
func cutRunes(b []byte, n int) []byte {
	for i := 0; i < len(b); n-- {
		if n == 0 {
			return b[:i]
		}
		_, size := utf8.DecodeRune(b[i:])
		i += size
	}
	return b
}

// RawFile is an open regular file of a workspace, for raw download. The
// caller closes it.
type RawFile struct {
	*os.File
	Size    int64
	ModTime time.Time
}

// OpenRaw opens a regular file for raw download.
func (w *Workspaces) OpenRaw(ctx context.Context, sessionID, p string) (*RawFile, error) {
	rel, err := ResolvePath(p)
	if err != nil {
		return nil, err
	}
	s, err := w.open(ctx, sessionID, false)
	if err != nil {
		return nil, err
	}
	defer s.close() // the open file outlives its Root
	f, fi, err := s.openRead(s.root, rel)
	if err != nil {
		return nil, err
	}
	return &RawFile{File: f, Size: fi.Size(), ModTime: fi.ModTime()}, nil
}

// WriteMode says what a write does to an existing file.
type WriteMode string

// The modes of PUT .../files/content.
const (
	WriteOverwrite WriteMode = "overwrite" // replace the file (the default)
	WriteCreate    WriteMode = "create"    // fail with ErrExists if it exists
	WriteAppend    WriteMode = "append"    // add to the end (the file is still replaced atomically)
)

// ParseWriteMode accepts the three modes, and "" for overwrite.
func ParseWriteMode(s string) (WriteMode, error) {
	switch m := WriteMode(s); m {
	case "":
		return WriteOverwrite, nil
	case WriteOverwrite, WriteCreate, WriteAppend:
		return m, nil
	}
	return "", ErrBadMode
}

// WriteResult describes a finished write.
type WriteResult struct {
	// Size is the file's size after the write; Written what came from the
	// request body.
	Size    int64 `json:"size"`
	Written int64 `json:"written"`
	Created bool  `json:"created"`
}

// Write stores body at p, creating parent directories. Symlinks on the way
// (the final one included) are followed when they stay inside; the file
// is replaced atomically (see the package's file contract above). The
// result may hold at most Options.MaxFileBytes (ErrFileTooLarge; append
// counts the old content) and must fit the session's quota.
func (w *Workspaces) Write(ctx context.Context, sessionID, p string, mode WriteMode, body io.Reader) (WriteResult, error) {
	mode, err := ParseWriteMode(string(mode))
	if err != nil {
		return WriteResult{}, err
	}
	rel, err := ResolvePath(p)
	if err != nil {
		return WriteResult{}, err
	}
	s, err := w.open(ctx, sessionID, true)
	if err != nil {
		return WriteResult{}, err
	}
	defer s.close()
	if rel, err = s.canonical(rel, true); err != nil {
		return WriteResult{}, err
	}
	if rel == "." {
		return WriteResult{}, ErrIsDir
	}
	unlock := w.locks.lock(fileKey(sessionID, rel))
	defer unlock()

	dirRel, _ := split(rel)
	created, err := s.mkdirAll(dirRel)
	if err != nil {
		s.removeCreated(created)
		return WriteResult{}, err
	}
	t := target{dir: dirRel, rel: rel, created: created, perm: filePerm, excl: mode == WriteCreate}
	old, err := s.root.Lstat(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		t.isNew = true
	case err != nil:
		s.removeCreated(created)
		return WriteResult{}, mapErr(err)
	case old.IsDir():
		return WriteResult{}, ErrIsDir
	case mode == WriteCreate:
		return WriteResult{}, ErrExists
	case old.Mode().IsRegular():
		t.perm, t.oldSize = old.Mode().Perm(), old.Size()
	}
	var prefix io.Reader
	if mode == WriteAppend && !t.isNew {
		f, _, err := s.openRead(s.root, rel)
		if err != nil {
			return WriteResult{}, err
		}
		defer f.Close()
		prefix = f
	}
	var written int64
	size, err := w.commit(ctx, s, &t, func(dst io.Writer) (int64, error) {
		limit := w.opts.MaxFileBytes
		var n int64
		if prefix != nil {
			k, err := io.Copy(dst, io.LimitReader(prefix, limit+1))
			if n += k; err != nil {
				return n, mapErr(err)
			}
		}
		if n > limit {
			return n, ErrFileTooLarge
		}
		k, err := io.Copy(dst, io.LimitReader(body, limit-n+1))
		written, n = k, n+k
		if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
			return n, mapErr(err) // the write side: the disk, not the body
		}
		if err != nil {
			return n, fmt.Errorf("read body: %w", err)
		}
		if n > limit {
			return n, ErrFileTooLarge
		}
		return n, nil
	})
	if err != nil {
		return WriteResult{}, err
	}
	return WriteResult{Size: size, Written: written, Created: t.isNew}, nil
}

// target is the file a commit replaces. Its directory is named, not held
// open: every step goes through the session's Root again, so a directory
// swapped meanwhile can only misdirect a step to another place inside the
// workspace, or make it fail. (An os.Root on the directory would pin it,
// but opening one blocks on a FIFO swapped in for the directory.)
type target struct {
	dir     string // its directory
	rel     string // its path
	perm    fs.FileMode
	excl    bool  // mode=create: fail if it exists by the time of the rename
	isNew   bool  // no file was there when the operation began
	oldSize int64 // the size of the file replaced, for the quota
	created []string
}

// commit writes a new version of t through fill into a temp file next to
// it, checks the quota, then renames the temp file onto t (links it, for
// mode=create, which fails if t exists). On any failure the temp file and
// the directories made for it are removed and t is left as it was.
func (w *Workspaces) commit(ctx context.Context, s *session, t *target, fill func(io.Writer) (int64, error)) (size int64, err error) {
	tmp, tmpName, err := createTemp(s.root, t.dir)
	if err != nil {
		s.removeCreated(t.created)
		return 0, err
	}
	defer func() {
		if tmp != nil {
			tmp.Close()
		}
		if err != nil {
			_ = s.root.Remove(tmpName)
			s.removeCreated(t.created)
		}
	}()
	if err = s.own(tmp, t.perm); err != nil {
		return 0, err
	}
	bw := bufio.NewWriterSize(tmp, 64<<10)
	if size, err = fill(bw); err != nil {
		return 0, err
	}
	if err = bw.Flush(); err != nil {
		return 0, mapErr(err)
	}
	if w.opts.SyncWrites {
		if err = tmp.Sync(); err != nil {
			return 0, mapErr(err)
		}
	}
	err = tmp.Close()
	tmp = nil
	if err != nil {
		return 0, mapErr(err)
	}
	dFiles := int64(len(t.created))
	if t.isNew {
		dFiles++
	}
	if err = w.reserve(ctx, s, size-t.oldSize, dFiles, int64(len(t.created))); err != nil {
		return 0, err
	}
	if t.excl {
		if err = s.root.Link(tmpName, t.rel); err == nil {
			_ = s.root.Remove(tmpName)
		}
	} else {
		err = s.root.Rename(tmpName, t.rel)
	}
	if err != nil {
		w.release(s.id, size-t.oldSize, dFiles)
		return 0, mapErr(err)
	}
	return size, nil
}

// tmpPrefix starts the name of every temp file a write makes.
const tmpPrefix = ".sandgate-tmp-"

// createTemp creates a new, empty file in dir with a random name, and
// returns it with its path. O_EXCL means an existing entry (a link the
// code planted at a guessed name) is never opened.
func createTemp(root *os.Root, dir string) (*os.File, string, error) {
	for range 3 {
		var b [12]byte
		_, _ = rand.Read(b[:])
		name := join(dir, tmpPrefix+hex.EncodeToString(b[:]))
		f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			return f, name, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, "", mapErr(err)
		}
	}
	return nil, "", errors.New("create temp file: names exhausted")
}

// EditResult describes a finished edit.
type EditResult struct {
	Occurrences int   `json:"occurrences"`
	Size        int64 `json:"size"`
}

// Edit replaces old with new in a text file: exactly one occurrence, or
// every one with replaceAll. No occurrence is ErrEditNoMatch; several
// without replaceAll is ErrEditAmbiguous. The edit holds the file's lock
// from read to rename, so concurrent edits of one file all apply.
func (w *Workspaces) Edit(ctx context.Context, sessionID, p, old, new string, replaceAll bool) (EditResult, error) {
	if old == "" {
		return EditResult{}, ErrEditEmptyOld
	}
	rel, err := ResolvePath(p)
	if err != nil {
		return EditResult{}, err
	}
	s, err := w.open(ctx, sessionID, false)
	if err != nil {
		return EditResult{}, err
	}
	defer s.close()
	if rel, err = s.canonical(rel, true); err != nil {
		return EditResult{}, err
	}
	if rel == "." {
		return EditResult{}, ErrIsDir
	}
	unlock := w.locks.lock(fileKey(sessionID, rel))
	defer unlock()

	dirRel, _ := split(rel)
	t := target{dir: dirRel, rel: rel}
	content, fi, err := w.readWhole(s, rel)
	if err != nil {
		return EditResult{}, err
	}
	t.perm, t.oldSize = fi.Mode().Perm(), fi.Size()
	n := strings.Count(content, old)
	switch {
	case n == 0:
		return EditResult{}, ErrEditNoMatch
	case n > 1 && !replaceAll:
		return EditResult{}, fmt.Errorf("%w: %d occurrences", ErrEditAmbiguous, n)
	}
	edited := strings.Replace(content, old, new, -1)
	if int64(len(edited)) > w.opts.MaxFileBytes {
		return EditResult{}, ErrFileTooLarge
	}
	size, err := w.commit(ctx, s, &t, func(dst io.Writer) (int64, error) {
		k, err := io.WriteString(dst, edited)
		return int64(k), err
	})
	if err != nil {
		return EditResult{}, err
	}
	return EditResult{Occurrences: n, Size: size}, nil
}

// readWhole reads a text file of at most MaxFileBytes.
func (w *Workspaces) readWhole(s *session, rel string) (string, fs.FileInfo, error) {
	f, fi, err := s.openRead(s.root, rel)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	if fi.Size() > w.opts.MaxFileBytes {
		return "", nil, ErrFileTooLarge
	}
	b, err := io.ReadAll(io.LimitReader(f, w.opts.MaxFileBytes+1))
	if err != nil {
		return "", nil, mapErr(err)
	}
	if int64(len(b)) > w.opts.MaxFileBytes {
		return "", nil, ErrFileTooLarge
	}
	if bytes.IndexByte(b[:min(len(b), sniffBytes)], 0) >= 0 {
		return "", nil, ErrBinaryFile
	}
	return string(b), fi, nil
}

// DeleteResult describes a finished delete.
type DeleteResult struct {
	// Size is the size of the file removed (zero for directories, links).
	Size int64 `json:"size"`
}

// Delete removes a file, a symlink (never its target) or an empty
// directory; with recursive, a directory and everything in it (symlinks
// inside are removed, not followed).
func (w *Workspaces) Delete(ctx context.Context, sessionID, p string, recursive bool) (DeleteResult, error) {
	rel, err := ResolvePath(p)
	if err != nil {
		return DeleteResult{}, err
	}
	if rel == "." {
		return DeleteResult{}, ErrRootPath
	}
	s, err := w.open(ctx, sessionID, false)
	if err != nil {
		return DeleteResult{}, err
	}
	defer s.close()
	if rel, err = s.canonical(rel, false); err != nil {
		return DeleteResult{}, err
	}
	if rel == "." {
		return DeleteResult{}, ErrRootPath
	}
	unlock := w.locks.lock(fileKey(sessionID, rel))
	defer unlock()
	defer w.usage.invalidate(sessionID)
	defer w.tenants.invalidate(sessionID)

	fi, err := s.root.Lstat(rel)
	if err != nil {
		return DeleteResult{}, mapErr(err)
	}
	if fi.IsDir() && recursive {
		err = s.root.RemoveAll(rel)
	} else {
		err = s.root.Remove(rel)
	}
	if err != nil {
		return DeleteResult{}, mapErr(err)
	}
	if fi.Mode().IsRegular() {
		return DeleteResult{Size: fi.Size()}, nil
	}
	return DeleteResult{}, nil
}
