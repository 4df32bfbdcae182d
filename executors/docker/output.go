package docker

import (
	"bytes"
	"io"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/sandgate/sandgate/executors/internal/wsfile"
)

// runOutput receives the demultiplexed streams of one run. stdcopy.StdCopy
// writes both streams from a single goroutine, and the run reads the
// result only after that goroutine has returned, so there is no locking.
//
// Each stream is masked (host workspace path → /workspace) before anything
// else, then kept up to the response cap. The spill copy holds both streams
// interleaved in arrival order (as 2>&1 would); it stays in memory until a
// stream first overflows its cap, and is written through to the spill file
// from then on, up to its own cap. Bytes beyond every cap are dropped, never
// blocked on: the container must not stall on a full pipe.
type runOutput struct {
	stdout, stderr stream
	trailer        trailerCatcher // in front of stderr
	spill          spillFile
}

// stream is one of stdout and stderr.
type stream struct {
	out   *runOutput
	mask  pathMask
	limit int
	kept  []byte
	cut   bool
}

func newRunOutput(limit int, hostPaths []string, spill spillFile) *runOutput {
	o := &runOutput{spill: spill}
	for _, s := range []*stream{&o.stdout, &o.stderr} {
		s.out, s.limit = o, limit
		s.mask = newPathMask(hostPaths, workspaceMount)
	}
	o.trailer.next = &o.stderr
	return o
}

// Stdout and Stderr are the writers for stdcopy.
func (o *runOutput) Stdout() io.Writer { return &o.stdout }
func (o *runOutput) Stderr() io.Writer { return &o.trailer }

// Write implements io.Writer for stdcopy; it never fails, so a flood is
// drained at full speed.
func (s *stream) Write(p []byte) (int, error) {
	s.mask.feed(p, s.keep)
	return len(p), nil
}

// keep takes masked bytes.
func (s *stream) keep(p []byte) {
	if room := s.limit - len(s.kept); len(p) > room {
		s.kept = append(s.kept, p[:max(room, 0)]...)
		if !s.cut {
			s.cut = true
			s.out.spill.Activate()
		}
	} else {
		s.kept = append(s.kept, p...)
	}
	s.out.spill.Record(p)
}

// text returns what the response shows: a cut stream does not end in a
// UTF-8 sequence the cut broke.
func (s *stream) text() string {
	if s.cut {
		return string(dropBrokenRune(s.kept))
	}
	return string(s.kept)
}

func dropBrokenRune(b []byte) []byte {
	for n := 1; n <= utf8.UTFMax && n <= len(b); n++ {
		if utf8.RuneStart(b[len(b)-n]) {
			if utf8.FullRune(b[len(b)-n:]) {
				return b
			}
			return b[:len(b)-n]
		}
	}
	return b
}

// finish flushes the masks and closes the spill file. It returns the
// response texts, whether either was cut and, when the spill file holds
// the full output, its path as the code sees it.
func (o *runOutput) finish() (stdout, stderr string, truncated bool, spillPath string) {
	o.trailer.end()
	o.stdout.mask.flush(o.stdout.keep)
	o.stderr.mask.flush(o.stderr.keep)
	truncated = o.stdout.cut || o.stderr.cut
	if o.spill.Close() && truncated {
		spillPath = o.spill.shown
	}
	return o.stdout.text(), o.stderr.text(), truncated, spillPath
}

// exitStatus returns the exit status the boot script reported at the end
// of stderr, if the stream ended with it. Valid after finish.
func (o *runOutput) exitStatus() (int, bool) {
	return o.trailer.code, o.trailer.found
}

// trailerCatcher holds back the last bytes of stderr until the stream ends,
// then strips the boot script's exit trailer from them, if they end with
// one, and passes the rest on.
type trailerCatcher struct {
	next  io.Writer
	held  []byte
	code  int
	found bool
}

func (c *trailerCatcher) Write(p []byte) (int, error) {
	c.held = append(c.held, p...)
	keep := trailerStart(c.held)
	if keep < len(c.held) {
		_, _ = c.next.Write(c.held[:len(c.held)-keep])
		c.held = append(c.held[:0], c.held[len(c.held)-keep:]...)
	}
	return len(p), nil
}

// trailerStart returns the length of the longest suffix of b that is the
// start of an exit trailer (or a whole one): only those bytes are held
// back, so ordinary output flows on at once and keeps its order relative
// to stdout in the spill file.
func trailerStart(b []byte) int {
	for i := max(0, len(b)-exitTrailerMax); i < len(b); i++ {
		if b[i] == 0 && couldBeTrailer(b[i:]) {
			return len(b) - i
		}
	}
	return 0
}

