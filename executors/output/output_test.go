package output

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
)

// memFile is a spill file in memory.
type memFile struct {
	bytes.Buffer
	failAfter int // writes fail once the file would exceed this many bytes (0: never)
	closed    bool
}

func (m *memFile) Write(p []byte) (int, error) {
	if m.failAfter > 0 && m.Len()+len(p) > m.failAfter {
		return 0, errors.New("disk full")
	}
	return m.Buffer.Write(p)
}

func (m *memFile) Close() error { m.closed = true; return nil }

// piece is one write of a run.
type piece struct {
	s    Stream
	text string
}

func TestCollector(t *testing.T) {
	const shown = "/workspace/.sandgate/outputs/r.log"
	for _, tc := range []struct {
		name       string
		limit      int
		spillLimit int // 0: no spill file configured
		openErr    bool
		failAfter  int
		mask       []string
		writes     []piece
		stdout     string
		stderr     string
		truncated  bool
		spillPath  string
		file       string // the spill file's content, when one was opened
	}{
		{name: "under the cap", limit: 100, spillLimit: 1000,
			writes: []piece{{Stdout, "small"}, {Stderr, "err"}},
			stdout: "small", stderr: "err"},
		{name: "exactly the cap", limit: 5, spillLimit: 1000,
			writes: []piece{{Stdout, "ab"}, {Stdout, "cde"}},
			stdout: "abcde"},
		{name: "cap and spill in arrival order", limit: 4, spillLimit: 10, mask: []string{"/host/ws"},
			writes: []piece{{Stdout, "ab"}, {Stderr, "E1"}, {Stdout, "cdef"}, {Stderr, "E2"}, {Stdout, "ghijklmnop"}},
			stdout: "abcd", stderr: "E1E2", truncated: true, spillPath: shown, file: "abE1cdefE2"},
		{name: "masked before the cap", limit: 10, spillLimit: 27, mask: []string{"/host/ws"},
			writes: []piece{{Stdout, "012"}, {Stdout, "3456789"}, {Stderr, "err /ho"}, {Stderr, "st/ws\n"}, {Stdout, "abcdefghij"}},
			stdout: "0123456789", stderr: "err /works", truncated: true, spillPath: shown, file: "0123456789err /workspace\nab"},
		{name: "a cut rune is dropped", limit: 5,
			writes: []piece{{Stdout, "ab"}, {Stdout, "cd✓✓"}},
			stdout: "abcd", truncated: true},
		{name: "a whole rune at the cap stays", limit: 7,
			writes: []piece{{Stdout, "abcd✓✓"}},
			stdout: "abcd✓", truncated: true},
		{name: "no spill configured", limit: 2,
			writes: []piece{{Stdout, "abcdef"}},
			stdout: "ab", truncated: true},
		{name: "spill cannot be created", limit: 2, spillLimit: 100, openErr: true,
			writes: []piece{{Stdout, "abcdef"}},
			stdout: "ab", truncated: true},
		{name: "spill write fails", limit: 2, spillLimit: 100, failAfter: 4,
			writes: []piece{{Stdout, "abc"}, {Stdout, "def"}},
			stdout: "ab", truncated: true, file: "abc"},
		{name: "stderr alone overflows", limit: 3, spillLimit: 100,
			writes: []piece{{Stdout, "ok"}, {Stderr, "Traceback"}},
			stdout: "ok", stderr: "Tra", truncated: true, spillPath: shown, file: "okTraceback"},
		{name: "zero limit keeps nothing", limit: 0, spillLimit: 100,
			writes:    []piece{{Stdout, "x"}},
			truncated: true, spillPath: shown, file: "x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &memFile{failAfter: tc.failAfter}
			opened, reported := 0, 0
			o := Options{Limit: tc.limit, Mask: tc.mask, SpillPath: shown}
			if tc.spillLimit > 0 {
				o.Spill = Spill{Limit: tc.spillLimit, OnError: func(error) { reported++ },
					Open: func() (io.WriteCloser, error) {
						opened++
						if tc.openErr {
							return nil, errors.New("no space")
						}
						return f, nil
					}}
			}
			c := New(o)
			for _, w := range tc.writes {
				fmt.Fprint(map[Stream]io.Writer{Stdout: c.Stdout(), Stderr: c.Stderr()}[w.s], w.text)
			}
			r := c.Finish()
			want := Result{Stdout: tc.stdout, Stderr: tc.stderr, Truncated: tc.truncated, SpillPath: tc.spillPath}
			if r != want {
				t.Errorf("result %+v, want %+v", r, want)
			}
			if f.String() != tc.file {
				t.Errorf("spill file %q, want %q", f.String(), tc.file)
			}
			if opened > 1 || (opened == 1) != (tc.truncated && tc.spillLimit > 0) {
				t.Errorf("spill opened %d times", opened)
			}
			if opened == 1 && !tc.openErr && !f.closed {
				t.Error("spill file not closed")
			}
			if wantReports := map[bool]int{true: 1}[tc.openErr || tc.failAfter > 0]; reported != wantReports {
				t.Errorf("spill errors reported %d times, want %d", reported, wantReports)
			}
		})
	}
}

