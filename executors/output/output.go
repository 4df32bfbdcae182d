// Package output is the one output path of every executor and of
// cmd/sandboxd: what a run writes to stdout and stderr is masked (host
// paths → /workspace), capped (each stream at its limit, for the
// response), and spilled (both streams, interleaved in arrival order, to a
// file in the workspace once a cap was hit), in that order and exactly
// once.
//
// A Collector never blocks and never fails a writer: bytes beyond every
// cap are counted out and dropped, so a flooding program is never stalled
// on a full pipe. Its Tap sees each kept chunk as it arrives, with a
// sequence number across both streams: the hook a streaming response
// (DESIGN.md §10) uses, so the streamed bytes are the response's bytes,
// under the same caps and with the same spill file.
package output

import (
	"io"
	"sync"
)

// Stream is stdout or stderr.
type Stream int

// The two streams of a run.
const (
	Stdout Stream = iota
	Stderr
)

// String names the stream as the API does.
func (s Stream) String() string {
	if s == Stderr {
		return "stderr"
	}
	return "stdout"
}

// Chunk is a piece of output as a Tap sees it.
type Chunk struct {
	// Seq numbers the chunks of both streams together, from 1, in the
	// order they were kept.
	Seq    uint64
	Stream Stream
	// Data is masked and within the stream's cap. It is only valid during
	// the call, and may end inside a UTF-8 sequence the next chunk ends.
	Data []byte
}

// Options configure one Collector.
type Options struct {
	// Limit caps each stream, in bytes (Limits.MaxOutputBytes). A
	// non-positive Limit keeps nothing.
	Limit int
	// Mask lists spellings of host paths that must not reach the client;
	// each is replaced by MaskWith. Empty: nothing is masked.
	Mask []string
	// MaskWith replaces the Mask paths. Default "/workspace".
	MaskWith string
	// Spill keeps the full output when a stream overflows its cap. Its
	// zero value keeps none.
	Spill Spill
	// SpillPath is the spill file as the client sees it: Result.SpillPath
	// when the file holds the output of a truncated run.
	SpillPath string
	// Tap, when set, is called with every chunk the response keeps, in
	// order, under the Collector's lock: it must not block (a streaming
	// response queues the chunk and returns).
	Tap func(Chunk)
}

// Result is what a finished Collector hands to the executor's Result.
type Result struct {
	// Stdout and Stderr are the kept bytes; a stream that was cut does not
	// end inside a UTF-8 sequence the cut split.
	Stdout, Stderr string
	// Truncated is set when either stream overflowed its cap.
	Truncated bool
	// SpillPath is Options.SpillPath when the spill file holds the output
	// (complete up to Spill.Limit), else empty.
	SpillPath string
}

// Collector receives both streams of one run. It is safe for concurrent
// use: os/exec copies stdout and stderr in two goroutines.
type Collector struct {
	mu      sync.Mutex
	limit   int
	streams [2]stream
	spill   Spill
	shown   string
	tap     func(Chunk)
	seq     uint64
	closed  bool
	result  Result
}

type stream struct {
	mask masker
	kept []byte
	cut  bool
	emit func([]byte) // where masked bytes go
}

// New returns a Collector for one run.
func New(o Options) *Collector {
	if o.MaskWith == "" {
		o.MaskWith = "/workspace"
	}
	c := &Collector{limit: o.Limit, spill: o.Spill, shown: o.SpillPath, tap: o.Tap}
	for i := range c.streams {
		s := &c.streams[i]
		s.mask = newMasker(o.Mask, o.MaskWith)
		s.emit = func(p []byte) { c.keep(Stream(i), p) }
	}
	return c
}

// Stdout and Stderr return the writers of the two streams. Their Write
// never fails and never blocks on anything but the Collector's lock.
func (c *Collector) Stdout() io.Writer { return writer{c, Stdout} }
func (c *Collector) Stderr() io.Writer { return writer{c, Stderr} }

type writer struct {
	c *Collector
	s Stream
}

func (w writer) Write(p []byte) (int, error) {
	w.c.Write(w.s, p)
	return len(p), nil
}

// Write adds p to stream s. After Finish it does nothing.
func (c *Collector) Write(s Stream, p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || len(p) == 0 {
		return
	}
	st := &c.streams[s]
	st.mask.feed(p, st.emit)
}

// keep takes masked bytes of stream s (called with mu held): the cap, then
// the spill copy, then the tap.
func (c *Collector) keep(s Stream, p []byte) {
	st := &c.streams[s]
	kept := p
	if room := c.limit - len(st.kept); len(p) > room {
		kept = p[:max(room, 0)]
		if !st.cut {
			st.cut = true
			c.spill.Activate()
		}
	}
	st.kept = append(st.kept, kept...)
	c.spill.Record(p)
	if len(kept) > 0 {
		c.seq++
		if c.tap != nil {
			c.tap(Chunk{Seq: c.seq, Stream: s, Data: kept})
		}
	}
}

// Finish flushes the masks and closes the spill file, once; later calls
// return the same Result. Writes after Finish are dropped.
func (c *Collector) Finish() Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.result
	}
	for i := range c.streams {
		st := &c.streams[i]
		st.mask.flush(st.emit)
	}
	c.closed = true
	r := &c.result
	r.Truncated = c.streams[Stdout].cut || c.streams[Stderr].cut
	if c.spill.Close() && r.Truncated {
		r.SpillPath = c.shown
	}
	r.Stdout, r.Stderr = c.streams[Stdout].text(), c.streams[Stderr].text()
	return c.result
}

func (s *stream) text() string {
	if s.cut {
		return string(TrimRune(s.kept))
	}
	return string(s.kept)
}

// Bytes returns a copy of the bytes stream s kept so far, as they came
// (not trimmed to whole characters), and whether it was cut.
func (c *Collector) Bytes(s Stream) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := &c.streams[s]
	return append([]byte(nil), st.kept...), st.cut
}
