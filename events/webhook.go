package events

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// endpoint is a configured webhook, ready to deliver to.
type endpoint struct {
	id      string // endpointID: the key of its rows
	tenant  string
	url     string // as configured, credentials and all: for the request only
	display string // RedactURL(url): for logs and the delivery log
	key     []byte // the HMAC key
	types   []string
}

func newEndpoint(w Webhook) (*endpoint, error) {
	key, err := decodeSecret(w.Secret)
	if err != nil {
		return nil, err
	}
	return &endpoint{
		id:      endpointID(w.Tenant, w.URL),
		tenant:  w.Tenant,
		url:     w.URL,
		display: RedactURL(w.URL),
		key:     key,
		types:   append([]string(nil), w.Types...),
	}, nil
}

// WebhookID is the webhook-id of every delivery of the event with id: the
// same across retries, restarts and replicas, so that receivers can drop
// duplicates.
func WebhookID(id int64) string { return "evt_" + strconv.FormatInt(id, 10) }

// sign is the webhook-signature value of one attempt: Standard Webhooks'
// symmetric scheme, HMAC-SHA256 over "{id}.{timestamp}.{body}".
func sign(key []byte, webhookID string, timestamp int64, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(webhookID))
	mac.Write([]byte{'.'})
	mac.Write([]byte(strconv.FormatInt(timestamp, 10)))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// newClient is the client of the webhook requests: c's transport (the
// default one when c is nil), never following redirects.
func newClient(c *http.Client) *http.Client {
	var out http.Client
	if c != nil {
		out = *c
	} else {
		out.Transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	out.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &out
}

// deliver runs ep's delivery until Close: it takes the endpoint's lease
// when no other replica holds it, delivers in order while it holds it,
// and tries again every third of a lease when it does not.
func (l *Log) deliver(ep *endpoint) {
	defer l.wg.Done()
	ctx := l.ctx
	var scan int64 // how far this replica has looked; 0 until it first holds the lease
	warned := false
	for ctx.Err() == nil {
		through, err := l.store.acquire(ctx, ep.id, l.cfg.Replica, l.cfg.Lease, scan)
		switch {
		case errors.Is(err, errLeaseLost):
			scan = 0 // the holder moves delivered_through; read it when we next hold the lease
			if !sleep(ctx, l.cfg.Lease/3) {
				return
			}
			continue
		case err != nil:
			if ctx.Err() == nil && !warned {
				l.log.Warn("webhook lease not taken; retrying", "endpoint", ep.display, "err", err)
				warned = true
			}
			if !sleep(ctx, l.cfg.RetryMax) {
				return
			}
			continue
		}
		warned = false
		scan = max(scan, through)
		scan, err = l.drain(ctx, ep, scan)
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, errLeaseLost):
			l.log.Info("webhook endpoint taken over by another replica", "endpoint", ep.display)
			scan = 0
		case err != nil:
			l.log.Warn("webhook delivery interrupted; resuming from the recorded progress", "endpoint", ep.display, "err", err)
			scan = 0
			if !sleep(ctx, l.cfg.RetryMin) {
				return
			}
		}
	}
}

// drainBatch is how many events one read of the backlog takes.
const drainBatch = 100

