package workspace

import (
	"context"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzResolvePath feeds arbitrary paths, seeded from
// testdata/hostile_paths.txt, to the lexical check and then to every way
// the package resolves a path in a workspace planted with links to /etc,
// /proc/self, another session and a canary directory. It must never
// panic, and nothing may resolve, open, list or write outside the
// session's workspace.
//
//	go test -run '^$' -fuzz FuzzResolvePath -fuzztime 30s ./workspace/
func FuzzResolvePath(f *testing.F) {
	fx := newFixture(f, Options{})
	fx.plant()
	for _, c := range loadHostile(f) {
		f.Add(c.path)
		f.Add(fx.expand(c.path))
	}
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, p string) {
		rel, err := ResolvePath(p)
		if err != nil {
			if !isTraversal(err) {
				t.Fatalf("ResolvePath(%q): %v is not path_traversal", p, err)
			}
		} else {
			if rel != "." && (!filepath.IsLocal(rel) || path.Clean(rel) != rel) {
				t.Fatalf("ResolvePath(%q) = %q: not a clean local path", p, rel)
			}
			if strings.ContainsAny(rel, "\x00\\") || len(rel) > MaxPathBytes {
				t.Fatalf("ResolvePath(%q) = %q", p, rel)
			}
			s, err := fx.w.open(ctx, sess, false)
			if err != nil {
				t.Fatal(err)
			}
			if c, err := s.canonical(rel, true); err == nil && c != "." && !filepath.IsLocal(c) {
				t.Fatalf("canonical(%q) = %q", rel, c)
			}
			if fh, _, err := s.openRead(s.root, rel); err == nil {
				if where := fdPath(fh); !strings.HasPrefix(where, fx.ws+"/") {
					t.Fatalf("%q opened %s", p, where)
				}
				fh.Close()
			}
			if d, err := openDir(s.root, rel); err == nil {
				if where := fdPath(d); where != fx.ws && !strings.HasPrefix(where, fx.ws+"/") {
					t.Fatalf("%q opened %s", p, where)
				}
				d.Close()
			}
			s.close()
		}
		page, _ := fx.w.ReadText(ctx, sess, p, 0, 0)
		if strings.Contains(page.Content, canaryText) || strings.Contains(page.Content, otherSecret) || strings.Contains(page.Content, "root:") {
			t.Fatalf("read %q returned %q", p, page.Content)
		}
		l, _ := fx.w.ListFiles(ctx, sess, p, 1)
		for _, e := range l.Entries {
			if !strings.HasPrefix(e.Path, Mount) {
				t.Fatalf("list %q showed %q", p, e.Path)
			}
		}
		_, _ = fx.w.Write(ctx, sess, p, WriteCreate, strings.NewReader(probeContent))
		fx.checkOutsideT(t)
	})
}
