package subprocess

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestMaskerAcrossWrites(t *testing.T) {
	const host = "/srv/ws/abc"
	for _, tc := range []struct {
		name   string
		chunks []string
		want   string
	}{
		{"whole", []string{"cwd=/srv/ws/abc/x\n"}, "cwd=/workspace/x\n"},
		{"split", []string{"cwd=/srv/w", "s/ab", "c/x\n"}, "cwd=/workspace/x\n"},
		{"byte by byte", strings.Split("a /srv/ws/abc b /srv/ws/abc", ""), "a /workspace b /workspace"},
		{"near miss", []string{"/srv/ws/ab", "d /srv/ws/a"}, "/srv/ws/abd /srv/ws/a"},
		{"no path", []string{"hello ", "world"}, "hello world"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			m := newMasker([]string{host}, workspaceMount, func(p []byte) { out.Write(p) })
			for _, c := range tc.chunks {
				m.write([]byte(c))
			}
			m.flush()
			if out.String() != tc.want {
				t.Errorf("got %q, want %q", out.String(), tc.want)
			}
		})
	}
}

func TestMaskerAliasesLongestFirst(t *testing.T) {
	var out bytes.Buffer
	m := newMasker([]string{"/a", "/a/real"}, workspaceMount, func(p []byte) { out.Write(p) })
	m.write([]byte("/a/real/f and /a/f"))
	m.flush()
	if got, want := out.String(), "/workspace/f and /workspace/f"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestTrimPartialRune(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"abc", "abc"},
		{"ab\xc3", "ab"},         // first byte of é
		{"ab\xe2\x9c", "ab"},     // two bytes of ✓
		{"ab✓", "ab✓"},           // complete
		{"ab\xf0\x9f\x8e", "ab"}, // three bytes of 🎉
		{"\xff\xfe", "\xff\xfe"}, // binary stays binary
		{"", ""},
	} {
		if got := string(trimPartialRune([]byte(tc.in))); got != tc.want {
			t.Errorf("trimPartialRune(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// memFile is a spill file in memory.
type memFile struct {
	bytes.Buffer
	closed bool
}

func (m *memFile) Close() error { m.closed = true; return nil }

func TestOutputCapsAndSpill(t *testing.T) {
	f := &memFile{}
	o := newOutput(outputOptions{
		spillShown: "/workspace/.sandgate/outputs/r.log",
		limit:      4, spillLimit: 10,
		hostPaths: []string{"/host/ws"},
		openSpill: func() (io.WriteCloser, error) { return f, nil },
	})
	io.WriteString(o.Stdout(), "ab")
	io.WriteString(o.Stderr(), "E1")
	io.WriteString(o.Stdout(), "cdef")
	io.WriteString(o.Stderr(), "E2")
	io.WriteString(o.Stdout(), "ghijklmnop")
	stdout, stderr, truncated, spill := o.finish()
	if stdout != "abcd" || stderr != "E1E2" || !truncated || spill != "/workspace/.sandgate/outputs/r.log" {
		t.Errorf("got %q %q %v %q", stdout, stderr, truncated, spill)
	}
	if f.String() != "abE1cdefE2" || !f.closed {
		t.Errorf("spill file %q closed=%v, want the first 10 bytes in arrival order", f.String(), f.closed)
	}
}

func TestOutputNoSpillWithoutTruncation(t *testing.T) {
	opened := false
	o := newOutput(outputOptions{limit: 100, spillLimit: 1000,
		openSpill: func() (io.WriteCloser, error) { opened = true; return &memFile{}, nil }})
	io.WriteString(o.Stdout(), "small")
	if _, _, truncated, spill := o.finish(); truncated || spill != "" || opened {
		t.Errorf("truncated=%v spill=%q opened=%v", truncated, spill, opened)
	}
}

func TestOutputSpillFailureStillTruncates(t *testing.T) {
	var logged error
	o := newOutput(outputOptions{limit: 2, spillLimit: 100,
		openSpill:    func() (io.WriteCloser, error) { return nil, errors.New("no space") },
		onSpillError: func(err error) { logged = err }})
	io.WriteString(o.Stdout(), "abcdef")
	stdout, _, truncated, spill := o.finish()
	if stdout != "ab" || !truncated || spill != "" || logged == nil {
		t.Errorf("stdout %q truncated %v spill %q logged %v", stdout, truncated, spill, logged)
	}
}

func TestRequestID(t *testing.T) {
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"req-1", true}, {"A.b_c-9", true}, {"", true},
		{"..", false}, {".", false}, {"../etc/passwd", false}, {"a/b", false},
		{"a b", false}, {"a\x00b", false}, {strings.Repeat("x", 129), false},
	} {
		got, err := requestID(tc.id)
		if tc.ok != (err == nil) {
			t.Errorf("requestID(%q) error %v, want ok=%v", tc.id, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidRequestID) {
			t.Errorf("requestID(%q) error %v does not wrap ErrInvalidRequestID", tc.id, err)
		}
		if err == nil && tc.id == "" && !requestIDPattern.MatchString(got) {
			t.Errorf("generated id %q is not valid", got)
		}
	}
}
