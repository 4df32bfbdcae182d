package ownerdir

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

const runDirPrefix = "sandgate-test-"

// TestRemoveStale: the directory of a gateway killed without Close is
// removed when the next executor starts (issue 21's soak found one more
// left in the temporary directory after every gateway SIGKILL); a live
// owner's, and one without an owner file, are kept.
func TestRemoveStale(t *testing.T) {
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	self, err := procStart(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	warm := t.TempDir()
	cases := []struct {
		name  string
		owner string // "" writes no owner file
		kept  bool
	}{
		{"owner dead", fmt.Sprintf("%d 12345\n", dead.Process.Pid), false},
		{"pid recycled", fmt.Sprintf("%d %d\n", os.Getpid(), self+1), false},
		{"owner alive", fmt.Sprintf("%d %d\n", os.Getpid(), self), true},
		{"no owner file", "", true},
		{"garbled owner file", "not a pid", true},
	}
	dirs := map[string]string{}
	for i, c := range cases {
		dir := filepath.Join(warm, fmt.Sprintf("%s%d", runDirPrefix, i))
		if err := os.MkdirAll(filepath.Join(dir, "code", "abc"), 0o755); err != nil {
			t.Fatal(err)
		}
		if c.owner != "" {
			if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(c.owner), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		dirs[c.name] = dir
	}
	other := filepath.Join(warm, "unrelated")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	RemoveStale(warm, runDirPrefix)
	for _, c := range cases {
		_, err := os.Stat(dirs[c.name])
		if kept := err == nil; kept != c.kept {
			t.Errorf("%s: kept %v, want %v", c.name, kept, c.kept)
		}
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("a directory not named %s* was touched: %v", runDirPrefix, err)
	}
	// A new directory names its owner, so the next start can tell.
	own, err := Make(warm, runDirPrefix, 0o711)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(own); err != nil || fi.Mode().Perm() != 0o711 {
		t.Fatalf("Make: %v, %v", fi, err)
	}
	RemoveStale(warm, runDirPrefix)
	if _, err := os.Stat(own); err != nil {
		t.Errorf("the live executor's own directory was removed: %v", err)
	}
}
