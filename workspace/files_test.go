package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/errcode"
)

func write(t *testing.T, w *Workspaces, p, content string) WriteResult {
	t.Helper()
	res, err := w.Write(context.Background(), sess, p, WriteOverwrite, strings.NewReader(content))
	if err != nil {
		t.Fatalf("write %s: %v", p, err)
	}
	return res
}

func wantCode(t *testing.T, err error, code errcode.Code) {
	t.Helper()
	if got := codeOf(err); got != code {
		t.Fatalf("got %q (%v), want %q", got, err, code)
	}
}

func TestWriteCreatesOwnedFilesAndDirs(t *testing.T) {
	f := newFixture(t, Options{})
	res := write(t, f.w, "/workspace/a/b/c.txt", "hello")
	if !res.Created || res.Size != 5 || res.Written != 5 {
		t.Fatalf("result %+v", res)
	}
	if b, _ := os.ReadFile(filepath.Join(f.ws, "a/b/c.txt")); string(b) != "hello" {
		t.Fatalf("content %q", b)
	}
	wantUID := f.uid
	if os.Geteuid() != 0 {
		wantUID = os.Geteuid()
	}
	for p, mode := range map[string]os.FileMode{"a": os.ModeDir | 0o755, "a/b": os.ModeDir | 0o755, "a/b/c.txt": 0o644} {
		uid, gid, m := ownerOf(t, filepath.Join(f.ws, p))
		if uid != wantUID || (os.Geteuid() == 0 && gid != wantUID) || m != mode {
			t.Errorf("%s: owner %d:%d mode %v, want %d and %v", p, uid, gid, m, wantUID, mode)
		}
	}
	// Overwrite keeps the file's mode, and the owner stays the session's.
	must(t, os.Chmod(filepath.Join(f.ws, "a/b/c.txt"), 0o750))
	if res := write(t, f.w, "a/b/c.txt", "bye"); res.Created || res.Size != 3 {
		t.Fatalf("overwrite %+v", res)
	}
	if uid, _, m := ownerOf(t, filepath.Join(f.ws, "a/b/c.txt")); m != 0o750 || uid != wantUID {
		t.Fatalf("after overwrite: uid %d mode %v", uid, m)
	}
	if es, _ := os.ReadDir(filepath.Join(f.ws, "a/b")); len(es) != 1 {
		t.Fatalf("temp files left: %v", es)
	}
}

func TestWriteModes(t *testing.T) {
	f := newFixture(t, Options{})
	ctx := context.Background()
	if _, err := f.w.Write(ctx, sess, "m.txt", WriteCreate, strings.NewReader("one")); err != nil {
		t.Fatal(err)
	}
	_, err := f.w.Write(ctx, sess, "m.txt", WriteCreate, strings.NewReader("two"))
	wantCode(t, err, errcode.Conflict)
	if res, err := f.w.Write(ctx, sess, "m.txt", WriteAppend, strings.NewReader("+two")); err != nil || res.Size != 7 || res.Written != 4 {
		t.Fatalf("append: %+v %v", res, err)
	}
	if res, err := f.w.Write(ctx, sess, "new/n.txt", WriteAppend, strings.NewReader("x")); err != nil || !res.Created {
		t.Fatalf("append to a missing file: %+v %v", res, err)
	}
	if b, _ := os.ReadFile(filepath.Join(f.ws, "m.txt")); string(b) != "one+two" {
		t.Fatalf("m.txt = %q", b)
	}
	_, err = f.w.Write(ctx, sess, "m.txt", "truncate", strings.NewReader(""))
	wantCode(t, err, errcode.InvalidRequest)
	_, err = f.w.Write(ctx, sess, "new", WriteOverwrite, strings.NewReader(""))
	wantCode(t, err, errcode.InvalidRequest) // a directory
	_, err = f.w.Write(ctx, sess, "m.txt/x", WriteOverwrite, strings.NewReader(""))
	wantCode(t, err, errcode.InvalidRequest) // a file as a directory
}

type failingReader struct{ n int }

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, errors.New("client went away")
	}
	k := min(len(p), r.n)
	for i := range k {
		p[i] = 'x'
	}
	r.n -= k
	return k, nil
}

