package aio

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/sandgate/sandgate/executors/aio/aiowire"
)

// errNotReleased marks a held run whose release failed (the manager's
// write-ahead record could not be written, or the request ended first):
// the sandbox discarded it before it ran anything, and the instance is as
// it was.
var errNotReleased = errors.New("held run not released")

// heldBody is a held run's request body (aiowire.HoldHeader): the JSON
// object at once, then, once release returns nil, aiowire.Release and the
// body's end. A release that fails breaks the body instead, so the server
// discards the run, which never started.
type heldBody struct {
	*io.PipeReader
	done chan struct{} // closed once release has answered
	err  error         // release's error, set before done closes
}

// newHeldBody starts the writer. The caller closes the body when its call
// returns, which ends a writer still waiting to write.
func newHeldBody(ctx context.Context, object []byte, release func(context.Context) error) *heldBody {
	pr, pw := io.Pipe()
	h := &heldBody{PipeReader: pr, done: make(chan struct{})}
	go func() {
		if _, err := pw.Write(object); err != nil {
			return // the call is over: nobody reads
		}
		err := release(ctx)
		if err != nil {
			h.err = fmt.Errorf("aio: %w: %w", errNotReleased, err)
		}
		close(h.done)
		if err != nil {
			_ = pw.CloseWithError(h.err)
			return
		}
		if _, err := pw.Write([]byte{aiowire.Release}); err == nil {
			_ = pw.Close()
		}
	}()
	return h
}

// failed returns release's error, if it has answered with one: what
// became of the call then is the run discarded, whatever the transport
// made of the broken body.
func (h *heldBody) failed() error {
	select {
	case <-h.done:
		return h.err
	default:
		return nil
	}
}