// drain delivers ep's events after scan in order, then waits for more,
// renewing the lease, until the lease is lost, the database fails or
// ctx ends. It returns how far it got.
func (l *Log) drain(ctx context.Context, ep *endpoint, scan int64) (int64, error) {
	renewAt := time.Now().Add(l.cfg.Lease / 3)
	for {
		wake := l.sig.wait()
		evs, err := l.store.since(ctx, ep.tenant == "", ep.tenant, scan, drainBatch)
		if err != nil {
			return scan, fmt.Errorf("read events: %w", err)
		}
		for _, ev := range evs {
			if matchType(ep.types, ev.Type) {
				if err := l.deliverOne(ctx, ep, ev); err != nil {
					return scan, err
				}
				renewAt = time.Now().Add(l.cfg.Lease / 3)
			}
			scan = ev.ID
		}
		if len(evs) == drainBatch {
			continue
		}
		if !time.Now().Before(renewAt) {
			if _, err := l.store.acquire(ctx, ep.id, l.cfg.Replica, l.cfg.Lease, scan); err != nil {
				return scan, err
			}
			renewAt = time.Now().Add(l.cfg.Lease / 3)
		}
		if len(evs) > 0 {
			continue
		}
		t := time.NewTimer(time.Until(renewAt))
		select {
		case <-wake:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		if ctx.Err() != nil {
			return scan, ctx.Err()
		}
	}
}

// deliverOne sends ev to ep until a 2xx answers, waiting between attempts
// as backoff says. It returns nil once delivered, errLeaseLost if another
// replica took the endpoint over, or ctx's error.
func (l *Log) deliverOne(ctx context.Context, ep *endpoint, ev Event) error {
	body, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("encode event %d: %w", ev.ID, err)
	}
	id := WebhookID(ev.ID)
	for n := 1; ; n++ {
		at := time.Now()
		pctx, cancel := context.WithCancelCause(ctx)
		stop := l.keepLease(pctx, cancel, ep)
		status, errText, retryAfter := l.post(pctx, ep, id, body)
		stop()
		interrupted := context.Cause(pctx)
		cancel(nil)
		if status == 0 && interrupted != nil {
			// Close, or the loss of the lease, interrupted the attempt:
			// not an attempt to record.
			return interrupted
		}
		a := attempt{endpoint: ep, event: ev, webhookID: id, at: at, status: status, errText: errText,
			delivered: status >= 200 && status <= 299}
		var wait time.Duration
		if !a.delivered {
			wait = l.backoff(n, retryAfter)
			a.next = time.Now().Add(wait)
		}
		// Record even if Close came during a successful attempt: a
		// delivery recorded is one not sent again.
		wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.WriteTimeout)
		err := l.store.record(wctx, l.cfg.Replica, l.cfg.Lease, a)
		wcancel()
		if err != nil {
			if errors.Is(err, errLeaseLost) {
				return err
			}
			return fmt.Errorf("record attempt on event %d: %w", ev.ID, err)
		}
		if a.delivered {
			if n > 1 {
				l.log.Info("webhook delivered after failed attempts", "endpoint", ep.display, "event_id", ev.ID,
					"webhook_id", id, "attempts", n)
			}
			return nil
		}
		// The first failure of an event is a warning; the retries of an
		// outage are debug lines (the delivery log counts them), so
		// that a receiver down for a day does not flood the log.
		level := slog.LevelDebug
		if n == 1 {
			level = slog.LevelWarn
		}
		l.log.Log(ctx, level, "webhook delivery failed; retrying", "endpoint", ep.display, "event_id", ev.ID,
			"webhook_id", id, "attempt", n, "status", status, "err", errText, "retry_in", wait.Round(time.Millisecond))
		if err := l.waitRenewing(ctx, ep, wait); err != nil {
			return err
		}
	}
}

// keepLease renews ep's lease every third of a lease while an attempt is
// in flight (a receiver may take up to Config.Timeout to answer, longer
// than a lease), until stop is called. If another replica holds the lease
// it cancels the attempt with errLeaseLost.
func (l *Log) keepLease(ctx context.Context, cancel context.CancelCauseFunc, ep *endpoint) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(l.cfg.Lease / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				if _, err := l.store.acquire(ctx, ep.id, l.cfg.Replica, l.cfg.Lease, 0); errors.Is(err, errLeaseLost) {
					cancel(errLeaseLost)
					return
				}
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// waitRenewing waits d, renewing ep's lease as it goes when d is longer
// than a third of the lease.
func (l *Log) waitRenewing(ctx context.Context, ep *endpoint, d time.Duration) error {
	end := time.Now().Add(d)
	for {
		left := time.Until(end)
		if left <= 0 {
			return nil
		}
		step := min(left, l.cfg.Lease/3)
		if !sleep(ctx, step) {
			return ctx.Err()
		}
		if step < left {
			if _, err := l.store.acquire(ctx, ep.id, l.cfg.Replica, l.cfg.Lease, 0); err != nil {
				return err
			}
		}
	}
}

// backoff is the wait after the n-th failed attempt of an event:
// RetryMin doubling per attempt, less up to a fifth at random (so that
// endpoints failing together spread out), at least the receiver's
// Retry-After, and never above RetryMax.
func (l *Log) backoff(n int, retryAfter time.Duration) time.Duration {
	d := l.cfg.RetryMin
	for i := 1; i < n && d < l.cfg.RetryMax; i++ {
		d *= 2
	}
	d = min(d, l.cfg.RetryMax)
	d -= time.Duration(rand.Int64N(int64(d)/5 + 1))
	return min(max(d, retryAfter), l.cfg.RetryMax)
}

// post makes one attempt. status is 0 when no answer came; errText is a
// short reason safe to store and show (no URL, no secret).
func (l *Log) post(ctx context.Context, ep *endpoint, webhookID string, body []byte) (status int, errText string, retryAfter time.Duration) {
	actx, cancel := context.WithTimeout(ctx, l.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, ep.url, bytes.NewReader(body))
	if err != nil {
		return 0, "cannot build the request", 0
	}
	ts := time.Now().Unix()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "sandgate-events")
	req.Header.Set("webhook-id", webhookID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", sign(ep.key, webhookID, ts, body))
	resp, err := l.client.Do(req)
	if err != nil {
		return 0, shortError(err, actx), 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		return resp.StatusCode, "", 0
	}
	return resp.StatusCode, "HTTP " + resp.Status, parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
}

// maxErrText bounds a stored error.
const maxErrText = 200

// shortError describes a failed request without its URL, which
// *url.Error would quote, credentials and all.
func shortError(err error, ctx context.Context) string {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return "timed out"
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return truncate(strings.TrimSpace(err.Error()), maxErrText)
}

// parseRetryAfter reads a Retry-After header: seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// sleep waits d or until ctx ends; false when ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
