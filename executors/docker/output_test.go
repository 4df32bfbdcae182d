package docker

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/executors/internal/wsfile"
)

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// feedInPieces writes s to w in pieces of n bytes.
func feedInPieces(w io.Writer, s string, n int) {
	for len(s) > 0 {
		k := min(n, len(s))
		_, _ = w.Write([]byte(s[:k]))
		s = s[k:]
	}
}

func TestPathMaskAcrossPieces(t *testing.T) {
	host := "/var/lib/sandgate/workspaces/s1"
	in := "cwd " + host + "/x.txt and " + host + "\n" + strings.Repeat("z", 100) + host
	want := "cwd /workspace/x.txt and /workspace\n" + strings.Repeat("z", 100) + "/workspace"
	for _, n := range []int{1, 2, 3, 7, 31, 1000} {
		var got bytes.Buffer
		m := newPathMask([]string{host, "/var/lib/sandgate"}, workspaceMount)
		emit := func(p []byte) { got.Write(p) }
		for i := 0; i < len(in); i += n {
			m.feed([]byte(in[i:min(i+n, len(in))]), emit)
		}
		m.flush(emit)
		if got.String() != want {
			t.Errorf("pieces of %d: %q", n, got.String())
		}
	}
}

func TestTrailerStripped(t *testing.T) {
	trailer := exitTrailerPrefix + "42" + exitTrailerSuffix
	for _, tc := range []struct {
		name, in, wantErr string
		code              int
		found             bool
	}{
		{"plain", "oops\n" + trailer, "oops\n", 42, true},
		{"only trailer", trailer, "", 42, true},
		{"none", "no trailer here", "no trailer here", 0, false},
		{"forged then real", exitTrailerPrefix + "1" + exitTrailerSuffix + "x" + trailer, exitTrailerPrefix + "1" + exitTrailerSuffix + "x", 42, true},
		{"not at the end", trailer + "late", trailer + "late", 0, false},
		{"binary", "\x00\x1e\x00\xff", "\x00\x1e\x00\xff", 0, false},
	} {
		for _, n := range []int{1, 5, 100} {
			o := newRunOutput(1<<20, nil, spillFile{})
			feedInPieces(o.Stderr(), tc.in, n)
			_, stderr, _, _ := o.finish()
			code, found := o.exitStatus()
			if stderr != tc.wantErr || code != tc.code || found != tc.found {
				t.Errorf("%s/%d: stderr %q code %d found %v", tc.name, n, stderr, code, found)
			}
		}
	}
}

func TestCapAndSpill(t *testing.T) {
	var file bytes.Buffer
	opened := 0
	o := newRunOutput(10, []string{"/host/ws"}, spillFile{
		shown: "/workspace/.sandgate/outputs/r.log", Spill: wsfile.Spill{Limit: 27,
			Open: func() (io.WriteCloser, error) { opened++; return nopCloser{&file}, nil }},
	})
	feedInPieces(o.Stdout(), "0123456789", 3)
	feedInPieces(o.Stderr(), "err /host/ws\n", 4)
	feedInPieces(o.Stdout(), "abcdefghij", 4)
	stdout, stderr, truncated, path := o.finish()
	if stdout != "0123456789" || !truncated || path != "/workspace/.sandgate/outputs/r.log" || opened != 1 {
		t.Fatalf("stdout %q truncated %v path %q opened %d", stdout, truncated, path, opened)
	}
	if stderr != "err /works" {
		t.Errorf("stderr %q", stderr)
	}
	if file.String() != "0123456789err /workspace\nab" {
		t.Errorf("spill %q: want both streams in arrival order, capped at 27", file.String())
	}
}

func TestNoSpillWithoutOverflowAndFailedSpill(t *testing.T) {
	o := newRunOutput(100, nil, spillFile{Spill: wsfile.Spill{Limit: 100, Open: func() (io.WriteCloser, error) {
		t.Fatal("spill opened without overflow")
		return nil, nil
	}}})
	feedInPieces(o.Stdout(), "short", 2)
	if _, _, truncated, path := o.finish(); truncated || path != "" {
		t.Fatalf("truncated %v path %q", truncated, path)
	}
	var reported error
	o = newRunOutput(2, nil, spillFile{shown: "x", Spill: wsfile.Spill{Limit: 100,
		Open:    func() (io.WriteCloser, error) { return nil, errors.New("disk full") },
		OnError: func(err error) { reported = err }}})
	feedInPieces(o.Stdout(), "long output", 3)
	if _, _, truncated, path := o.finish(); !truncated || path != "" || reported == nil {
		t.Fatalf("truncated %v path %q reported %v: a failed spill must not be offered", truncated, path, reported)
	}
}

func TestCutKeepsWholeRunes(t *testing.T) {
	o := newRunOutput(5, nil, spillFile{})
	feedInPieces(o.Stdout(), "abcd✓✓", 2)
	if stdout, _, _, _ := o.finish(); stdout != "abcd" {
		t.Fatalf("stdout %q", stdout)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("zero config: %v", err)
	}
	err := Config{
		Images:   map[string]string{"cobol": "x"},
		Labels:   map[string]string{"sandgate.managed": "false"},
		Instance: "has space",
	}.Validate()
	for _, want := range []string{"cobol", "sandgate.managed", "instance"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want it to name %q", err, want)
		}
	}
	d := Config{WarmMax: -1}.withDefaults()
	if d.WarmMax != -1 || d.Images["python"] != DefaultImage || d.Limits.MemoryMB != DefaultLimits.MemoryMB {
		t.Errorf("defaults %+v", d)
	}
}
