package workspace

import (
	"os"
	"path/filepath"
	"testing"
)

// TestMakeDirs: the layout's directories are made, again after they were
// removed; a file in the way is left alone; a path out of the workspace
// is refused.
func TestMakeDirs(t *testing.T) {
	w, err := New(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	dirs := []string{"workspace", "uploads", "outputs/deep"}
	if err := w.MakeDirs(ctx, "t~s", dirs); err != nil {
		t.Fatal(err)
	}
	d, _ := w.Ensure(ctx, "t~s")
	for _, p := range dirs {
		if fi, err := os.Stat(filepath.Join(d.Path, p)); err != nil || !fi.IsDir() {
			t.Errorf("%s: %v", p, err)
		}
	}
	if err := os.Remove(filepath.Join(d.Path, "uploads")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.Path, "workspace2"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := w.MakeDirs(ctx, "t~s", []string{"uploads", "workspace2"}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(d.Path, "uploads")); err != nil || !fi.IsDir() {
		t.Errorf("uploads not made again: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(d.Path, "workspace2")); err != nil || string(b) != "x" {
		t.Errorf("the file in the way was changed: %q %v", b, err)
	}
	if err := w.MakeDirs(ctx, "t~s", []string{"../escape"}); err == nil {
		t.Error("../escape was accepted")
	}
}
