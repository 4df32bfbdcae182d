package confirm

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Approval channels (DESIGN.md §15). The page is one channel: it sees every
// approval its approver may see, over the socket. The others are told of
// each held request routed to them (Route: per tenant and per risk level)
// and, when it is resolved, of the outcome. A channel that carries a
// decision back does so through Hub.Decide, like the page: bound to the
// request's digest, first decision wins, single-use.
//
// Delivery runs beside the request, never in its way: a held request is
// published to approvers (page and REST) before any channel hears of it, a
// channel's failure is retried with backoff until the request is resolved,
// and nothing a channel does or fails to do decides a request; the
// approval timeout still denies it.

// Channel is an approval channel the hub notifies (HubOptions.Channels).
type Channel interface {
	// Name identifies the channel in logs, audit records and its
	// callback route.
	Name() string
	// Routes reports whether v is routed to this channel.
	Routes(v View) bool
	// Post tells the channel of a held request (v has its code). ref is
	// what the channel needs to update its message later (Slack's
	// channel and ts). An error is retried, with backoff, until the
	// request is resolved, unless it is Permanent.
	Post(ctx context.Context, v View) (ref string, err error)
	// Resolved tells the channel how a request it was told of ended
	// (v has no code). It is retried like Post, a bounded number of
	// times.
	Resolved(ctx context.Context, ref string, v View) error
}

// CallbackChannel is a channel that carries decisions back over HTTP
// (Slack's interactivity requests). The api mounts Hub.ServeCallback
// unauthenticated: the channel authenticates each request itself.
type CallbackChannel interface {
	Channel
	// ServeCallback answers one callback request; an error is answered
	// by the caller with the API's error body (nothing has been written).
	ServeCallback(w http.ResponseWriter, r *http.Request, hub *Hub) error
}

// Route selects the held requests a channel is told of. The zero Route
// takes every request.
type Route struct {
	// Tenants limits the channel to these tenants' requests; empty means
	// every tenant.
	Tenants []string `json:"tenants,omitempty"`
	// RiskLevels limits it to requests of these risk levels (HIGH,
	// CRITICAL, ...); empty means every level.
	RiskLevels []string `json:"risk_levels,omitempty"`
}

// Match reports whether v is routed.
func (r Route) Match(v View) bool {
	return (len(r.Tenants) == 0 || slices.Contains(r.Tenants, v.Tenant)) &&
		(len(r.RiskLevels) == 0 || slices.ContainsFunc(r.RiskLevels, func(l string) bool { return strings.EqualFold(l, v.RiskLevel) }))
}

// Approver is who a channel's decisions are made as, for a principal
// name: limited to the route's tenants.
func (r Route) Approver(name string) Approver {
	return Approver{Name: name, Role: "approver", Tenants: slices.Clone(r.Tenants)}
}

// PermanentError is a channel failure that retrying cannot fix (a revoked
// token, a channel that does not exist): the delivery stops.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent marks err as not worth retrying.
func Permanent(err error) error { return &PermanentError{Err: err} }

// RetryAfterError asks for a wait of at least After before the next
// attempt (HTTP 429 and 503 with Retry-After).
type RetryAfterError struct {
	Err   error
	After time.Duration
}

func (e *RetryAfterError) Error() string { return e.Err.Error() }
func (e *RetryAfterError) Unwrap() error { return e.Err }

// Channel delivery defaults.
const (
	DefaultChannelRetryMin = 250 * time.Millisecond
	DefaultChannelRetryMax = 10 * time.Second
	// channelResolvedAttempts bounds the attempts at telling a channel of
	// a resolution: the request is over, nobody waits on it.
	channelResolvedAttempts = 8
)

