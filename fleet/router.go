package fleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sandgate/sandgate/errcode"
)

// Router sends each session request to the replica that owns the session
// (the api package calls it once the caller is authenticated and the
// session resolved to its key).
type Router struct {
	reg       *Registry
	key       []byte
	transport http.RoundTripper
	log       *slog.Logger
}

// Errors a routed request may end with.
var (
	errUnreachable = errcode.New(errcode.SessionUnavailable,
		"the replica serving this session does not answer and still holds its lease; retry shortly")
	errForward  = errcode.New(errcode.ReplicaUnavailable, "the replica serving this session failed while answering")
	errMoved    = errcode.New(errcode.ReplicaUnavailable, "this session moved to another replica; retry")
	errRegistry = errcode.New(errcode.SessionUnavailable, "the session registry is unreachable")
)

// NewRouter builds the Router of reg's replica.
func NewRouter(ctx context.Context, reg *Registry, log *slog.Logger) (*Router, error) {
	key, err := reg.forwardKey(ctx)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil // replica to replica, never through an environment proxy
	t.MaxIdleConnsPerHost = 64
	t.ResponseHeaderTimeout = 0 // a run (or an approval) may take long; the owner bounds it
	return &Router{reg: reg, key: key, transport: t, log: log}, nil
}

// Forwarded verifies r's hop: ok when another replica of this fleet
// forwarded it, with the request id that replica gave it.
func (rt *Router) Forwarded(r *http.Request) (requestID string, ok bool) {
	if r.Header.Get(HopHeader) == "" {
		return "", false
	}
	hop, ok := verifyHop(rt.key, r, time.Now())
	if !ok {
		rt.log.DebugContext(r.Context(), "fleet hop header failed verification; treated as a client request")
		return "", false
	}
	return hop.RequestID, true
}

// Route serves r on the owner of session key when that is another live
// replica, and reports true; false means this replica serves it (it owns
// the session or just adopted it). A non-nil error is the answer to send
// (nothing was written yet). A request another replica forwarded
// (forwarded) is never forwarded again: if the session moved meanwhile,
// it is answered 503 replica_unavailable, worth a retry.
//
// An owner that refuses connections (killed, or shutting down) is waited
// for until its lease expires (at most twice the lease), and the session
// is then adopted here or by whichever replica claimed it: the client
// sees a slow answer, not an error.
func (rt *Router) Route(w http.ResponseWriter, r *http.Request, key, requestID string, forwarded bool) (bool, error) {
	ctx := r.Context()
	owner, err := rt.reg.Claim(ctx, key)
	if err != nil {
		return false, fmt.Errorf("%w: %w", errRegistry, err)
	}
	deadline := time.Now().Add(2 * rt.reg.opts.Lease)
	for {
		if owner.Local {
			if owner.AdoptedFrom != "" {
				rt.log.WarnContext(ctx, "session adopted from a replica whose lease expired",
					"session_id", key, "from", owner.AdoptedFrom, "request_id", requestID)
			}
			return false, nil
		}
		if forwarded {
			return false, errMoved
		}
		if owner.URL != "" {
			sent, err := rt.forward(w, r, owner, requestID)
			if sent {
				return true, err
			}
			rt.log.WarnContext(ctx, "the session's replica refuses connections; waiting for its lease",
				"session_id", key, "owner", owner.Replica, "err", err)
		}
		if owner, err = rt.waitOwner(ctx, key, owner, deadline); err != nil {
			return false, err
		}
	}
}

// waitOwner polls the registry until the session's owner is no longer
// gone (the replica at that address): its lease expired and the session
// was claimed, here or elsewhere, or it came back at a new address.
func (rt *Router) waitOwner(ctx context.Context, key string, gone Owner, deadline time.Time) (Owner, error) {
	for {
		if time.Now().After(deadline) {
			return Owner{}, errUnreachable
		}
		select {
		case <-ctx.Done():
			return Owner{}, context.Cause(ctx)
		case <-time.After(rt.reg.opts.Lease / 10):
		}
		o, err := rt.reg.Claim(ctx, key)
		if err != nil {
			return Owner{}, fmt.Errorf("%w: %w", errRegistry, err)
		}
		if o.Local || o.Replica != gone.Replica || o.URL != gone.URL {
			return o, nil
		}
	}
}

