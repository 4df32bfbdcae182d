package docker

import (
	"bytes"
	"io"
	"strconv"
	"sync"

	"github.com/sandgate/sandgate/executors/output"
)

// runOutput receives the demultiplexed streams of one run: an
// output.Collector (mask, cap, spill) with the boot script's exit trailer
// taken off the end of stdout and of stderr first.
//
// The boot script ends each stream with a trailer once the program has
// exited. Each stream keeps its order on the attach connection, so once
// both end with one, everything the program wrote has arrived: ended is
// closed then, and the run need not wait for the engine to close the
// streams, which it does only after tearing the container down (runc
// ~45 ms, gVisor ~125 ms after the trailer, measured). What arrives after
// that is dropped.
type runOutput struct {
	*output.Collector
	mu     sync.Mutex // serialises the streams' writes with finish
	closed bool
	stdout trailerCatcher // in front of stdout
	stderr trailerCatcher // in front of stderr
	ended  chan struct{}  // closed when closed is set by the trailers
}

func newRunOutput(o output.Options) *runOutput {
	out := &runOutput{Collector: output.New(o), ended: make(chan struct{})}
	out.stdout.next = out.Collector.Stdout()
	out.stderr.next = out.Collector.Stderr()
	return out
}

// Stdout and Stderr are the writers for stdcopy's streams.
func (o *runOutput) Stdout() io.Writer { return streamWriter{o, &o.stdout} }
func (o *runOutput) Stderr() io.Writer { return streamWriter{o, &o.stderr} }

// streamWriter passes one stream through its trailer catcher.
type streamWriter struct {
	o *runOutput
	c *trailerCatcher
}

func (w streamWriter) Write(p []byte) (int, error) {
	w.o.mu.Lock()
	defer w.o.mu.Unlock()
	if w.o.closed {
		return len(p), nil
	}
	_, _ = w.c.Write(p)
	if w.o.stdout.complete() && w.o.stderr.complete() {
		w.o.closed = true
		close(w.o.ended)
	}
	return len(p), nil
}

// finish passes on what the trailer catchers held back and ends the
// output; later writes are dropped.
func (o *runOutput) finish() output.Result {
	o.mu.Lock()
	o.closed = true
	o.stdout.end()
	o.stderr.end()
	o.mu.Unlock()
	return o.Finish()
}

// exitStatus returns the exit status the boot script reported at the end
// of stderr, if the stream ended with it. Valid after finish.
func (o *runOutput) exitStatus() (int, bool) {
	return o.stderr.code, o.stderr.found
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

// parseTrailer returns where the exit trailer that ends b starts and the
// status it carries; ok is false when b does not end with one.
func parseTrailer(b []byte) (at, code int, ok bool) {
	if !bytes.HasSuffix(b, []byte(exitTrailerSuffix)) {
		return 0, 0, false
	}
	i := bytes.LastIndex(b, []byte(exitTrailerPrefix))
	if i < 0 {
		return 0, 0, false
	}
	digits := b[i+len(exitTrailerPrefix) : len(b)-len(exitTrailerSuffix)]
	code, err := strconv.Atoi(string(digits))
	if err != nil || len(digits) == 0 || code < 0 || code > 255 {
		return 0, 0, false
	}
	return i, code, true
}

// complete reports whether the stream so far ends with an exit trailer.
func (c *trailerCatcher) complete() bool {
	_, _, ok := parseTrailer(c.held)
	return ok
}

// end parses and strips the trailer and passes the rest on.
func (c *trailerCatcher) end() {
	rest := c.held
	if i, code, ok := parseTrailer(rest); ok {
		c.code, c.found = code, true
		rest = rest[:i]
	}
	if len(rest) > 0 {
		_, _ = c.next.Write(rest)
	}
	c.held = nil
}