// TestFailedWriteLeavesOldFile: over the size limit, a body that breaks
// off, or over quota, the old file is intact and no temp file is left.
func TestFailedWriteLeavesOldFile(t *testing.T) {
	f := newFixture(t, Options{MaxFileBytes: 100, QuotaBytes: 150})
	ctx := context.Background()
	write(t, f.w, "d/keep.txt", "original")
	_, err := f.w.Write(ctx, sess, "d/keep.txt", WriteOverwrite, strings.NewReader(strings.Repeat("x", 101)))
	wantCode(t, err, errcode.FileTooLarge)
	_, err = f.w.Write(ctx, sess, "d/keep.txt", WriteAppend, strings.NewReader(strings.Repeat("x", 93)))
	wantCode(t, err, errcode.FileTooLarge)
	if _, err = f.w.Write(ctx, sess, "d/keep.txt", WriteOverwrite, &failingReader{n: 50}); err == nil {
		t.Fatal("a broken body was committed")
	}
	write(t, f.w, "d/big.txt", strings.Repeat("y", 100))
	_, err = f.w.Write(ctx, sess, "d/keep.txt", WriteOverwrite, strings.NewReader(strings.Repeat("z", 60)))
	wantCode(t, err, errcode.QuotaExceeded)
	_, err = f.w.Write(ctx, sess, "e/f/g.txt", WriteOverwrite, strings.NewReader(strings.Repeat("z", 60)))
	wantCode(t, err, errcode.QuotaExceeded)
	if b, _ := os.ReadFile(filepath.Join(f.ws, "d/keep.txt")); string(b) != "original" {
		t.Fatalf("keep.txt = %q", b)
	}
	if names := names(t, filepath.Join(f.ws, "d")); strings.Join(names, ",") != "big.txt,keep.txt" {
		t.Fatalf("left behind: %v", names)
	}
	if _, err := os.Lstat(filepath.Join(f.ws, "e")); err == nil {
		t.Fatal("directories made for a refused write were left behind")
	}
	// Shrinking is allowed over quota; deleting frees space.
	write(t, f.w, "d/big.txt", "small")
	write(t, f.w, "d/keep.txt", strings.Repeat("z", 60))
}

func TestQuotaFiles(t *testing.T) {
	f := newFixture(t, Options{QuotaFiles: 3})
	ctx := context.Background()
	write(t, f.w, "a", "1")
	write(t, f.w, "b", "2")
	_, err := f.w.Write(ctx, sess, "c/d", WriteOverwrite, strings.NewReader("3")) // two entries
	wantCode(t, err, errcode.QuotaExceeded)
	write(t, f.w, "c", "3")
	write(t, f.w, "a", "overwrite is not a new entry")
	if _, err := f.w.Delete(ctx, sess, "b", false); err != nil {
		t.Fatal(err)
	}
	write(t, f.w, "e", "4")
}

// TestQuotaCountsWhatCodeWrote: files that appear behind the API's back
// count from the next measure.
func TestQuotaCountsWhatCodeWrote(t *testing.T) {
	f := newFixture(t, Options{QuotaBytes: 1000, UsageMaxAge: time.Nanosecond})
	must(t, os.WriteFile(filepath.Join(f.ws, "by-code.bin"), make([]byte, 990), 0o644))
	_, err := f.w.Write(context.Background(), sess, "x", WriteOverwrite, strings.NewReader(strings.Repeat("x", 20)))
	wantCode(t, err, errcode.QuotaExceeded)
}

