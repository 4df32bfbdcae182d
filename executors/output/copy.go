package output

import (
	"io"
	"sync"
)

// copyBufs are Copy's buffers. io.Copy allocates 32 KiB per call when
// neither side has a fast path, as a run's pipes and collector do not:
// two streams per run, which were the gateway's largest allocation per
// subprocess run (and so a good part of its GC work).
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// Copy is io.Copy with a pooled buffer: for a run's output streams. It
// hides src's WriterTo and dst's ReaderFrom, which io.CopyBuffer would
// prefer to the buffer: an *os.File's WriteTo, with no splice to a
// collector, falls back to io.Copy and its own 32 KiB.
func Copy(dst io.Writer, src io.Reader) (int64, error) {
	b := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(b)
	return io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, *b)
}
