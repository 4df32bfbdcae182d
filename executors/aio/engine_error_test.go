package aio

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/sandgate/sandgate/executors"
)

// TestEngineErrorIsUnavailable: whatever the engine answers to a create or
// start (here what an engine shutting down said during issue 21's soak),
// the run gets executor_unavailable, not internal; a cancelled call keeps
// its context error.
func TestEngineErrorIsUnavailable(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want bool // executors.ErrUnavailable: the manager's 503 executor_unavailable
	}{
		{"engine stopping", errors.New("Error response from daemon: failed to update store for object type *libnetwork.endpoint: open : no such file or directory"), true},
		{"runtime failure", errors.New("Error response from daemon: OCI runtime create failed"), true},
		{"cancelled", fmt.Errorf("post: %w", context.Canceled), false},
		{"deadline", fmt.Errorf("post: %w", context.DeadlineExceeded), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := engineError("start container", c.err)
			if got := errors.Is(err, executors.ErrUnavailable); got != c.want {
				t.Errorf("unavailable %v, want %v (%v)", got, c.want, err)
			}
			if !errors.Is(err, c.err) {
				t.Error("the engine's error is not wrapped")
			}
		})
	}
}