func TestReadText(t *testing.T) {
	f := newFixture(t, Options{MaxReadChars: 60})
	ctx := context.Background()
	write(t, f.w, "t.txt", "first\r\nsecond\nthird")
	page, err := f.w.ReadText(ctx, sess, "t.txt", 0, 0)
	if err != nil || page.Content != "     1\tfirst\n     2\tsecond\n     3\tthird" || page.TotalLines != 3 || page.Truncated || page.NextOffset != 0 {
		t.Fatalf("%+v %v", page, err)
	}
	page, err = f.w.ReadText(ctx, sess, "t.txt", 1, 1)
	if err != nil || page.Content != "     2\tsecond" || page.TotalLines != 3 || page.NextOffset != 2 {
		t.Fatalf("offset/limit: %+v %v", page, err)
	}
	_, err = f.w.ReadText(ctx, sess, "t.txt", 3, 1)
	wantCode(t, err, errcode.InvalidRequest)

	write(t, f.w, "empty.txt", "")
	if page, err := f.w.ReadText(ctx, sess, "empty.txt", 0, 0); err != nil || page.Content != EmptyFileMessage || page.TotalLines != 0 {
		t.Fatalf("empty: %+v %v", page, err)
	}
	write(t, f.w, "bin", "abc\x00def")
	_, err = f.w.ReadText(ctx, sess, "bin", 0, 0)
	wantCode(t, err, errcode.BinaryFile)

	// The cap: 60 characters hold four 13-character lines (with newlines),
	// then the page is cut and says where to go on.
	write(t, f.w, "many.txt", strings.Repeat("abcdef\n", 10))
	page, err = f.w.ReadText(ctx, sess, "many.txt", 0, 0)
	if err != nil || !page.Truncated || page.NextOffset != 4 || page.TotalLines != 10 || len([]rune(page.Content)) > 60 {
		t.Fatalf("cap: %+v %v", page, err)
	}
	// One line longer than the whole cap: its start, then the next line.
	write(t, f.w, "long.txt", strings.Repeat("é", 500)+"\nshort\n")
	page, err = f.w.ReadText(ctx, sess, "long.txt", 0, 0)
	if err != nil || !page.Truncated || page.NextOffset != 1 || len([]rune(page.Content)) != 60 || page.TotalLines != 2 {
		t.Fatalf("long line: %+v %v", page, err)
	}
	write(t, f.w, "bad-utf8.txt", "a\xffb\n")
	if page, err := f.w.ReadText(ctx, sess, "bad-utf8.txt", 0, 0); err != nil || page.Content != "     1\ta\uFFFDb" {
		t.Fatalf("invalid UTF-8: %+v %v", page, err)
	}
	_, err = f.w.ReadText(ctx, sess, "missing", 0, 0)
	wantCode(t, err, errcode.NotFound)
	_, err = f.w.ReadText(ctx, "no-such-session", "x", 0, 0)
	wantCode(t, err, errcode.NotFound)
	if _, err := f.w.Get(ctx, "no-such-session"); !errors.Is(err, ErrNotFound) {
		t.Fatal("a read created a workspace")
	}
}

