package docker

import (
	"io"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/executors/output"
)

// feedInPieces writes s to w in pieces of n bytes.
func feedInPieces(w io.Writer, s string, n int) {
	for len(s) > 0 {
		k := min(n, len(s))
		_, _ = w.Write([]byte(s[:k]))
		s = s[k:]
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
			o := newRunOutput(output.Options{Limit: 1 << 20})
			feedInPieces(o.Stderr(), tc.in, n)
			r := o.finish()
			code, found := o.exitStatus()
			if r.Stderr != tc.wantErr || code != tc.code || found != tc.found {
				t.Errorf("%s/%d: stderr %q code %d found %v", tc.name, n, r.Stderr, code, found)
			}
		}
	}
}

// TestTrailerAfterFlood: the exit status is found after a stderr flood far
// beyond the cap, and the trailer reaches neither the response nor the
// spill file.
func TestTrailerAfterFlood(t *testing.T) {
	var file strings.Builder
	o := newRunOutput(output.Options{Limit: 4, SpillPath: "/workspace/x.log", Spill: output.Spill{Limit: 1 << 20,
		Open: func() (io.WriteCloser, error) { return nopCloser{&file}, nil }}})
	flood := strings.Repeat("e", 10_000)
	feedInPieces(o.Stderr(), flood+exitTrailerPrefix+"3"+exitTrailerSuffix, 7)
	r := o.finish()
	if code, found := o.exitStatus(); code != 3 || !found {
		t.Errorf("exit status %d %v", code, found)
	}
	if r.Stderr != "eeee" || !r.Truncated || r.SpillPath != "/workspace/x.log" || file.String() != flood {
		t.Errorf("result %q %v %q, spill %d bytes", r.Stderr, r.Truncated, r.SpillPath, file.Len())
	}
}

// TestEndedOnBothTrailers: the run's output counts as complete only once
// stdout and stderr both end with a trailer, in any order and however the
// bytes are split; then both trailers are stripped and later bytes are
// dropped.
func TestEndedOnBothTrailers(t *testing.T) {
	trailer := exitTrailerPrefix + "7" + exitTrailerSuffix
	for _, tc := range []struct {
		name           string
		stdout, stderr string
		ended          bool
	}{
		{"both", "out\n" + trailer, "err\n" + trailer, true},
		{"stdout only", "out\n" + trailer, "err\n", false},
		{"stderr only", "out\n", trailer, false},
		{"trailer then more", "out\n" + trailer + "more", trailer, false},
		{"empty output", trailer, trailer, true},
	} {
		for _, n := range []int{1, 4, 100} {
			o := newRunOutput(output.Options{Limit: 1 << 20})
			feedInPieces(o.Stdout(), tc.stdout, n)
			feedInPieces(o.Stderr(), tc.stderr, n)
			select {
			case <-o.ended:
				if !tc.ended {
					t.Fatalf("%s/%d: ended early", tc.name, n)
				}
			default:
				if tc.ended {
					t.Fatalf("%s/%d: not ended", tc.name, n)
				}
				continue
			}
			_, _ = o.Stdout().Write([]byte("late"))
			r := o.finish()
			_, _ = o.Stderr().Write([]byte("later"))
			code, found := o.exitStatus()
			wantOut, wantErr := strings.TrimSuffix(tc.stdout, trailer), strings.TrimSuffix(tc.stderr, trailer)
			if r.Stdout != wantOut || r.Stderr != wantErr || code != 7 || !found {
				t.Errorf("%s/%d: stdout %q stderr %q code %d %v", tc.name, n, r.Stdout, r.Stderr, code, found)
			}
		}
	}
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

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
