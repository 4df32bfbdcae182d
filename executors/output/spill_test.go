package output

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/sandgate/sandgate/executors/internal/wsfile"
)

// TestSpill: nothing is written before Activate, the journal then comes
// first, the file stops at Limit, and a failed write makes Close refuse
// the file and is reported once.
func TestSpill(t *testing.T) {
	for _, tc := range []struct {
		name      string
		limit     int
		failAfter int
		activate  bool
		want      string
		usable    bool
		reported  int
	}{
		{"never activated", 100, 0, false, "", false, 0},
		{"journal then live", 100, 0, true, "abcdef", true, 0},
		{"capped", 4, 0, true, "abcd", true, 0},
		{"write fails", 100, 2, true, "ab", false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &memFile{failAfter: tc.failAfter}
			reported := 0
			s := Spill{Limit: tc.limit, Open: func() (io.WriteCloser, error) { return f, nil },
				OnError: func(error) { reported++ }}
			s.Record([]byte("ab"))
			s.Record([]byte("cd"))
			if tc.activate {
				s.Activate()
			}
			s.Record([]byte("ef"))
			if usable := s.Close(); usable != tc.usable || f.String() != tc.want || reported != tc.reported {
				t.Errorf("file %q usable %v reported %d; want %q %v %d", f.String(), usable, reported, tc.want, tc.usable, tc.reported)
			}
		})
	}
}

// TestCreateInReplacesPlantedLinks: the code owns the workspace and may
// plant the spill file, or a directory above it, as a link out of it.
func TestCreateInReplacesPlantedLinks(t *testing.T) {
	rel, shown := SpillPaths("r1")
	if shown != "/workspace/.sandgate/outputs/r1.log" || rel != ".sandgate/outputs/r1.log" {
		t.Fatalf("SpillPaths: %q %q", rel, shown)
	}
	for _, plant := range []string{wsfile.StateDir, rel} {
		t.Run(plant, func(t *testing.T) {
			ws, outside := t.TempDir(), t.TempDir()
			victim := filepath.Join(outside, "r1.log")
			if err := os.WriteFile(victim, []byte("keep"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Dir(filepath.Join(ws, plant)), 0o755); err != nil {
				t.Fatal(err)
			}
			target := outside
			if plant == rel {
				target = victim
			}
			if err := os.Symlink(target, filepath.Join(ws, plant)); err != nil {
				t.Fatal(err)
			}
			w, err := CreateIn(ws, rel)
			if err != nil {
				t.Fatal(err)
			}
			io.WriteString(w, "log")
			w.Close()
			if b, _ := os.ReadFile(victim); string(b) != "keep" {
				t.Fatal("a file outside the workspace changed")
			}
			if b, err := os.ReadFile(filepath.Join(ws, rel)); string(b) != "log" || err != nil {
				t.Fatalf("spill file %q %v", b, err)
			}
		})
	}
}