// TestFIFODoesNotHang: code may plant a FIFO; reading it is refused at
// once instead of blocking for a writer.
func TestFIFODoesNotHang(t *testing.T) {
	f := newFixture(t, Options{})
	f.plant()
	ctx := context.Background()
	done := make(chan error, 3)
	go func() {
		_, err := f.w.ReadText(ctx, sess, "fifo", 0, 0)
		done <- err
		_, err = f.w.Edit(ctx, sess, "fifo", "a", "b", false)
		done <- err
		_, err = f.w.Grep(ctx, sess, GrepQuery{Pattern: "x", Path: "fifo", Literal: true})
		done <- err
	}()
	for range 3 {
		select {
		case err := <-done:
			if !errors.Is(err, ErrNotRegular) {
				t.Fatalf("FIFO: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("reading a FIFO hung")
		}
	}
	// Where a directory is expected (a directory the code swapped for a
	// FIFO between a check and the open), the open fails at once.
	go func() {
		s, err := f.w.open(ctx, sess, false)
		if err != nil {
			done <- err
			return
		}
		defer s.close()
		_, _, err = readDir(s.root, "fifo", 10)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a FIFO was read as a directory")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("opening a FIFO as a directory hung")
	}
	if l, err := f.w.ListFiles(ctx, sess, "fifo", 1); err != nil || len(l.Entries) != 1 || l.Entries[0].Type != "other" {
		t.Fatalf("list fifo: %+v %v", l, err)
	}
}

func TestEdit(t *testing.T) {
	f := newFixture(t, Options{MaxFileBytes: 64})
	ctx := context.Background()
	write(t, f.w, "e.txt", "alpha beta beta gamma")
	must(t, os.Chmod(filepath.Join(f.ws, "e.txt"), 0o600))
	res, err := f.w.Edit(ctx, sess, "e.txt", "alpha", "ALPHA", false)
	if err != nil || res.Occurrences != 1 {
		t.Fatalf("%+v %v", res, err)
	}
	_, err = f.w.Edit(ctx, sess, "e.txt", "beta", "B", false)
	wantCode(t, err, errcode.EditAmbiguous)
	_, err = f.w.Edit(ctx, sess, "e.txt", "delta", "D", false)
	wantCode(t, err, errcode.EditNoMatch)
	_, err = f.w.Edit(ctx, sess, "e.txt", "", "D", false)
	wantCode(t, err, errcode.InvalidRequest)
	if res, err := f.w.Edit(ctx, sess, "e.txt", "beta", "B", true); err != nil || res.Occurrences != 2 {
		t.Fatalf("replace_all: %+v %v", res, err)
	}
	_, err = f.w.Edit(ctx, sess, "e.txt", "gamma", strings.Repeat("g", 64), false)
	wantCode(t, err, errcode.FileTooLarge)
	if b, _ := os.ReadFile(filepath.Join(f.ws, "e.txt")); string(b) != "ALPHA B B gamma" {
		t.Fatalf("content %q", b)
	}
	if uid, _, m := ownerOf(t, filepath.Join(f.ws, "e.txt")); m != 0o600 || (os.Geteuid() == 0 && uid != f.uid) {
		t.Fatalf("edit changed owner or mode: %d %v", uid, m)
	}
	write(t, f.w, "bin", "a\x00b")
	_, err = f.w.Edit(ctx, sess, "bin", "a", "b", false)
	wantCode(t, err, errcode.BinaryFile)
	_, err = f.w.Edit(ctx, sess, "missing", "a", "b", false)
	wantCode(t, err, errcode.NotFound)
}

// TestParallelEdits: 50 concurrent edits of one file, each replacing its
// own token, all apply exactly once. Half go through a symlink to the
// file, which must share the file's lock.
func TestParallelEdits(t *testing.T) {
	f := newFixture(t, Options{})
	ctx := context.Background()
	var b strings.Builder
	for i := range 50 {
		fmt.Fprintf(&b, "line tok-%02d;\n", i)
	}
	write(t, f.w, "shared.txt", b.String())
	must(t, os.Symlink("shared.txt", filepath.Join(f.ws, "alias.txt")))
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			p := "shared.txt"
			if i%2 == 1 {
				p = "alias.txt"
			}
			res, err := f.w.Edit(ctx, sess, p, fmt.Sprintf("tok-%02d;", i), fmt.Sprintf("done-%02d;", i), false)
			if err != nil || res.Occurrences != 1 {
				t.Errorf("edit %d: %+v %v", i, res, err)
			}
		})
	}
	wg.Wait()
	got, err := os.ReadFile(filepath.Join(f.ws, "shared.txt"))
	must(t, err)
	for i := range 50 {
		if strings.Count(string(got), fmt.Sprintf("line done-%02d;\n", i)) != 1 {
			t.Fatalf("edit %d lost or doubled:\n%s", i, got)
		}
	}
	if strings.Contains(string(got), "tok-") {
		t.Fatalf("unapplied edits:\n%s", got)
	}
	if fi, err := os.Lstat(filepath.Join(f.ws, "alias.txt")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatal("the alias link was replaced instead of written through")
	}
}

