package mcp

import (
	"context"
	"sync"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// progress sends one call's progress notifications. MCP allows them only
// when the client sent a progress token with its request, and requires the
// progress value to increase with every notification; progress enforces
// both, so callers can report whatever they measure.
//
// It is the one channel for "something is happening" on a call: approvals
// use it now. Output while a program runs (issue 16, item 4) is meant to
// use it too. executors/output's Collector already offers the hook
// (Options.Tap: every kept chunk, in order, masked and under the caps);
// once the streaming work carries it from manager.RunRequest through
// executors.Spec to the Collector, run (tools_run.go) sets it to a function
// that queues each chunk without blocking, and a goroutine like
// approvalWatch's sends them here, coalesced per interval (message: the new
// lines, cut; progress: the bytes so far). The final result stays the
// whole output under the usual caps, so nothing else changes.
type progress struct {
	notify func(ctx context.Context, p *sdk.ProgressNotificationParams) error
	token  any

	mu   sync.Mutex
	last float64
	sent bool
}

func newProgress(c *call) *progress {
	p := &progress{}
	if c.fwd != nil {
		// Forwarded: the replica holding the MCP session relays these.
		if c.fwd.progress {
			p.token, p.notify = "forwarded", c.fwd.notify
		}
		return p
	}
	req := c.req
	if req != nil && req.Params != nil && req.Session != nil {
		p.token = req.Params.GetProgressToken()
		p.notify = req.Session.NotifyProgress
	}
	return p
}

// enabled reports whether the client asked for progress.
func (p *progress) enabled() bool { return p.token != nil && p.notify != nil }

// send notifies value (raised above the last one sent when it is not)
// out of total (0: unknown) with msg. Errors are dropped: a client that
// went away learns nothing more, and its call is cancelled anyway.
func (p *progress) send(ctx context.Context, value, total float64, msg string) {
	if !p.enabled() {
		return
	}
	p.mu.Lock()
	if p.sent && value <= p.last {
		value = p.last + 0.001
	}
	p.last, p.sent = value, true
	if total > 0 && total < value {
		total = value
	}
	p.mu.Unlock()
	_ = p.notify(ctx, &sdk.ProgressNotificationParams{ProgressToken: p.token, Progress: value, Total: total, Message: msg})
}
