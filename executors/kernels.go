package executors

import (
	"context"
	"encoding/json"
)

// Bundle is one display output of a stateful run, as Jupyter's messaging
// protocol carries it: MIME type → value, verbatim from the kernel
// (text/plain and text/html as strings, image/png as base64 text,
// application/json as a JSON value). Keeping the raw JSON means the
// gateway never re-encodes a figure on its way to the client.
type Bundle map[string]json.RawMessage

// Text returns the bundle's value for mime when it is a JSON string.
func (b Bundle) Text(mime string) (string, bool) {
	raw, ok := b[mime]
	if !ok {
		return "", false
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

// CellResult is what a stateful run adds to its Result.
type CellResult struct {
	// Results are the display outputs, in order: each display_data and
	// the execute_result (the last expression's value) as a MIME bundle.
	// Bundles over the run's result budget are dropped and the Result's
	// Truncated is set.
	Results []Bundle
	// KernelRestarted is set when the session's kernel was (re)started
	// for this run after an earlier one had died or gone idle, or during
	// it (a cell that ignored its interrupt): the state the earlier
	// cells left is gone.
	KernelRestarted bool
}

// KernelHost is implemented by backends whose capabilities include
// kernels. RestartKernel replaces the session's kernel with a fresh one
// (its state is lost) and reports whether the session had one; a
// session without a kernel is left alone. ReleaseSession (see
// SessionReleaser) kills the kernel for good.
type KernelHost interface {
	RestartKernel(ctx context.Context, sessionID string) (bool, error)
}