func TestListGlobGrep(t *testing.T) {
	f := newFixture(t, Options{})
	ctx := context.Background()
	for p, c := range map[string]string{
		"README.md": "hello world\n", "src/main.go": "package main\n// TODO: x\n", "src/util/u.go": "package util\nfunc TODO() {}\n",
		"src/util/deep/d.go": "package deep\n", "docs/a.txt": "todo lower\n", "bin/blob": "TODO\x00binary",
	} {
		write(t, f.w, p, c)
	}
	must(t, os.Symlink(f.out, filepath.Join(f.ws, "escape")))
	must(t, os.Symlink("src", filepath.Join(f.ws, "srclink")))

	l, err := f.w.ListFiles(ctx, sess, "", 1)
	must(t, err)
	if got := paths(l.Entries); got != "/workspace/README.md /workspace/bin /workspace/docs /workspace/escape /workspace/src /workspace/srclink" || l.Truncated {
		t.Fatalf("list: %s", got)
	}
	for _, e := range l.Entries {
		if (e.Path == "/workspace/escape" || e.Path == "/workspace/srclink") && (e.Type != "symlink" || e.Size != 0) {
			t.Fatalf("link entry %+v", e)
		}
	}
	l, err = f.w.ListFiles(ctx, sess, "src", 5)
	must(t, err)
	if got := paths(l.Entries); got != "/workspace/src/main.go /workspace/src/util /workspace/src/util/deep /workspace/src/util/deep/d.go /workspace/src/util/u.go" {
		t.Fatalf("list depth: %s", got)
	}
	l, err = f.w.ListFiles(ctx, sess, "src/main.go", 1)
	if err != nil || len(l.Entries) != 1 || l.Entries[0].Type != "file" || l.Entries[0].Size != 24 {
		t.Fatalf("list a file: %+v %v", l, err)
	}
	_, err = f.w.ListFiles(ctx, sess, "escape", 1)
	if !isTraversal(err) {
		t.Fatalf("list through a link out: %v", err)
	}

	for pattern, want := range map[string]string{
		"**/*.go":            "/workspace/src/main.go /workspace/src/util/deep/d.go /workspace/src/util/u.go",
		"*.md":               "/workspace/README.md",
		"src/*":              "/workspace/src/main.go /workspace/src/util",
		"/workspace/**/d.go": "/workspace/src/util/deep/d.go",
		"src/**":             "/workspace/src /workspace/src/main.go /workspace/src/util /workspace/src/util/deep /workspace/src/util/deep/d.go /workspace/src/util/u.go",
		"**/escape/**":       "/workspace/escape", // the link matches "escape/" + nothing; it is never entered
	} {
		l, err := f.w.Glob(ctx, sess, "", pattern)
		if err != nil || paths(l.Entries) != want {
			t.Errorf("glob %q: %s %v, want %s", pattern, paths(l.Entries), err, want)
		}
	}
	if l, err := f.w.Glob(ctx, sess, "src", "**/*.go"); err != nil || len(l.Entries) != 3 {
		t.Errorf("glob under src: %+v %v", l, err)
	}
	for _, bad := range []string{"[", "../*", "/etc/*", ""} {
		if _, err := f.w.Glob(ctx, sess, "", bad); err == nil {
			t.Errorf("glob %q accepted", bad)
		}
	}

	g, err := f.w.Grep(ctx, sess, GrepQuery{Pattern: "TODO", Literal: true})
	must(t, err)
	if got := matches(g); got != "/workspace/src/main.go:2:// TODO: x /workspace/src/util/u.go:2:func TODO() {}" || g.Truncated {
		t.Fatalf("grep: %s", got)
	}
	g, err = f.w.Grep(ctx, sess, GrepQuery{Pattern: `(?i)^todo|TODO\(\)`, Glob: "*.txt"})
	must(t, err)
	if got := matches(g); got != "/workspace/docs/a.txt:1:todo lower" {
		t.Fatalf("grep regex+glob: %s", got)
	}
	g, err = f.w.Grep(ctx, sess, GrepQuery{Pattern: "package", Path: "/workspace/src", Glob: "util/**/*.go", Literal: true})
	must(t, err)
	if got := matches(g); got != "/workspace/src/util/deep/d.go:1:package deep /workspace/src/util/u.go:1:package util" {
		t.Fatalf("grep path glob: %s", got)
	}
	_, err = f.w.Grep(ctx, sess, GrepQuery{Pattern: "(", Literal: false})
	wantCode(t, err, errcode.InvalidRequest)
	_, err = f.w.Grep(ctx, sess, GrepQuery{Pattern: "x", Path: "escape", Literal: true})
	if !isTraversal(err) {
		t.Fatalf("grep through a link out: %v", err)
	}
}

func TestResultCaps(t *testing.T) {
	f := newFixture(t, Options{MaxListEntries: 3, MaxGrepMatches: 2})
	ctx := context.Background()
	for i := range 5 {
		write(t, f.w, fmt.Sprintf("f%d.txt", i), "needle\nneedle\n")
	}
	l, err := f.w.ListFiles(ctx, sess, "", 1)
	if err != nil || len(l.Entries) != 3 || !l.Truncated {
		t.Fatalf("list cap: %+v %v", l, err)
	}
	l, err = f.w.Glob(ctx, sess, "", "*.txt")
	if err != nil || len(l.Entries) != 3 || !l.Truncated {
		t.Fatalf("glob cap: %+v %v", l, err)
	}
	g, err := f.w.Grep(ctx, sess, GrepQuery{Pattern: "needle", Literal: true})
	if err != nil || len(g.Matches) != 2 || !g.Truncated {
		t.Fatalf("grep cap: %+v %v", g, err)
	}
	l, err = f.w.Glob(ctx, sess, "", "f[0-2].txt")
	if err != nil || len(l.Entries) != 3 || l.Truncated {
		t.Fatalf("exactly at the cap is not truncated: %+v %v", l, err)
	}
}

