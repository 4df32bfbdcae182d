package executors

import (
	"context"
	"io"
)

// CapDetached names the capability of a backend that can hold a run
// beyond its request (DetachedHost).
const CapDetached = "detached"

// DetachedHost is implemented by backends that can start a run which
// outlives the request that started it (E2B's background commands, an
// agent's server called by its later commands). The manager decides the
// run exactly as a blocking one; the backend starts it and returns at
// once.
//
// The run lives until its program exits, its Spec.Timeout passes, Kill,
// or the session's release (ReleaseSession), whichever comes first; ctx
// only bounds the start. Output reaches Spec.Output as Execute's does,
// within the same caps, and the Result Wait returns is the whole answer.
//
// stdin keeps the program's standard input open for Detached.Stdin;
// without it the program reads EOF, and the backend may serve the run
// as it serves a blocking one (a warm container, say).
type DetachedHost interface {
	StartDetached(ctx context.Context, spec Spec, stdin bool) (Detached, error)
}

// Detached is one started detached run.
type Detached interface {
	// Stdin writes to the program's standard input; Close gives it EOF.
	// Writes block while the program does not read (a pipe's back
	// pressure) and fail once it has exited.
	Stdin() io.WriteCloser
	// Kill ends the run now (its whole process tree); Wait then returns
	// exit code 137.
	Kill()
	// Wait blocks until the run has ended and returns its result.
	Wait() (Result, error)
}
