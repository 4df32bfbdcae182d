package aio

import (
	"context"
	"errors"
	"time"

	"github.com/sandgate/sandgate/executors"
)

// RunRemote runs a resolved spec (executors.Prologue) on the sandboxd that
// c reaches, whose workspace is /workspace inside the sandbox: the same
// request, caps, spill file and streaming as the pool's runs. It is the
// way in for a tier that places sandboxd itself and only needs the wire
// (executors/k8s: a pod per session, reached through the apiserver).
// The run's cwd is the session's layout workdir (spec.Layout.Dir()); the
// sandbox must show the workspace at the layout's root too. margin is
// added to the run's hard timeout for the HTTP deadline.
func RunRemote(ctx context.Context, c *Client, spec executors.Spec, margin time.Duration) (executors.Result, error) {
	return run(ctx, c, runRequest{dir: workspaceMount, cwd: spec.Layout.Dir(), id: spec.RequestID, lang: spec.Language, code: spec.Code,
		timeout: spec.Timeout, margin: margin, limits: spec.Limits, extended: true, output: spec.Output})
}

// WaitReady waits until the sandboxd behind c answers GET /v1/sandbox, or
// ctx ends (an error wrapping executors.ErrUnavailable).
func WaitReady(ctx context.Context, c *Client) error { return waitReady(ctx, c) }

// NotDelivered reports whether err is a run the sandbox never received
// (the connection was refused): nothing of it ran.
func NotDelivered(err error) bool { return errors.Is(err, errNotDelivered) }

// UnknownOutcome reports whether err is a run whose result the sandbox
// never delivered: the sandbox's state is unknown.
func UnknownOutcome(err error) bool { return errors.Is(err, errUnknownOutcome) }