// couldBeTrailer reports whether t is a prefix of some exit trailer.
func couldBeTrailer(t []byte) bool {
	pre := []byte(exitTrailerPrefix)
	if len(t) <= len(pre) {
		return bytes.HasPrefix(pre, t)
	}
	if !bytes.HasPrefix(t, pre) {
		return false
	}
	t = t[len(pre):]
	n := 0
	for n < len(t) && n < 3 && t[n] >= '0' && t[n] <= '9' {
		n++
	}
	if n == 0 {
		return false
	}
	return n == len(t) || bytes.HasPrefix([]byte(exitTrailerSuffix), t[n:])
}

// end parses and strips the trailer and passes the rest on.
func (c *trailerCatcher) end() {
	rest := c.held
	if i := bytes.LastIndex(rest, []byte(exitTrailerPrefix)); i >= 0 && bytes.HasSuffix(rest, []byte(exitTrailerSuffix)) {
		digits := rest[i+len(exitTrailerPrefix) : len(rest)-len(exitTrailerSuffix)]
		if code, err := strconv.Atoi(string(digits)); err == nil && len(digits) > 0 && code >= 0 && code <= 255 {
			c.code, c.found = code, true
			rest = rest[:i]
		}
	}
	if len(rest) > 0 {
		_, _ = c.next.Write(rest)
	}
	c.held = nil
}

// pathMask replaces host paths in a byte stream that arrives in arbitrary
// pieces. It holds back only a tail that could be the start of a path split
// across two pieces.
type pathMask struct {
	paths [][]byte // longest first: a longer spelling wins over its prefix
	repl  []byte
	carry []byte
	buf   []byte
}

func newPathMask(paths []string, repl string) pathMask {
	m := pathMask{repl: []byte(repl)}
	for _, p := range paths {
		if p != "" && p != repl {
			m.paths = append(m.paths, []byte(p))
		}
	}
	slices.SortFunc(m.paths, func(a, b []byte) int { return len(b) - len(a) })
	return m
}

func (m *pathMask) feed(p []byte, emit func([]byte)) {
	if len(m.paths) == 0 {
		emit(p)
		return
	}
	m.buf = append(append(m.buf[:0], m.carry...), p...)
	rest := m.buf
	for {
		at, n := m.next(rest)
		if at < 0 {
			break
		}
		if m.longerMayFollow(rest[at:], n) {
			// A longer spelling may still complete here: decide when
			// more bytes have arrived.
			emitNonEmpty(emit, rest[:at])
			m.carry = append(m.carry[:0], rest[at:]...)
			return
		}
		emitNonEmpty(emit, rest[:at])
		emit(m.repl)
		rest = rest[at+n:]
	}
	hold := m.partialTail(rest)
	emitNonEmpty(emit, rest[:len(rest)-hold])
	m.carry = append(m.carry[:0], rest[len(rest)-hold:]...)
}

// longerMayFollow reports whether b, which starts with a match of length
// n, is a proper prefix of a longer path.
func (m *pathMask) longerMayFollow(b []byte, n int) bool {
	for _, p := range m.paths {
		if len(p) > n && len(b) < len(p) && bytes.HasPrefix(p, b) {
			return true
		}
	}
	return false
}

// next finds the earliest path in b.
func (m *pathMask) next(b []byte) (at, n int) {
	at = -1
	for _, p := range m.paths {
		if i := bytes.Index(b, p); i >= 0 && (at < 0 || i < at) {
			at, n = i, len(p)
		}
	}
	return at, n
}

// partialTail is the length of the longest suffix of b that is a proper
// prefix of a path.
func (m *pathMask) partialTail(b []byte) int {
	longest := len(m.paths[0])
	for i := max(0, len(b)-longest+1); i < len(b); i++ {
		for _, p := range m.paths {
			if len(b)-i < len(p) && bytes.HasPrefix(p, b[i:]) {
				return len(b) - i
			}
		}
	}
	return 0
}

// flush passes on what was held back, masking what is a whole path.
func (m *pathMask) flush(emit func([]byte)) {
	rest := m.carry
	m.carry = nil
	for {
		at, n := m.next(rest)
		if at < 0 {
			break
		}
		emitNonEmpty(emit, rest[:at])
		emit(m.repl)
		rest = rest[at+n:]
	}
	emitNonEmpty(emit, rest)
}

func emitNonEmpty(emit func([]byte), b []byte) {
	if len(b) > 0 {
		emit(b)
	}
}

// spillFile is the full-output copy of one run and its path as the code
// sees it.
type spillFile struct {
	wsfile.Spill
	shown string
}
