package k8s

import (
	"archive/tar"
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

type entry struct {
	name, body, link string
	typ              byte
	mode             int64
}

func tarOf(t *testing.T, entries ...entry) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Size: int64(len(e.body)), Linkname: e.link}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			_, _ = tw.Write([]byte(e.body))
		}
	}
	_ = tw.Close()
	return &b
}

// TestExtractRefusesEscapes: what a pod sends back is hostile; nothing of
// it may land outside the host workspace, whatever the names and links.
func TestExtractRefusesEscapes(t *testing.T) {
	cases := map[string][]entry{
		"dot-dot":          {{name: "../escaped", typ: tar.TypeReg, body: "x", mode: 0o644}},
		"absolute":         {{name: "/escaped", typ: tar.TypeReg, body: "x", mode: 0o644}},
		"through symlink":  {{name: "out", typ: tar.TypeSymlink, link: ".."}, {name: "out/escaped", typ: tar.TypeReg, body: "x", mode: 0o644}},
		"symlink abs file": {{name: "out", typ: tar.TypeSymlink, link: "/tmp"}, {name: "out/escaped", typ: tar.TypeReg, body: "x", mode: 0o644}},
	}
	for name, entries := range cases {
		t.Run(name, func(t *testing.T) {
			parent := t.TempDir()
			ws := filepath.Join(parent, "ws")
			if err := os.Mkdir(ws, 0o755); err != nil {
				t.Fatal(err)
			}
			err := extract(tarOf(t, entries...), ws, os.Getuid(), os.Getgid(), 1<<20)
			if err == nil {
				t.Error("extract accepted an escaping entry")
			}
			for _, p := range []string{filepath.Join(parent, "escaped"), "/escaped", "/tmp/escaped"} {
				if _, err := os.Lstat(p); err == nil {
					t.Errorf("%s was written outside the workspace", p)
					_ = os.Remove(p)
				}
			}
		})
	}
}

// TestWorkspaceRoundTrip: the host workspace becomes exactly the pod's:
// files, directories and symlinks arrive with their permission bits only
// (no setuid), and what the pod no longer has is removed.
func TestWorkspaceRoundTrip(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(src, "d/e"), 0o755))
	must(os.WriteFile(filepath.Join(src, "d/e/f.txt"), []byte("deep"), 0o640))
	must(os.WriteFile(filepath.Join(src, "run.sh"), []byte("#!/bin/sh"), 0o755))
	must(os.Chmod(filepath.Join(src, "run.sh"), 0o755|fs.ModeSetuid))
	must(os.Symlink("d/e/f.txt", filepath.Join(src, "link")))
	must(os.WriteFile(filepath.Join(dst, "stale.txt"), []byte("old"), 0o644))
	must(os.MkdirAll(filepath.Join(dst, "old/dir"), 0o755))

	var b bytes.Buffer
	must(writeTar(&b, src))
	must(extract(&b, dst, os.Getuid(), os.Getgid(), 1<<20))

	if got, _ := os.ReadFile(filepath.Join(dst, "d/e/f.txt")); string(got) != "deep" {
		t.Errorf("d/e/f.txt = %q", got)
	}
	if fi, err := os.Stat(filepath.Join(dst, "run.sh")); err != nil || fi.Mode() != 0o755 {
		t.Errorf("run.sh mode %v (%v), want 0755 without setuid", fi.Mode(), err)
	}
	if l, err := os.Readlink(filepath.Join(dst, "link")); err != nil || l != "d/e/f.txt" {
		t.Errorf("link -> %q (%v)", l, err)
	}
	for _, gone := range []string{"stale.txt", "old"} {
		if _, err := os.Lstat(filepath.Join(dst, gone)); err == nil {
			t.Errorf("%s survived: the host workspace must mirror the pod's", gone)
		}
	}
	a, _ := snapshot(src)
	c, _ := snapshot(dst)
	if a == "" || c == "" {
		t.Fatal("no snapshot")
	}
}

// TestExtractCapsSize: a pod cannot fill the gateway's disk.
func TestExtractCapsSize(t *testing.T) {
	big := make([]byte, 2<<20)
	err := extract(tarOf(t, entry{name: "big", typ: tar.TypeReg, body: string(big), mode: 0o644}), t.TempDir(), os.Getuid(), os.Getgid(), 1<<20)
	if err == nil {
		t.Fatal("a workspace over the cap was accepted")
	}
}
