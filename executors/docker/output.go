package docker

import (
	"bytes"
	"io"
	"strconv"

	"github.com/sandgate/sandgate/executors/output"
)

// runOutput receives the demultiplexed streams of one run: an
// output.Collector (mask, cap, spill) with the exit trailer of the boot
// script taken off the end of stderr first.
type runOutput struct {
	*output.Collector
	trailer trailerCatcher // in front of stderr
}

func newRunOutput(o output.Options) *runOutput {
	out := &runOutput{Collector: output.New(o)}
	out.trailer.next = out.Collector.Stderr()
	return out
}

// Stderr is the writer for stdcopy's stderr.
func (o *runOutput) Stderr() io.Writer { return &o.trailer }

// finish passes on what the trailer catcher held back and ends the
// output.
func (o *runOutput) finish() output.Result {
	o.trailer.end()
	return o.Finish()
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
