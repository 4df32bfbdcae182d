package wsfile

import (
	"os"
	"path"
	"path/filepath"
	"testing"
)

func TestCreateExclusiveReplacesPlantedLinks(t *testing.T) {
	ws, outside := t.TempDir(), t.TempDir()
	target := filepath.Join(outside, "victim")
	if err := os.WriteFile(target, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The code planted .sandgate as a link out and the log as a link out.
	if err := os.Symlink(outside, filepath.Join(ws, StateDir)); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(ws)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	rel := path.Join(OutputsDir, "r1.log")
	f, err := CreateExclusive(root, rel)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Fatal("a file outside the workspace changed")
	}
	if fi, err := os.Lstat(filepath.Join(ws, StateDir)); err != nil || !fi.IsDir() {
		t.Fatalf(".sandgate is not a real directory: %v", err)
	}
	if err := os.Symlink(target, filepath.Join(ws, rel)+".tmp"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(ws, rel)+".tmp", filepath.Join(ws, rel)); err != nil {
		t.Fatal(err)
	}
	f, err = CreateExclusive(root, rel)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("log")
	f.Close()
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Fatal("the planted link was written through")
	}
}