// forward proxies r to owner, streaming both ways. sent reports whether
// any of the request reached the owner: when nothing did (the connection
// was refused), the caller may route the request elsewhere.
//
// A kept-alive connection to an owner that has just died is still in the
// pool for a moment, and writing the request on it fails with EPIPE: the
// owner had closed it before it had the whole request, so it acted on
// none of it. The request is then sent once more on a new connection (the
// idle ones are dropped), its body replayed from what was read of it; a
// dead owner then refuses the connection, which the caller handles.
func (rt *Router) forward(w http.ResponseWriter, r *http.Request, owner Owner, requestID string) (sent bool, err error) {
	sent, err = rt.forwardOnce(w, r, owner, requestID)
	if !errors.Is(err, errDropped) {
		return sent, err
	}
	if t, ok := rt.transport.(interface{ CloseIdleConnections() }); ok {
		t.CloseIdleConnections()
	}
	sent, err = rt.forwardOnce(w, r, owner, requestID)
	if errors.Is(err, errDropped) {
		return true, errForward
	}
	return sent, err
}

// errDropped: the owner closed the connection before it had the request
// (forward), and the body that was read is at hand to send again.
var errDropped = errors.New("fleet: the owner closed the connection before it had the request")

// replayMax bounds what forward keeps of a body to send it again: the
// JSON of a run or a command, not a large upload.
const replayMax = 1 << 20

func (rt *Router) forwardOnce(w http.ResponseWriter, r *http.Request, owner Owner, requestID string) (sent bool, err error) {
	target, err := url.Parse(owner.URL)
	if err != nil {
		return false, fmt.Errorf("%w: bad address %q: %w", errForward, owner.URL, err)
	}
	body := &countingBody{r: r.Body}
	in := r.Clone(r.Context())
	in.Body = body
	var proxyErr error
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = target.Host
			pr.Out.Header.Del(HopHeader)
			if pr.Out.Body != nil && pr.Out.Body != http.NoBody {
				// The transport retries a request on a kept-alive
				// connection the owner closed before anything was
				// written, if it can get the body again: only a body
				// nothing was read from yet is handed back.
				pr.Out.GetBody = func() (io.ReadCloser, error) {
					if body.n.Load() == 0 {
						return body, nil
					}
					return nil, errBodySent
				}
			}
			pr.Out.Header.Del("X-Request-Id")
			pr.SetXForwarded()
			signHop(rt.key, pr.Out, rt.reg.opts.Replica, requestID, time.Now())
		},
		Transport:     rt.transport,
		FlushInterval: -1, // streamed runs (x-ndjson) pass each event on at once
		ModifyResponse: func(res *http.Response) error {
			// This replica already stamped the response with the same id.
			res.Header.Del("X-Request-Id")
			return nil
		},
		ErrorHandler: func(_ http.ResponseWriter, _ *http.Request, err error) { proxyErr = err },
		ErrorLog:     slog.NewLogLogger(rt.log.Handler(), slog.LevelWarn),
	}
	// The owner bounds its own response (write timeout, stream deadlines);
	// this replica's write deadline would cut a long run it only relays.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
	p.ServeHTTP(w, in)
	if proxyErr == nil {
		return true, nil
	}
	if refused(proxyErr) && body.n.Load() == 0 {
		return false, errUnreachable
	}
	if errors.Is(proxyErr, syscall.EPIPE) {
		if rest, ok := body.replay(); ok {
			r.Body = rest
			return false, errDropped
		}
	}
	if rt.gone(r.Context(), target) {
		// The owner died while it had the request (kill -9, a lost host):
		// its connection was reset or closed with no answer, and it now
		// refuses connections. If it had not started the request's work
		// (no write-ahead audit record of it: every run and every
		// workspace change writes one before it starts), the request is
		// served where the session is adopted once the owner's lease
		// lapses, as one that found the owner already dead would be. If
		// it had, the work may have happened: it is never run twice.
		if started, err := rt.startedOn(r.Context(), owner.Replica, requestID); err != nil || started {
			rt.log.WarnContext(r.Context(), "the session's replica died while running the request; not run again",
				"owner", owner.Replica, "err", err)
			return true, errDiedRunning
		}
		if rest, ok := body.replay(); ok {
			r.Body = rest
			rt.log.WarnContext(r.Context(), "the session's replica died while answering; waiting for its lease",
				"owner", owner.Replica, "err", proxyErr)
			return false, errUnreachable
		}
	}
	if errors.Is(proxyErr, context.Canceled) && r.Context().Err() != nil {
		return true, r.Context().Err()
	}
	rt.log.WarnContext(r.Context(), "forwarding to the session's replica failed", "owner", owner.Replica, "err", proxyErr)
	return true, errForward
}

var errBodySent = errors.New("fleet: the body was already sent")

