package wsfile

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

var errBad = errors.New("bad id")

func TestRequestID(t *testing.T) {
	for id, ok := range map[string]bool{"req_1.a-b": true, "": true, ".": false, "..": false, "a/b": false, "a b": false} {
		got, err := RequestID(id, errBad)
		if (err == nil) != ok || (err != nil && !errors.Is(err, errBad)) || (ok && got == "") {
			t.Errorf("%q: %q %v", id, got, err)
		}
	}
}

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
	rel, shown := SpillPaths("r1")
	if shown != "/workspace/.sandgate/outputs/r1.log" {
		t.Fatalf("shown %q", shown)
	}
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

type bufCloser struct {
	bytes.Buffer
	failAfter int // fail writes once this many bytes were written (0: never)
}

func (b *bufCloser) Write(p []byte) (int, error) {
	if b.failAfter > 0 && b.Len()+len(p) > b.failAfter {
		return 0, errors.New("disk full")
	}
	return b.Buffer.Write(p)
}

func (b *bufCloser) Close() error { return nil }

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
			f := &bufCloser{failAfter: tc.failAfter}
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
