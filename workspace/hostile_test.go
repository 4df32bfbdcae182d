package workspace

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHostilePaths runs every case of testdata/hostile_paths.txt through
// read, write and list: traversal cases must be refused with
// path_traversal by each, confined ones must stay inside (a write lands
// where the case says) and never be reported as an escape. Nothing
// outside the session's workspace may change.
func TestHostilePaths(t *testing.T) {
	f := newFixture(t, Options{})
	f.plant()
	cases := loadHostile(t)
	if len(cases) < 60 {
		t.Fatalf("only %d hostile cases", len(cases))
	}
	ctx := context.Background()
	for i, c := range cases {
		p := f.expand(c.path)
		name := fmt.Sprintf("line%d_%.40q", c.line, c.path)
		t.Run(name, func(t *testing.T) {
			payload := fmt.Sprintf("%s-%d", probeContent, i)
			check := func(op string, err error) {
				t.Helper()
				switch {
				case c.expect == "traversal" && !isTraversal(err):
					t.Errorf("%s %q: want path_traversal, got %v", op, p, err)
				case c.expect == "confined" && isTraversal(err):
					t.Errorf("%s %q: a confined path was refused as traversal: %v", op, p, err)
				case err != nil && codeOf(err) == "internal":
					t.Errorf("%s %q: internal error %v", op, p, err)
				}
			}
			if strings.Contains(c.ops, "r") {
				page, err := f.w.ReadText(ctx, sess, p, 0, 0)
				check("read", err)
				if strings.Contains(page.Content, canaryText) || strings.Contains(page.Content, otherSecret) {
					t.Errorf("read %q returned a file from outside", p)
				}
				if raw, err := f.w.OpenRaw(ctx, sess, p); err == nil {
					if where := fdPath(raw.File); !strings.HasPrefix(where, f.ws+"/") {
						t.Errorf("raw open %q opened %s", p, where)
					}
					raw.Close()
				} else {
					check("raw", err)
				}
			}
			if strings.Contains(c.ops, "w") {
				_, err := f.w.Write(ctx, sess, p, WriteOverwrite, strings.NewReader(payload))
				check("write", err)
				if c.expect == "confined" && c.rel != "" && c.rel != "-" {
					if err != nil {
						t.Errorf("write %q: %v", p, err)
					} else if b, rerr := os.ReadFile(filepath.Join(f.ws, c.rel)); rerr != nil || string(b) != payload {
						t.Errorf("write %q did not land at %q: %q %v", p, c.rel, b, rerr)
					}
				}
			}
			if strings.Contains(c.ops, "l") {
				l, err := f.w.ListFiles(ctx, sess, p, 2)
				check("list", err)
				for _, e := range l.Entries {
					if !strings.HasPrefix(e.Path, "/workspace") || strings.Contains(e.Path, f.base) {
						t.Errorf("list %q shows %q", p, e.Path)
					}
				}
			}
			f.checkOutside()
		})
	}
}

// TestResolvePath pins the lexical rules.
func TestResolvePath(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", "."}, {".", "."}, {"/workspace", "."}, {"/workspace/", "."}, {"a/", "a"},
		{"/workspace/a/b/", "a/b"}, {"a/./b/../c", "a/c"}, {"./.", "."},
		{strings.Repeat("n", 255), strings.Repeat("n", 255)},
	} {
		got, err := ResolvePath(c.in)
		if err != nil || got != c.want {
			t.Errorf("ResolvePath(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"..", "/x", "a\\b", "a\x00", "/workspace/..", longPath, longName} {
		if _, err := ResolvePath(in); !isTraversal(err) {
			t.Errorf("ResolvePath(%.40q) = %v, want path_traversal", in, err)
		}
	}
	if got := DisplayPath("."); got != "/workspace" {
		t.Errorf("DisplayPath(.) = %q", got)
	}
}

// TestHardLinkToForeignFileIsNotRead: a hard link the session does not own
// (one to a root file outside, which fs.protected_hardlinks normally
// forbids code to make) is never read through, and a write replaces the
// link instead of writing through it.
func TestHardLinkToForeignFileIsNotRead(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the check applies when the gateway reads as root")
	}
	f := newFixture(t, Options{})
	canary := filepath.Join(f.out, "canary.txt")
	must(t, os.Link(canary, filepath.Join(f.ws, "hard")))
	ctx := context.Background()
	if _, err := f.w.ReadText(ctx, sess, "hard", 0, 0); !isTraversal(err) {
		t.Fatalf("read of a foreign hard link: %v", err)
	}
	if _, err := f.w.Edit(ctx, sess, "hard", "canary", "x", false); !isTraversal(err) {
		t.Fatalf("edit of a foreign hard link: %v", err)
	}
	if _, err := f.w.Write(ctx, sess, "hard", WriteAppend, strings.NewReader("x")); !isTraversal(err) {
		t.Fatalf("append to a foreign hard link: %v", err)
	}
	if _, err := f.w.Write(ctx, sess, "hard", WriteOverwrite, strings.NewReader("replaced")); err != nil {
		t.Fatal(err)
	}
	f.checkOutside()
	if b, _ := os.ReadFile(filepath.Join(f.ws, "hard")); string(b) != "replaced" {
		t.Fatalf("hard = %q", b)
	}
}
