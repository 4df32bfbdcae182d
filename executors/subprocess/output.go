package subprocess

import (
	"bytes"
	"io"
	"sort"
	"sync"
	"unicode/utf8"

	"github.com/sandgate/sandgate/executors/internal/wsfile"
)

// masker replaces every occurrence of the host workspace path(s) with
// /workspace in a byte stream. It runs before any cap is applied, so a path
// is never cut in half by the cap and then left unmasked; it holds back
// only bytes that may be the start of a path split across two writes.
type masker struct {
	olds    [][]byte // longest first, so a longer alias wins
	new     []byte
	maxOld  int
	pending []byte // held-back tail, shorter than the longest old path
	scratch []byte
	out     func([]byte)
}

func newMasker(olds []string, replacement string, out func([]byte)) *masker {
	m := &masker{new: []byte(replacement), out: out}
	for _, o := range olds {
		if o != "" && o != replacement {
			m.olds = append(m.olds, []byte(o))
			m.maxOld = max(m.maxOld, len(o))
		}
	}
	sort.Slice(m.olds, func(i, j int) bool { return len(m.olds[i]) > len(m.olds[j]) })
	return m
}

// write masks p and passes on everything that can no longer be part of a
// match. It reuses its buffers, so a flood of output allocates nothing per
// write.
func (m *masker) write(p []byte) {
	if len(m.olds) == 0 {
		m.out(p)
		return
	}
	m.scratch = append(append(m.scratch[:0], m.pending...), p...)
	b := m.scratch
	for {
		i, n := m.find(b)
		if i < 0 {
			break
		}
		m.emit(b[:i])
		m.emit(m.new)
		b = b[i+n:]
	}
	keep := m.holdback(b)
	m.emit(b[:len(b)-keep])
	m.pending = append(m.pending[:0], b[len(b)-keep:]...)
}

// holdback returns the length of the longest suffix of b that is the start
// of an old path: only those bytes must wait for the next write. Holding
// back nothing else keeps stdout and stderr in arrival order in the spill
// file.
func (m *masker) holdback(b []byte) int {
	for i := max(0, len(b)-(m.maxOld-1)); i < len(b); i++ {
		for _, o := range m.olds {
			if bytes.HasPrefix(o, b[i:]) {
				return len(b) - i
			}
		}
	}
	return 0
}

// flush passes on the held-back tail at the end of the stream.
func (m *masker) flush() {
	m.emit(m.pending)
	m.pending = nil
}

// find returns the earliest occurrence of any old path in b and its length.
func (m *masker) find(b []byte) (int, int) {
	best, n := -1, 0
	for _, o := range m.olds {
		if i := bytes.Index(b, o); i >= 0 && (best < 0 || i < best) {
			best, n = i, len(o)
		}
	}
	return best, n
}

func (m *masker) emit(b []byte) {
	if len(b) > 0 {
		m.out(b)
	}
}

// capture keeps the first limit bytes of one stream for the response.
type capture struct {
	limit     int
	buf       bytes.Buffer
	truncated bool
}

// add keeps what fits and reports whether p overflowed the cap.
func (c *capture) add(p []byte) (overflow bool) {
	room := c.limit - c.buf.Len()
	if len(p) <= room {
		c.buf.Write(p)
		return false
	}
	c.buf.Write(p[:max(room, 0)])
	c.truncated = true
	return true
}

// text returns the captured bytes; a truncated capture does not end in the
// middle of a UTF-8 sequence the cut created.
func (c *capture) text() string {
	b := c.buf.Bytes()
	if c.truncated {
		b = trimPartialRune(b)
	}
	return string(b)
}

// trimPartialRune drops an incomplete UTF-8 sequence at the end of b.
func trimPartialRune(b []byte) []byte {
	for i := 1; i <= utf8.UTFMax && i <= len(b); i++ {
		if utf8.RuneStart(b[len(b)-i]) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			return b
		}
	}
	return b
}

// output collects both streams of one run. It is safe for concurrent use:
// os/exec copies stdout and stderr in two goroutines.
type output struct {
	mu     sync.Mutex
	stdout streamState
	stderr streamState
	spill  wsfile.Spill
	closed bool
	shown  string
	result outputResult
}

type outputResult struct {
	stdout, stderr, path string
	truncated            bool
}

type streamState struct {
	cap    capture
	masker *masker
}

// outputOptions are the per-run parameters of output.
type outputOptions struct {
	spillShown        string // the spill file's path as the code sees it
	limit, spillLimit int
	hostPaths         []string
	openSpill         func() (io.WriteCloser, error)
	onSpillError      func(error)
}

func newOutput(o outputOptions) *output {
	out := &output{shown: o.spillShown, spill: wsfile.Spill{Limit: o.spillLimit, Open: o.openSpill, OnError: o.onSpillError}}
	for _, st := range []*streamState{&out.stdout, &out.stderr} {
		st.cap.limit = o.limit
		st.masker = newMasker(o.hostPaths, workspaceMount, out.sink(st))
	}
	return out
}

// sink is where masked bytes of one stream go (called with mu held).
func (o *output) sink(st *streamState) func([]byte) {
	return func(p []byte) {
		if st.cap.add(p) {
			o.spill.Activate()
		}
		o.spill.Record(p)
	}
}

// Stdout and Stderr return the writers for exec.Cmd.
func (o *output) Stdout() io.Writer { return streamWriter{o, &o.stdout} }
func (o *output) Stderr() io.Writer { return streamWriter{o, &o.stderr} }

// write is Stdout().Write or Stderr().Write.
func (o *output) write(stderr bool, p []byte) {
	st := &o.stdout
	if stderr {
		st = &o.stderr
	}
	_, _ = streamWriter{o, st}.Write(p)
}

type streamWriter struct {
	o  *output
	st *streamState
}

func (w streamWriter) Write(p []byte) (int, error) {
	w.o.mu.Lock()
	defer w.o.mu.Unlock()
	if !w.o.closed {
		w.st.masker.write(p)
	}
	return len(p), nil
}

// finish flushes both maskers and closes the spill file, once. It returns
// the response texts, whether either was truncated and, when the spill file
// holds the full output, its path as the code sees it.
func (o *output) finish() (stdout, stderr string, truncated bool, spillPath string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.closed {
		o.closed = true
		o.stdout.masker.flush()
		o.stderr.masker.flush()
		r := &o.result
		r.truncated = o.stdout.cap.truncated || o.stderr.cap.truncated
		if o.spill.Close() && r.truncated {
			r.path = o.shown
		}
		r.stdout, r.stderr = o.stdout.cap.text(), o.stderr.cap.text()
	}
	r := o.result
	return r.stdout, r.stderr, r.truncated, r.path
}
