package main

import (
	"encoding/json"
	"net/http"

	"github.com/sandgate/sandgate/executors/aio/aiowire"
	"github.com/sandgate/sandgate/executors/output"
)

// relay is a streamed answer (x_sandgate.stream, DESIGN.md §10: "for aio,
// sandboxd streams too"): the job's output, as its Collector keeps it, is
// written to the caller one aiowire.StreamEvent per line while the job
// runs, and the envelope the call would have answered comes last.
//
// The Collector's tap only queues (output.Queue): a caller that reads
// slowly gets fewer, larger chunks and never stalls the program, and the
// queue holds at most what the response keeps (output_limit per stream).
// Everything before the job starts (validation, a bad cwd) is answered as
// without streaming, so the AIO-compatible API is unchanged for every
// caller that does not ask.
type relay struct {
	q   *output.Queue
	enc *json.Encoder
	rc  *http.ResponseController
	err error // the first write error: the caller is gone
	// seq numbers the events this answer sends, 1, 2, … across both
	// streams. The collector's own numbers skip where the queue merged
	// chunks for a slow reader, and a reader takes a gap for a lost event
	// (the gateway's and the aio executor's streams number theirs so too).
	seq uint64
}

// newRelay returns a relay when x asks for a streamed answer, else nil.
func newRelay(x *runExtension) *relay {
	if x == nil || !x.Stream {
		return nil
	}
	return &relay{q: output.NewQueue(0)}
}

// tap is the job's jobSpec.tap (nil for a nil relay).
func (rl *relay) tap() func(output.Chunk) {
	if rl == nil {
		return nil
	}
	return rl.q.Push
}

// run starts the answer and relays j's output until j is done or the
// caller goes away (its request ends or a write fails). finished reports
// j done; gone reports the caller gone.
func (rl *relay) run(w http.ResponseWriter, r *http.Request, j *job) (finished, gone bool) {
	w.Header().Set("Content-Type", aiowire.StreamMediaType)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	rl.enc = json.NewEncoder(w)
	rl.enc.SetEscapeHTML(false)
	rl.rc = http.NewResponseController(w)
	rl.err = rl.rc.Flush()
	for rl.err == nil {
		select {
		case <-rl.q.Ready():
			rl.send()
		case <-j.done:
			return true, false
		case <-r.Context().Done():
			return false, true
		}
	}
	return false, true
}

// send writes the waiting chunks and flushes them.
func (rl *relay) send() {
	chunks := rl.q.Take()
	for _, c := range chunks {
		if rl.err == nil {
			rl.seq++
			rl.err = rl.enc.Encode(aiowire.StreamEvent{Seq: rl.seq, Stream: c.Stream.String(), Data: c.Data})
		}
	}
	if len(chunks) > 0 && rl.err == nil {
		rl.err = rl.rc.Flush()
	}
}

// finish writes the chunks still waiting and then the envelope of data,
// the last line.
func (rl *relay) finish(data any) {
	rl.send()
	raw, err := json.Marshal(envelope{Success: true, Message: ptr(msgOK), Data: data})
	if err != nil || rl.err != nil {
		return // no Result line: the caller treats the outcome as unknown
	}
	if rl.err = rl.enc.Encode(aiowire.StreamEvent{Result: raw}); rl.err == nil {
		rl.err = rl.rc.Flush()
	}
}
