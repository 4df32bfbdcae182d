package main

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"unicode/utf8"
)

// Stream indexes.
const (
	stdout = 0
	stderr = 1
)

// spillSpec asks for the combined output (stdout and stderr interleaved in
// arrival order, as 2>&1 would) to be kept in a file when a stream
// overflows its retain limit: the gateway's spill file.
type spillSpec struct {
	path  string
	limit int
}

// outputBuf collects both streams of one command. Each stream keeps its
// first retain bytes (offset-addressed, for /v1/bash/output) and counts the
// rest. It is safe for concurrent use and never blocks the writer: output
// beyond every limit is counted and dropped, so a flooding child is never
// stalled on a full pipe.
type outputBuf struct {
	mu      sync.Mutex
	retain  int
	streams [2]streamBuf
	changed chan struct{} // closed and replaced on every write
	closed  bool

	spill      *spillSpec
	journal    [][]byte
	spillFile  *os.File
	spillN     int
	spillErr   error
	spillShown string
}

type streamBuf struct {
	data      []byte
	total     int
	truncated bool
}

func newOutputBuf(retain int, sp *spillSpec) *outputBuf {
	return &outputBuf{retain: retain, changed: make(chan struct{}), spill: sp}
}

func (o *outputBuf) write(stream int, p []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return
	}
	s := &o.streams[stream]
	s.total += len(p)
	room := o.retain - len(s.data)
	overflow := len(p) > room
	if overflow {
		s.data = append(s.data, p[:max(room, 0)]...)
		s.truncated = true
	} else {
		s.data = append(s.data, p...)
	}
	if o.spill != nil {
		if overflow {
			o.activateSpill()
		}
		o.recordSpill(p)
	}
	close(o.changed)
	o.changed = make(chan struct{})
}

// recordSpill journals p in memory until the spill file is open (bounded
// by the two retain limits), then writes through up to the spill limit.
func (o *outputBuf) recordSpill(p []byte) {
	if o.spillErr != nil {
		return
	}
	if o.spillFile == nil {
		o.journal = append(o.journal, append([]byte(nil), p...))
		return
	}
	o.writeSpill(p)
}

func (o *outputBuf) activateSpill() {
	if o.spillFile != nil || o.spillErr != nil {
		return
	}
	f, err := createExclusive(o.spill.path)
	if err != nil {
		o.spillErr = err
		o.journal = nil
		return
	}
	o.spillFile = f
	for _, c := range o.journal {
		o.writeSpill(c)
	}
	o.journal = nil
}

func (o *outputBuf) writeSpill(p []byte) {
	if room := o.spill.limit - o.spillN; len(p) > room {
		p = p[:max(room, 0)]
	}
	if len(p) == 0 {
		return
	}
	n, err := o.spillFile.Write(p)
	o.spillN += n
	if err != nil {
		o.spillErr = err
	}
}

// finish closes the spill file. It returns the spill path when the file
// holds the output of a truncated run.
func (o *outputBuf) finish() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.closed {
		o.closed = true
		o.journal = nil
		if o.spillFile != nil {
			if err := o.spillFile.Close(); err != nil && o.spillErr == nil {
				o.spillErr = err
			}
			if o.spillErr == nil {
				o.spillShown = o.spill.path
			}
		}
		close(o.changed)
	}
	return o.spillShown
}

// snapshot returns stream bytes from offset on, the new offset and the
// total written so far.
func (o *outputBuf) read(stream, offset int) (data []byte, next int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := &o.streams[stream]
	if offset < 0 {
		offset = 0
	}
	if offset >= len(s.data) {
		return nil, max(offset, len(s.data))
	}
	return append([]byte(nil), s.data[offset:]...), len(s.data)
}

// all returns a stream's retained bytes and whether it was truncated.
func (o *outputBuf) all(stream int) ([]byte, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := &o.streams[stream]
	return append([]byte(nil), s.data...), s.truncated
}

// wait returns a channel closed at the next write or at finish.
func (o *outputBuf) wait() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		c := make(chan struct{})
		close(c)
		return c
	}
	return o.changed
}

// streamWriter adapts one stream to io.Writer.
type streamWriter struct {
	o      *outputBuf
	stream int
}

func (w streamWriter) Write(p []byte) (int, error) {
	w.o.write(w.stream, p)
	return len(p), nil
}

// pump copies r into the stream until EOF or error.
func pump(r io.Reader, w io.Writer) {
	buf := make([]byte, 64<<10)
	_, _ = io.CopyBuffer(w, r, buf)
}

// createExclusive creates path with its parents, never writing through an
// entry that already exists there (a planted symlink or hard link is
// removed first).
func createExclusive(path string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	for range 3 {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	return nil, fs.ErrExist
}

// middleTruncate keeps the head and tail of s around a marker when it is
// longer than n bytes (the AIO max_output_length behaviour); n <= 0 keeps
// everything.
func middleTruncate(s string, n int) string {
	if n <= 0 || len(s) <= n {
		return s
	}
	const marker = "\n... [output truncated] ...\n"
	keep := max(n-len(marker), 2)
	head := trimToRune(s[:keep/2], false)
	tail := trimToRune(s[len(s)-keep/2:], true)
	return head + marker + tail
}

// trimToRune drops a partial UTF-8 sequence a cut created, at the end of s
// (or at its start when fromStart).
func trimToRune(s string, fromStart bool) string {
	if fromStart {
		for len(s) > 0 && !utf8.RuneStart(s[0]) {
			s = s[1:]
		}
		return s
	}
	for i := 1; i <= utf8.UTFMax && i <= len(s); i++ {
		if utf8.RuneStart(s[len(s)-i]) {
			if !utf8.FullRuneInString(s[len(s)-i:]) {
				return s[:len(s)-i]
			}
			return s
		}
	}
	return s
}