func TestDelete(t *testing.T) {
	f := newFixture(t, Options{})
	ctx := context.Background()
	write(t, f.w, "dir/a.txt", "12345")
	write(t, f.w, "dir/sub/b.txt", "b")
	must(t, os.Symlink(filepath.Join(f.out, "canary.txt"), filepath.Join(f.ws, "link")))
	if res, err := f.w.Delete(ctx, sess, "dir/a.txt", false); err != nil || res.Size != 5 {
		t.Fatalf("%+v %v", res, err)
	}
	_, err := f.w.Delete(ctx, sess, "dir", false)
	wantCode(t, err, errcode.Conflict)
	if _, err := f.w.Delete(ctx, sess, "dir", true); err != nil {
		t.Fatal(err)
	}
	if _, err := f.w.Delete(ctx, sess, "link", false); err != nil {
		t.Fatal(err)
	}
	f.checkOutside()
	_, err = f.w.Delete(ctx, sess, "dir", false)
	wantCode(t, err, errcode.NotFound)
	for _, p := range []string{"", "/workspace", "a/.."} {
		_, err = f.w.Delete(ctx, sess, p, true)
		wantCode(t, err, errcode.InvalidRequest)
	}
	_, err = f.w.Delete(ctx, sess, "../other/secret.txt", false)
	wantCode(t, err, errcode.PathTraversal)
	if _, err := os.Stat(f.ws); err != nil {
		t.Fatal("the workspace itself went away")
	}
}

func paths(es []Entry) string {
	var out []string
	for _, e := range es {
		out = append(out, e.Path)
	}
	return strings.Join(out, " ")
}

func matches(g GrepResult) string {
	var out []string
	for _, m := range g.Matches {
		out = append(out, fmt.Sprintf("%s:%d:%s", m.Path, m.Line, m.Text))
	}
	return strings.Join(out, " ")
}

var _ io.Reader = (*failingReader)(nil)

// TestDeepTree: code can build trees deeper than MaxPathDepth; the API
// refuses paths that deep and its walks stop there, and a walk costs one
// open per directory, not one per component of every path.
func TestDeepTree(t *testing.T) {
	f := newFixture(t, Options{})
	ctx := context.Background()
	deep := filepath.Join(f.ws, strings.Repeat("d/", 200))
	must(t, os.MkdirAll(deep, 0o755))
	shallow := strings.Repeat("d/", 100) + "f.txt"
	must(t, os.WriteFile(filepath.Join(f.ws, shallow), []byte("needle\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(deep, "f.txt"), []byte("needle\n"), 0o644))
	start := time.Now()
	g, err := f.w.Grep(ctx, sess, GrepQuery{Pattern: "needle", Literal: true})
	if err != nil || len(g.Matches) != 1 || g.Matches[0].Path != DisplayPath(shallow) {
		t.Fatalf("grep: %+v %v", g, err)
	}
	l, err := f.w.Glob(ctx, sess, "", "**/f.txt")
	if err != nil || paths(l.Entries) != DisplayPath(shallow) {
		t.Fatalf("glob: %s %v", paths(l.Entries), err)
	}
	if page, err := f.w.ReadText(ctx, sess, shallow, 0, 0); err != nil || page.Content != "     1\tneedle" {
		t.Fatalf("read at depth 101: %+v %v", page, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("walking a 200-deep tree took %v", d)
	}
	_, err = f.w.ReadText(ctx, sess, strings.Repeat("d/", 200)+"f.txt", 0, 0)
	wantCode(t, err, errcode.PathTraversal)
	if _, err := f.w.Write(ctx, sess, strings.Repeat("d/", 127)+"g.txt", WriteOverwrite, strings.NewReader("x")); err != nil {
		t.Fatalf("write at the depth limit: %v", err)
	}
}