// runChannel delivers p to ch: Post until it succeeds (or the request is
// resolved, or the failure is permanent), then, once p is resolved, its
// outcome. It runs on its own goroutine, one per routed approval and
// channel; nothing waits for it but Close.
func (h *Hub) runChannel(ch Channel, p *pending) {
	defer h.chwg.Done()
	ctx := h.chctx
	log := h.log.With("channel", ch.Name(), "approval_id", p.view.ID)
	var ref string
	posted := false
	for n := 1; !posted; n++ {
		r, err := ch.Post(ctx, p.view)
		if err == nil {
			ref, posted = r, true
			break
		}
		if ctx.Err() != nil {
			return
		}
		if !h.channelRetry(ctx, log, "post", n, err, p.done) {
			break
		}
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		return
	}
	if !posted {
		return // nothing to update
	}
	fin := p.final // written before p.done was closed
	for n := 1; n <= channelResolvedAttempts; n++ {
		err := ch.Resolved(ctx, ref, fin)
		if err == nil || ctx.Err() != nil {
			return
		}
		if !h.channelRetry(ctx, log, "update", n, err, nil) {
			return
		}
	}
	log.Warn("approval channel not told of the resolution; giving up", "attempts", channelResolvedAttempts)
}

// channelRetry logs the n-th failure and waits before the next attempt.
// It returns false when there should be none: a permanent failure, ctx
// ended, or stop closed (the request was resolved).
func (h *Hub) channelRetry(ctx context.Context, log *slog.Logger, what string, n int, err error, stop <-chan struct{}) bool {
	return retryWait(ctx, log, what, n, err, h.opts.ChannelRetryMin, h.opts.ChannelRetryMax, stop)
}

// channelBackoff is min doubling per attempt, less up to a fifth at random,
// at least the receiver's Retry-After, at most max.
func channelBackoff(lo, hi time.Duration, n int, retryAfter time.Duration) time.Duration {
	d := lo
	for i := 1; i < n && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	d -= time.Duration(rand.Int64N(int64(d)/5 + 1))
	return min(max(d, retryAfter), hi)
}

// notifyChannels starts the deliveries of a newly published approval.
func (h *Hub) notifyChannels(p *pending) {
	for _, ch := range h.opts.Channels {
		if !ch.Routes(p.view) {
			continue
		}
		h.chwg.Add(1)
		go h.runChannel(ch, p)
	}
}

// closeChannels waits for the deliveries in flight (the resolutions Close
// just made) until ctx ends, then abandons the rest.
func (h *Hub) closeChannels(ctx context.Context) {
	done := make(chan struct{})
	go func() { h.chwg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		h.chcancel()
		<-done
	}
	h.chcancel()
}

// ErrNoChannel answers a callback for a channel that is not configured (or
// takes no callbacks).
var ErrNoChannel = fmt.Errorf("%w: no such approval channel", ErrNotFound)

// ServeCallback routes a callback request to the channel named name.
func (h *Hub) ServeCallback(w http.ResponseWriter, r *http.Request, name string) error {
	for _, ch := range h.opts.Channels {
		if cb, ok := ch.(CallbackChannel); ok && ch.Name() == name {
			return cb.ServeCallback(w, r, h)
		}
	}
	return ErrNoChannel
}

// Excerpt limits: what a channel shows of the code.
const (
	excerptLines = 20
	excerptBytes = 2000
)

// Excerpt is the start of code as a channel shows it: at most 20 lines and
// 2000 bytes (cut on a rune boundary), and whether anything was left out.
// The page shows the whole code; channels that leave the gateway get only
// this, with the page's link for the rest.
func Excerpt(code string) (string, bool) {
	out, cut := code, false
	if i := nthIndex(out, '\n', excerptLines); i >= 0 && i < len(out)-1 {
		out, cut = out[:i], true
	}
	if len(out) > excerptBytes {
		n := excerptBytes
		for n > 0 && !utf8.RuneStart(out[n]) {
			n--
		}
		out, cut = out[:n], true
	}
	return strings.TrimRight(out, "\n"), cut
}

func nthIndex(s string, c byte, n int) int {
	for i := range len(s) {
		if s[i] == c {
			n--
			if n == 0 {
				return i
			}
		}
	}
	return -1
}

// parseRetryAfter reads a Retry-After header in seconds or as an HTTP date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if s, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