var errDiedRunning = errcode.New(errcode.ReplicaUnavailable,
	"the replica serving this session died while running this request: it may have run (its audit record says interrupted), and it was not run again")

// startedOn reports whether replica wrote an audit record for requestID:
// it started the request's work. Only the replica's newest records are
// read (startedWindow): a request in flight when its replica died is
// among them.
func (rt *Router) startedOn(ctx context.Context, replica, requestID string) (bool, error) {
	if requestID == "" {
		return true, nil // cannot tell: assume it ran
	}
	var found bool
	err := rt.reg.db.DB().QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM (SELECT request_id FROM records
	WHERE replica = $1 ORDER BY id DESC LIMIT $3) newest WHERE request_id = $2)`, replica, requestID, startedWindow).Scan(&found)
	if err != nil {
		return false, fmt.Errorf("fleet: read the dead replica's audit records: %w", err)
	}
	return found, nil
}

// startedWindow bounds startedOn's read of a dead replica's records.
const startedWindow = 10000

// gone reports whether the replica at target refuses new connections
// within goneWait: it is not running there any more. A process killed
// while it answered resets its connections before its listener is gone,
// so one accepted dial is not proof it lives; an owner that keeps
// accepting for goneWait is alive and the failure was its own.
func (rt *Router) gone(ctx context.Context, target *url.URL) bool {
	deadline := time.Now().Add(goneWait)
	for {
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		var d net.Dialer
		c, err := d.DialContext(dctx, "tcp", target.Host)
		cancel()
		if errors.Is(err, syscall.ECONNREFUSED) {
			return true
		}
		// Anything else (accepted; reset by a listener closing under the
		// dial; no answer, which a host that may still be running the
		// request also gives) is no proof: look again until goneWait.
		if c != nil {
			_ = c.Close()
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(goneWait / 20):
		}
	}
}

// goneWait bounds how long gone watches an owner that reset a forwarded
// request for the end of its process.
const goneWait = 2 * time.Second

// refused is a connection the owner's host refused or could not be
// reached at all: nothing was sent.
func refused(err error) bool {
	var op *net.OpError
	return errors.Is(err, syscall.ECONNREFUSED) || (errors.As(err, &op) && op.Op == "dial")
}

// countingBody counts what the proxy read of the client's body, and
// keeps the body open when the transport closes it, so that a request
// whose owner refused the connection can still be served here. It keeps
// a copy of the first replayMax bytes read, for replay.
type countingBody struct {
	r    io.ReadCloser
	n    atomic.Int64
	mu   sync.Mutex
	kept []byte
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.mu.Lock()
	if total := b.n.Load() + int64(n); total <= replayMax {
		b.kept = append(b.kept, p[:n]...)
	}
	b.mu.Unlock()
	b.n.Add(int64(n))
	return n, err
}

// replay returns the whole body again: what was read, then the rest.
// False when more than replayMax bytes were read.
func (b *countingBody) replay() (io.ReadCloser, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.n.Load() > replayMax {
		return nil, false
	}
	return readCloser{io.MultiReader(bytes.NewReader(b.kept), b.r), b.r}, true
}

type readCloser struct {
	io.Reader
	io.Closer
}

func (b *countingBody) Close() error { return nil }

// Release forgets this replica's ownership of a deleted session.
func (rt *Router) Release(ctx context.Context, key string) error { return rt.reg.Release(ctx, key) }

// PeerApproval fetches, from replica, the pending approval id it holds,
// as the JSON its API serves (GET /v1/fleet/approvals/{id}, reachable
// with a signed hop only).
func (rt *Router) PeerApproval(ctx context.Context, replica, id string) ([]byte, error) {
	var base string
	err := rt.reg.db.DB().QueryRowContext(ctx, `SELECT url FROM replicas WHERE name = $1 AND lease_until > now()`, replica).Scan(&base)
	if err != nil {
		return nil, fmt.Errorf("fleet: find replica %q: %w", replica, err)
	}
	if base == "" {
		return nil, fmt.Errorf("fleet: replica %q has no address yet", replica)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/fleet/approvals/"+url.PathEscape(id), nil)
	if err != nil {
		return nil, err
	}
	signHop(rt.key, req, rt.reg.opts.Replica, "", time.Now())
	res, err := rt.transport.RoundTrip(req)
	if err != nil {
		return nil, fmt.Errorf("fleet: ask replica %q: %w", replica, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 4<<20))
	if err != nil {
		return nil, err
	}
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fleet: replica %q answered %d", replica, res.StatusCode)
	}
	return body, nil
}
