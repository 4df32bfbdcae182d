package workspace

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/sandgate/sandgate/errcode"
)

// fixture is a Workspaces with one session ("s"), a second session
// ("other") holding secret.txt, and a directory outside every workspace
// holding canary.txt. The test runs as root here, so sessions get their own
// uids; without root everything still runs, minus the ownership checks.
type fixture struct {
	t      testing.TB
	w      *Workspaces
	base   string // parent of the workspace root and of outside/
	ws     string // host path of session s
	other  string // host path of session other
	out    string // outside directory
	uid    int
	sums   map[string][32]byte // canary files and their digests
	outDir []string            // entries of out at start
}

const (
	sess         = "s"
	otherSess    = "other"
	canaryText   = "sg-canary-outside-4b1d"
	otherSecret  = "sg-secret-of-other-session-77e2"
	probeContent = "sg-probe-write"
)

func newFixture(t testing.TB, opts Options) *fixture {
	t.Helper()
	base := t.TempDir()
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	w, err := New(filepath.Join(base, "ws"), opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	d, err := w.Ensure(ctx, sess)
	if err != nil {
		t.Fatal(err)
	}
	od, err := w.Ensure(ctx, otherSess)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, w: w, base: base, ws: d.Path, other: od.Path, out: filepath.Join(base, "outside"), uid: d.UID, sums: map[string][32]byte{}}
	must(t, os.MkdirAll(f.out, 0o755))
	must(t, os.WriteFile(filepath.Join(f.out, "canary.txt"), []byte(canaryText), 0o644))
	must(t, os.WriteFile(filepath.Join(f.other, "secret.txt"), []byte(otherSecret), 0o600))
	for _, p := range []string{filepath.Join(f.out, "canary.txt"), filepath.Join(f.other, "secret.txt"), "/etc/passwd"} {
		f.sums[p] = digest(t, p)
	}
	f.outDir = names(t, f.out)
	return f
}

// plant creates the links of testdata/hostile_paths.txt in session s.
func (f *fixture) plant() {
	t := f.t
	t.Helper()
	must(t, os.MkdirAll(filepath.Join(f.ws, "sub"), 0o755))
	must(t, os.MkdirAll(filepath.Join(f.ws, "deep"), 0o755))
	must(t, os.WriteFile(filepath.Join(f.ws, "sub", "file.txt"), []byte("inside"), 0o644))
	for link, target := range map[string]string{
		"etc": "/etc", "proc": "/proc/self", "other": f.other, "rel_other": "../" + otherSess,
		"up": "..", "deep/up2": "../../", "out": f.out, "out_rel": "../../outside",
		"abs_self": filepath.Join(f.ws, "sub"), "inner": "sub", "chain1": "chain2", "chain2": "out_rel",
		"inner_up": "sub/../..", "loop1": "loop2", "loop2": "loop1",
	} {
		must(t, os.Symlink(target, filepath.Join(f.ws, link)))
	}
	must(t, syscall.Mkfifo(filepath.Join(f.ws, "fifo"), 0o644))
}

// expand replaces the placeholders of the testdata files.
func (f *fixture) expand(p string) string {
	return strings.NewReplacer("$SELF", f.ws, "$OTHER", f.other, "$OUT", f.out,
		"$LONG_PATH", longPath, "$LONG_NAME", longName, "$DEEP_PATH", deepPath).Replace(p)
}

var (
	longPath = strings.Repeat("a/", 2049) + "x"
	longName = strings.Repeat("n", 256)
	deepPath = strings.Repeat("d/", MaxPathDepth) + "x"
)

// checkOutside fails the test if anything outside session s changed: the
// canaries, the other session's secret, /etc/passwd, or the outside dir's
// entries.
func (f *fixture) checkOutside() { f.checkOutsideT(f.t) }

// checkOutsideT is checkOutside reporting to t (a fuzz target's own T).
func (f *fixture) checkOutsideT(t testing.TB) {
	t.Helper()
	for p, sum := range f.sums {
		if digest(t, p) != sum {
			t.Fatalf("%s changed", p)
		}
	}
	if got := names(t, f.out); strings.Join(got, ",") != strings.Join(f.outDir, ",") {
		t.Fatalf("outside dir changed: %v, was %v", got, f.outDir)
	}
	for _, p := range []string{"/etc/sandgate-probe", "/tmp/sandgate-probe", filepath.Join(f.other, "pwned.txt")} {
		if _, err := os.Lstat(p); err == nil {
			os.Remove(p)
			t.Fatalf("%s was created", p)
		}
	}
}

func digest(t testing.TB, p string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

func names(t testing.TB, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func isTraversal(err error) bool { return errors.Is(err, ErrPathTraversal) }

func codeOf(err error) errcode.Code {
	c, _, _ := errcode.Of(err)
	return c
}

// hostileCase is one line of testdata/hostile_paths.txt.
type hostileCase struct {
	line   int
	expect string // traversal | confined
	ops    string
	path   string // still with placeholders
	rel    string // confined: where a write lands; "-" or "" for any
}

func loadHostile(t testing.TB) []hostileCase {
	t.Helper()
	fh, err := os.Open("testdata/hostile_paths.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	var out []hostileCase
	sc := bufio.NewScanner(fh)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		c := hostileCase{line: n}
		var rest string
		var ok bool
		c.expect, rest, _ = strings.Cut(line, " ")
		c.ops, rest, ok = strings.Cut(strings.TrimSpace(rest), " ")
		if !ok || (c.expect != "traversal" && c.expect != "confined") {
			t.Fatalf("hostile_paths.txt:%d: bad line %q", n, line)
		}
		rest = strings.TrimSpace(rest)
		q, err := strconv.QuotedPrefix(rest)
		if err != nil {
			t.Fatalf("hostile_paths.txt:%d: %v", n, err)
		}
		c.path, _ = strconv.Unquote(q)
		if rest = strings.TrimSpace(rest[len(q):]); rest != "" {
			if c.rel, err = strconv.Unquote(rest); err != nil {
				t.Fatalf("hostile_paths.txt:%d: %v", n, err)
			}
		}
		out = append(out, c)
	}
	return out
}

// fdPath is where an open file really is.
func fdPath(f *os.File) string {
	p, _ := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd())))
	return p
}

func ownerOf(t testing.TB, p string) (uid, gid int, mode fs.FileMode) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	uid, gid = owner(fi)
	return uid, gid, fi.Mode()
}
