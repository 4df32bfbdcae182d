package output

import "sync"

// DefaultQueueChunks is the number of waiting chunks past which a Queue
// merges every new chunk into its stream's last waiting one.
const DefaultQueueChunks = 256

// Queue carries a run's chunks from a Collector's Tap, which must not
// block, to one consumer that may: a streaming HTTP response whose client
// reads slowly, or a sandbox server relaying its output to the gateway.
//
// Push never blocks and never drops bytes, so backpressure stops at the
// consumer and never reaches the program. Memory stays bounded all the
// same, because what passes the Tap is already capped: a Queue never holds
// more bytes than the response will. What a slow consumer loses is
// granularity: a chunk that arrives while the last waiting chunk is of the
// same stream joins it, so a consumer that falls behind gets fewer, larger
// chunks; and once MaxChunks chunks wait (stdout and stderr alternating), a
// new chunk joins the last waiting chunk of its own stream, which keeps
// each stream's order but makes the order across the two approximate.
// A merged chunk keeps the Seq of its first part.
type Queue struct {
	mu      sync.Mutex
	max     int
	pending []Chunk
	ready   chan struct{} // holds a token while pending is not empty
}

// NewQueue returns an empty Queue; maxChunks <= 0 means
// DefaultQueueChunks.
func NewQueue(maxChunks int) *Queue {
	if maxChunks <= 0 {
		maxChunks = DefaultQueueChunks
	}
	return &Queue{max: maxChunks, ready: make(chan struct{}, 1)}
}

// Push queues a copy of c. It is a Tap: it never blocks.
func (q *Queue) Push(c Chunk) {
	if len(c.Data) == 0 {
		return
	}
	q.mu.Lock()
	if i := q.joinable(c.Stream); i >= 0 {
		q.pending[i].Data = append(q.pending[i].Data, c.Data...)
	} else {
		c.Data = append([]byte(nil), c.Data...)
		q.pending = append(q.pending, c)
	}
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// joinable returns the index of the waiting chunk a new chunk of stream s
// joins, or -1 when it gets its own.
func (q *Queue) joinable(s Stream) int {
	n := len(q.pending)
	if n == 0 {
		return -1
	}
	if q.pending[n-1].Stream == s {
		return n - 1
	}
	if n < q.max {
		return -1
	}
	for i := n - 1; i >= 0; i-- {
		if q.pending[i].Stream == s {
			return i
		}
	}
	return -1
}

// Ready returns a channel that receives a value after Push: a consumer
// waits on it, then calls Take. A value may be stale (Take returns
// nothing then).
func (q *Queue) Ready() <-chan struct{} { return q.ready }

// Take returns every waiting chunk, in order, and empties the Queue. The
// chunks' Data belong to the caller.
func (q *Queue) Take() []Chunk {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.pending
	q.pending = nil
	return out
}