// TestFinishOnce: later writes are dropped and Finish keeps its answer,
// as a run whose output is finished on an early return and again at the
// end needs.
func TestFinishOnce(t *testing.T) {
	c := New(Options{Limit: 10, Mask: []string{"/host/ws"}})
	io.WriteString(c.Stdout(), "a /host/w")
	first := c.Finish()
	io.WriteString(c.Stdout(), "more")
	if first.Stdout != "a /host/w" || c.Finish() != first {
		t.Fatalf("first %+v, second %+v", first, c.Finish())
	}
}

// TestTap: the tap sees exactly the response's bytes, masked and capped,
// numbered across both streams in the order they were kept.
func TestTap(t *testing.T) {
	var got []string
	c := New(Options{Limit: 6, Mask: []string{"/h"}, Tap: func(ch Chunk) {
		got = append(got, fmt.Sprintf("%d %s %q", ch.Seq, ch.Stream, ch.Data))
	}})
	io.WriteString(c.Stdout(), "a/h")
	io.WriteString(c.Stderr(), "e1")
	io.WriteString(c.Stdout(), "12345")
	io.WriteString(c.Stdout(), "lost")
	io.WriteString(c.Stderr(), "e2")
	r := c.Finish()
	want := []string{`1 stdout "a"`, `2 stdout "/work"`, `3 stderr "e1"`, `4 stderr "e2"`}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("tapped:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if r.Stdout != "a/work" || r.Stderr != "e1e2" {
		t.Errorf("result %+v", r)
	}
}

// TestBytesUntrimmed: Bytes keeps what the cut left, untrimmed (the
// exact bytes sandboxd sends back base64-encoded).
func TestBytesUntrimmed(t *testing.T) {
	c := New(Options{Limit: 5})
	io.WriteString(c.Stdout(), "abc✓")
	if b, cut := c.Bytes(Stdout); string(b) != "abc\xe2\x9c" || !cut {
		t.Fatalf("Bytes %q %v", b, cut)
	}
}

// TestConcurrentStreams is for -race: os/exec writes the two streams from
// two goroutines.
func TestConcurrentStreams(t *testing.T) {
	c := New(Options{Limit: 1 << 10, Mask: []string{"/host/ws"}})
	var wg sync.WaitGroup
	for _, w := range []io.Writer{c.Stdout(), c.Stderr()} {
		wg.Go(func() {
			for range 200 {
				io.WriteString(w, "x /host/ws y\n")
			}
		})
	}
	wg.Wait()
	r := c.Finish()
	if len(r.Stdout) != 1<<10 || !r.Truncated || strings.Contains(r.Stdout+r.Stderr, "/host") {
		t.Fatalf("stdout %d bytes, truncated %v", len(r.Stdout), r.Truncated)
	}
}
