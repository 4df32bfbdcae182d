package egress

import (
	"io"
	"sync"
)

// prefetchAbove is the response size from which an intercepted body is
// read ahead: the decryption of the server's TLS then runs beside the
// encryption of the client's, instead of taking turns with it on one
// goroutine (a download from an inspected host does twice the TLS work
// of a direct one).
const prefetchAbove = 256 << 10

// prefetchChunks is how many chunks may wait between the two.
const prefetchChunks = 4

type chunk struct {
	b   []byte
	err error
}

// prefetchReader reads its source ahead on a goroutine of its own, which
// ends at the source's end or error, or at Close.
type prefetchReader struct {
	src    io.ReadCloser
	chunks chan chunk
	free   chan []byte
	done   chan struct{}
	exited chan struct{} // closed when fill returns
	once   sync.Once
	cur    chunk
	off    int
}

func newPrefetchReader(src io.ReadCloser) *prefetchReader {
	p := &prefetchReader{src: src, chunks: make(chan chunk, prefetchChunks), free: make(chan []byte, prefetchChunks+1),
		done: make(chan struct{}), exited: make(chan struct{})}
	for range prefetchChunks + 1 {
		p.free <- make([]byte, relayBufferBytes)
	}
	go p.fill()
	return p
}

func (p *prefetchReader) fill() {
	defer close(p.exited)
	for {
		var b []byte
		select {
		case b = <-p.free:
		case <-p.done:
			return
		}
		n, err := p.src.Read(b)
		select {
		case p.chunks <- chunk{b: b[:n], err: err}:
		case <-p.done:
			return
		}
		if err != nil {
			return
		}
	}
}

func (p *prefetchReader) Read(b []byte) (int, error) {
	for p.off >= len(p.cur.b) {
		if p.cur.err != nil {
			return 0, p.cur.err
		}
		if p.cur.b != nil {
			p.free <- p.cur.b[:cap(p.cur.b)]
		}
		p.cur, p.off = <-p.chunks, 0
		if p.cur.b == nil {
			p.cur.b = []byte{}
		}
	}
	n := copy(b, p.cur.b[p.off:])
	p.off += n
	return n, nil
}

// Close stops the read-ahead and closes the source once nothing reads
// it. A read still blocked on the source (a body given up half way) ends
// with the connection, which the caller closes: the source is not
// closed under it.
func (p *prefetchReader) Close() error {
	p.once.Do(func() { close(p.done) })
	select {
	case <-p.exited:
		return p.src.Close()
	default:
		return nil
	}
}
