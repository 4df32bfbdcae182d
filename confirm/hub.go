package confirm

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/sandgate/sandgate/errcode"
)

// Defaults for HubOptions.
const (
	DefaultTimeout      = 120 * time.Second
	DefaultSendBuffer   = 256
	DefaultPingInterval = 25 * time.Second
	DefaultWriteTimeout = 10 * time.Second
	DefaultHistorySize  = 50
)

// Errors of the hub. Those with a code map to the API's error body through
// errcode.Of.
var (
	ErrNotFound        = errcode.New(errcode.NotFound, "no such approval")
	ErrAlreadyDecided  = errcode.New(errcode.Conflict, "the approval was already resolved")
	ErrDigestMismatch  = errcode.New(errcode.Conflict, "the approval does not match the request you reviewed")
	ErrInvalidDecision = errcode.New(errcode.InvalidRequest, `decision must be "approve" or "deny"`)
	ErrInvalidScope    = errcode.New(errcode.InvalidRequest, `scope must be "once"; "session" for an egress approval; "session" or "pattern" with for_s for a run's grant`)
	ErrReasonTooLong   = errcode.New(errcode.InvalidRequest, "the reason is longer than 1000 bytes")
	ErrNoIdentity      = errcode.New(errcode.Forbidden, "a decision needs an approver's identity")
	ErrOrigin          = errcode.New(errcode.Forbidden, "cross-origin WebSocket connections are refused")
	// ErrClosed is returned once Close has begun: new approvals cannot be
	// asked for (the manager denies them as approval_unavailable) and no
	// new socket is accepted.
	ErrClosed = errcode.New(errcode.ApprovalUnavailable, "the approval service is shutting down")
	// ErrCodeMismatch is returned by Confirm when the request's CodeSHA256
	// is not the hash of its Code: the approver would see one program
	// while the digest bound another.
	ErrCodeMismatch = errors.New("confirm: code_sha256 does not match the code")
)

// ConflictError is returned by Decide when the approval was already
// resolved. It carries the approval's final state so the caller can say who
// decided (and how) first.
type ConflictError struct {
	Approval View
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("confirm: approval %s already %s", e.Approval.ID, e.Approval.Status)
}

// Unwrap makes the error map to 409 conflict.
func (e *ConflictError) Unwrap() error { return ErrAlreadyDecided }

// HubOptions configures NewHub. Store is required; every other field has a
// default.
type HubOptions struct {
	// Store is the audit database (an *audit.SQLite): the hub keeps its
	// approvals table there.
	Store Store
	// Timeout applies to a Request without a Deadline. Default 120 s. The
	// manager always sets Deadline (from its own approval timeout).
	Timeout time.Duration
	// Logger receives lifecycle and decision events. Code is never logged.
	Logger *slog.Logger
	// AllowedOrigins are extra browser origins ("https://gate.example.com")
	// accepted on the socket besides the gateway's own, for deployments
	// behind a TLS-terminating proxy. See CheckOrigin.
	AllowedOrigins []string
	// SendBuffer is how many outgoing messages may queue per connection
	// before the connection is dropped as too slow. Default 256.
	SendBuffer int
	// PingInterval is the keepalive period; a connection that has not
	// answered (pong or any message) within two intervals is closed.
	// Default 25 s.
	PingInterval time.Duration
	// WriteTimeout bounds one write to a socket and one database write.
	// Default 10 s.
	WriteTimeout time.Duration
	// HistorySize is how many recent decisions the page is given on
	// connect. Default 50.
	HistorySize int
	// Replica names this process among the replicas sharing Store; its
	// start-up sweep interrupts only this replica's leftovers. Default
	// "local".
	Replica string
	// ListenDSN, on PostgreSQL, is the DSN of the connection the hub
	// LISTENs on for other replicas' decisions (NotifyChannel); empty
	// disables it (one process).
	ListenDSN string
	// Peer, in a fleet, fetches other replicas' pending approvals (with
	// their code) so that this hub's approvers see and decide them too;
	// nil shows only the approvals held here.
	Peer Peer
	// Channels are told of every held request routed to them, besides
	// the page (see Channel). The replica holding a request tells them,
	// and updates them when the request is resolved, wherever it was
	// decided.
	Channels []Channel
	// ChannelRetryMin and ChannelRetryMax bound the backoff between a
	// channel's failed attempts. Defaults DefaultChannelRetryMin and
	// DefaultChannelRetryMax.
	ChannelRetryMin, ChannelRetryMax time.Duration
	// Grants, when set, lets approvers answer a run "for this session"
	// or "for this pattern" for a while (grants.go), and is consulted
	// before a request is held; nil: every approval is once.
	Grants *Grants
	// Proposals, when set, is the book of agents' proposals the API
	// serves with the approvals (proposals.go); the hub does not use it.
	Proposals *Proposals
	// Activity keeps the sessions' output excerpts and file diffs the
	// page's timeline shows (activity.go); the manager feeds it. Default
	// NewActivity().
	Activity *Activity
}

func (o HubOptions) withDefaults() HubOptions {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Activity == nil {
		o.Activity = NewActivity()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.SendBuffer <= 0 {
		o.SendBuffer = DefaultSendBuffer
	}
	if o.PingInterval <= 0 {
		o.PingInterval = DefaultPingInterval
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.HistorySize <= 0 {
		o.HistorySize = DefaultHistorySize
	}
	if o.Replica == "" {
		o.Replica = "local"
	}
	if o.ChannelRetryMin <= 0 {
		o.ChannelRetryMin = DefaultChannelRetryMin
	}
	if o.ChannelRetryMax <= 0 {
		o.ChannelRetryMax = DefaultChannelRetryMax
	}
	return o
}

// Hub is the WebSocket confirmation service: a Service that publishes each
// approval to every connected approver and waits for the first decision,
// the timeout, the agent's withdrawal or the gateway's shutdown.
//
// State. Pending approvals live in memory (with the code, for display) and
// in the audit database (without it). The first resolution wins, in memory
// (a per-approval lock and a resolved flag) and in the database (an UPDATE
// that only matches a pending row, and triggers that make a resolved row
// immutable). An approval is created per Confirm call with a random id and
// bound to the request's Digest; it is single-use, so its id can never
// approve another request.
//
// Connections. Each socket has exactly one writer goroutine, which alone
// writes data frames, pings and the close frame; the handler's goroutine
// reads. Broadcasting never blocks: events go into a bounded per-connection
// queue, and a connection whose queue is full is dropped (the page
// reconnects and gets a fresh snapshot). Close closes every connection
// (Caddy's reverseproxy streaming.go pattern: http.Server.Shutdown neither
// tracks nor closes hijacked connections).
type Hub struct {
	opts     HubOptions
	log      *slog.Logger
	store    *store
	upgrader websocket.Upgrader

	// base is cancelled by Close; socket decisions use it.
	base       context.Context
	baseCancel context.CancelFunc

	mu      sync.Mutex
	closed  bool
	pending map[string]*pending
	// remote mirrors other replicas' pending approvals (HubOptions.Peer).
	remote map[string]*mirror
	// subs are the connections that receive events; live are all whose
	// goroutines still run (a detached connection is live until its writer
	// has sent the close frame and its reader has seen the end).
	subs    map[*conn]struct{}
	live    map[*conn]struct{}
	history []View // oldest first, at most opts.HistorySize

	wg        sync.WaitGroup // connection goroutines
	closeOnce sync.Once

	listenDone chan struct{} // closed when the LISTEN loop ends; nil without one

	// Channel deliveries (channel.go): chctx is cancelled when Close
	// gives up waiting for them.
	chwg     sync.WaitGroup
	chctx    context.Context
	chcancel context.CancelFunc
}

// pending is one approval in flight.
type pending struct {
	view View   // immutable once published
	raw  []byte // view as JSON, marshalled once for every snapshot

	mu       sync.Mutex // serialises resolution; taken before Hub.mu, never after
	resolved bool
	final    View // valid once resolved
	outcome  Outcome
	timer    *time.Timer
	done     chan struct{} // closed when resolved
}

// NewHub opens the hub: it creates or migrates its table in the audit
// database and resolves, as interrupted, every approval a previous process
// left pending (that process is gone, and so is the agent's request that
// waited for it). ctx bounds this start-up work only.
func NewHub(ctx context.Context, opts HubOptions) (*Hub, error) {
	if opts.Store == nil {
		return nil, errors.New("confirm: HubOptions.Store is required")
	}
	opts = opts.withDefaults()
	if opts.Proposals != nil { // proposals reach the channels too (proposals_channels.go)
		opts.Proposals.useChannels(opts.Channels, opts.ChannelRetryMin, opts.ChannelRetryMax)
	}
	st, err := openStore(ctx, opts.Store, opts.Replica)
	if err != nil {
		return nil, fmt.Errorf("confirm: %w", err)
	}
	n, err := st.interruptAll(ctx, time.Now(), "the gateway restarted before anyone decided")
	if err != nil {
		return nil, fmt.Errorf("confirm: resolve approvals left by the previous run: %w", err)
	}
	if n > 0 {
		opts.Logger.WarnContext(ctx, "resolved approvals left pending by the previous run as interrupted", "count", n)
	}
	recent, err := st.recent(ctx, "", nil, opts.HistorySize)
	if err != nil {
		return nil, err
	}
	slices.Reverse(recent)
	base, cancel := context.WithCancel(context.Background())
	chctx, chcancel := context.WithCancel(context.Background())
	h := &Hub{
		opts: opts, log: opts.Logger, store: st,
		base: base, baseCancel: cancel, chctx: chctx, chcancel: chcancel,
		pending: map[string]*pending{}, remote: map[string]*mirror{}, subs: map[*conn]struct{}{}, live: map[*conn]struct{}{}, history: recent,
	}
	h.upgrader = websocket.Upgrader{
		HandshakeTimeout: opts.WriteTimeout,
		ReadBufferSize:   1024,
		WriteBufferSize:  4096,
		WriteBufferPool:  &sync.Pool{},
		Subprotocols:     []string{Subprotocol},
		CheckOrigin:      h.CheckOrigin,
	}
	if opts.ListenDSN != "" {
		h.listenDone = make(chan struct{})
		go h.listen(opts.ListenDSN)
	}
	return h, nil
}

// Confirm publishes req to the approvers and waits. It returns the first of:
// a human decision (approved or denied), the deadline (StatusTimeout), ctx
// ending (StatusWithdrawn: the agent went away) or Close (StatusInterrupted).
// An error means the approval could not be asked for at all (the database
// refused it, the hub is closed, or the request is inconsistent); the
// manager denies the request then.
func (h *Hub) Confirm(ctx context.Context, req Request) (Outcome, error) {
	if req.Kind == "" {
		req.Kind = KindRun
	}
	if sum := sha256.Sum256([]byte(req.Code)); req.Kind == KindRun && strings.TrimPrefix(req.CodeSHA256, "sha256:") != hex.EncodeToString(sum[:]) {
		return Outcome{}, ErrCodeMismatch
	}
	if gr, ok := h.opts.Grants.coverIfSet(ctx, req); ok {
		h.log.InfoContext(ctx, "approval answered by a grant", "grant_id", gr.ID, "request_id", req.RequestID,
			"tenant", req.Tenant, "session_id", req.SessionID, "risk_level", req.RiskLevel)
		return grantOutcome(gr), nil
	}
	now := time.Now()
	deadline := req.Deadline
	if deadline.IsZero() {
		deadline = now.Add(h.opts.Timeout)
	}
	p := &pending{done: make(chan struct{})}
	p.view = View{
		ID: newID(), Kind: req.Kind, Target: req.Target, RequestID: req.RequestID, Tenant: req.Tenant, SessionID: req.SessionID, Language: req.Language, Code: req.Code,
		CodeSHA256: req.CodeSHA256, Digest: req.Digest(), RiskLevel: req.RiskLevel,
		Patterns: nonNil(req.Patterns), Reasons: nonNil(req.Reasons), Executor: req.Executor,
		PolicyRevision: req.PolicyRevision, Principal: req.Principal, Context: req.Context, Via: req.Via, Intent: req.Intent,
		Status: StatusPending, RequestedAt: now, Deadline: deadline,
	}
	p.raw = mustJSON(p.view)
	if h.isClosed() {
		return Outcome{}, ErrClosed
	}
	wctx, cancel := context.WithTimeout(ctx, h.opts.WriteTimeout)
	err := h.store.insert(wctx, &p.view)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return h.withdrawnBeforePublish(p), nil
		}
		return Outcome{}, fmt.Errorf("confirm: record pending approval: %w", err)
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		h.resolve(p, StatusInterrupted, "", "the gateway is shutting down")
		return p.outcome, nil
	}
	h.pending[p.view.ID] = p
	h.broadcastLocked(p.view.Tenant, mustJSON(event{Type: EventRequested, ServerTime: time.Now(), Approval: p.raw}))
	// Under mu, while not closed: Close's wait for the deliveries
	// cannot start before this Add.
	h.notifyChannels(p)
	h.mu.Unlock()
	h.log.InfoContext(ctx, "approval requested", "approval_id", p.view.ID, "request_id", req.RequestID,
		"tenant", req.Tenant, "session_id", req.SessionID, "risk_level", req.RiskLevel, "principal", req.Principal, "deadline", deadline)
	if req.Published != nil {
		req.Published(p.view.ID)
	}

	p.mu.Lock()
	if !p.resolved {
		p.timer = time.AfterFunc(time.Until(deadline), func() {
			h.resolve(p, StatusTimeout, "", "no approver decided in time")
		})
	}
	p.mu.Unlock()

	select {
	case <-p.done:
	case <-ctx.Done():
		// A decision may have won the race; resolve keeps the first.
		h.resolve(p, StatusWithdrawn, "", "the agent withdrew the request")
		<-p.done
	}
	return p.outcome, nil
}

// withdrawnBeforePublish is the outcome when the agent left while the
// approval was being recorded: nobody saw it, so there is nothing to
// broadcast.
func (h *Hub) withdrawnBeforePublish(p *pending) Outcome {
	return Outcome{ApprovalID: p.view.ID, Status: StatusWithdrawn, Reason: "the agent withdrew the request",
		DecidedAt: time.Now(), TimeToDecide: time.Since(p.view.RequestedAt)}
}

// Decide records an approver's decision on approval id. The first
// resolution wins: a later one gets a *ConflictError (409) naming who
// resolved it and how. A decision naming a digest other than the
// approval's is refused with ErrDigestMismatch and changes nothing. An
// approval of a tenant who cannot see is ErrNotFound, pending or resolved,
// exactly like an id that does not exist.
func (h *Hub) Decide(ctx context.Context, id string, who Approver, d Decision) (View, error) {
	var status string
	switch d.Decision {
	case "approve":
		status = StatusApproved
	case "deny":
		status = StatusDenied
	default:
		return View{}, ErrInvalidDecision
	}
	if len(d.Reason) > MaxReasonBytes {
		return View{}, ErrReasonTooLong
	}
	if d.Scope != "" && d.Scope != ScopeOnce && d.Scope != ScopeSession && d.Scope != ScopePattern {
		return View{}, ErrInvalidScope
	}
	if who.Name == "" {
		return View{}, ErrNoIdentity
	}
	h.mu.Lock()
	p := h.pending[id]
	h.mu.Unlock()
	if p != nil && !who.Sees(p.view.Tenant) {
		return View{}, ErrNotFound
	}
	if p != nil {
		var err error
		if d.Scope, err = h.opts.Grants.scope(p.view, status, d); err != nil {
			return View{}, err
		}
	}
	if p == nil {
		v, err := h.store.get(ctx, id)
		if err != nil {
			return View{}, err
		}
		if !who.Sees(v.Tenant) {
			return View{}, ErrNotFound
		}
		if v.Status == StatusPending {
			if d.Scope, err = h.opts.Grants.scope(v, status, d); err != nil {
				return View{}, err
			}
			return h.decideWithGrant(ctx, v, status, d, who.Name, func() (View, error) { return h.decideRemote(ctx, v, status, who.Name, d) })
		}
		return View{}, &ConflictError{Approval: v}
	}
	return h.decideWithGrant(ctx, p.view, status, d, who.Name, func() (View, error) {
		return h.resolveBy(ctx, p, status, who.Name, d.Reason, d.Digest, d.Scope)
	})
}

// scopeFor is the scope a decision records: "once" unless an egress
// approval is approved for the session. "session" on a run approval is
// refused (a run approval is bound to its code).
func scopeFor(kind, status, scope string) (string, error) {
	switch {
	case status != StatusApproved:
		return "", nil
	case scope == ScopeSession && kind != KindEgress:
		return "", ErrInvalidScope
	case scope == "":
		return ScopeOnce, nil
	}
	return scope, nil
}

// resolveBy is a human decision. Unlike the hub's own resolutions (timeout,
// withdrawal, interruption), an approval that cannot be written to the
// database is not granted: the approval stays pending and the caller gets
// the error.
func (h *Hub) resolveBy(ctx context.Context, p *pending, status, by, reason, digest, scope string) (View, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.resolved {
		return View{}, &ConflictError{Approval: p.final}
	}
	if digest != "" && digest != p.view.Digest {
		return View{}, ErrDigestMismatch
	}
	fin := h.finalView(p, status, by, reason)
	fin.Scope = scope
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.opts.WriteTimeout)
	err := h.store.resolveRow(wctx, &fin)
	cancel()
	if errors.Is(err, errNotPending) {
		// Another replica decided first; its decision stands.
		if won, ok := h.winner(ctx, p); ok {
			h.settleLocked(p, won)
			return View{}, &ConflictError{Approval: won}
		}
	}
	if err != nil {
		if status == StatusApproved {
			h.log.ErrorContext(ctx, "approval not recorded; it stays pending", "approval_id", p.view.ID, "err", err)
			return View{}, fmt.Errorf("confirm: record decision: %w", err)
		}
		h.log.ErrorContext(ctx, "denial not recorded; denying anyway", "approval_id", p.view.ID, "err", err)
	}
	h.settleLocked(p, fin)
	return fin, nil
}

// resolve is the hub's own resolution (timeout, withdrawal, interruption):
// each is a deny, so it takes effect even when the database write fails.
// It does nothing if p is already resolved.
func (h *Hub) resolve(p *pending, status, by, reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.resolved {
		return
	}
	fin := h.finalView(p, status, by, reason)
	wctx, cancel := context.WithTimeout(context.Background(), h.opts.WriteTimeout)
	defer cancel()
	err := h.store.resolveRow(wctx, &fin)
	if errors.Is(err, errNotPending) {
		if won, ok := h.winner(wctx, p); ok {
			fin, err = won, nil
		}
	}
	if err != nil {
		h.log.Error("approval resolution not recorded", "approval_id", p.view.ID, "status", status, "err", err)
	}
	h.settleLocked(p, fin)
}

func (h *Hub) finalView(p *pending, status, by, reason string) View {
	now := time.Now()
	fin := p.view
	fin.Code = ""
	fin.Status, fin.DecidedBy, fin.Reason, fin.DecidedAt = status, by, reason, now
	fin.TimeToDecideMS = now.Sub(fin.RequestedAt).Milliseconds()
	return fin
}

// settleLocked publishes p's resolution. p.mu is held.
func (h *Hub) settleLocked(p *pending, fin View) {
	p.resolved, p.final = true, fin
	p.outcome = Outcome{ApprovalID: fin.ID, Status: fin.Status, Scope: fin.Scope, DecidedBy: fin.DecidedBy, Reason: fin.Reason,
		DecidedAt: fin.DecidedAt, TimeToDecide: fin.DecidedAt.Sub(fin.RequestedAt)}
	if p.timer != nil {
		p.timer.Stop()
	}
	close(p.done)
	h.mu.Lock()
	delete(h.pending, fin.ID)
	h.history = append(h.history, fin)
	if over := len(h.history) - h.opts.HistorySize; over > 0 {
		h.history = slices.Delete(h.history, 0, over)
	}
	h.broadcastLocked(fin.Tenant, mustJSON(event{Type: EventResolved, ServerTime: time.Now(), Approval: mustJSON(fin)}))
	h.mu.Unlock()
	h.log.Info("approval resolved", "approval_id", fin.ID, "request_id", fin.RequestID, "tenant", fin.Tenant, "session_id", fin.SessionID,
		"status", fin.Status, "decided_by", fin.DecidedBy, "time_to_decide_ms", fin.TimeToDecideMS)
}

// Pending returns every pending approval, oldest first, with its code.
func (h *Hub) Pending() []View { return h.PendingFor(Approver{}) }

// PendingFor returns the pending approvals who may see, oldest first,
// with their code.
func (h *Hub) PendingFor(who Approver) []View {
	h.mu.Lock()
	out := make([]View, 0, len(h.pending))
	for _, p := range h.pending {
		if who.Sees(p.view.Tenant) {
			out = append(out, p.view)
		}
	}
	for _, m := range h.remoteViewsLocked(who) {
		out = append(out, m.view)
	}
	h.mu.Unlock()
	sortViews(out)
	return out
}

// Get returns any approval: a pending one with its code, a resolved one
// from the database without it.
func (h *Hub) Get(ctx context.Context, id string) (View, error) { return h.GetFor(ctx, id, Approver{}) }

// GetFor is Get for an approver: an approval of a tenant who cannot see is
// ErrNotFound, like an id that does not exist.
func (h *Hub) GetFor(ctx context.Context, id string, who Approver) (View, error) {
	h.mu.Lock()
	p := h.pending[id]
	h.mu.Unlock()
	var v View
	if p != nil {
		p.mu.Lock()
		v = p.view
		if p.resolved {
			v = p.final
		}
		p.mu.Unlock()
	} else {
		var err error
		if v, err = h.store.get(ctx, id); err != nil {
			return View{}, err
		}
	}
	if !who.Sees(v.Tenant) {
		return View{}, ErrNotFound
	}
	return v, nil
}

// Recent returns up to limit resolved approvals from the database, newest
// first; status "" means every resolved status.
func (h *Hub) Recent(ctx context.Context, status string, limit int) ([]View, error) {
	return h.RecentFor(ctx, Approver{}, status, limit)
}

// RecentFor is Recent limited to the tenants who sees.
func (h *Hub) RecentFor(ctx context.Context, who Approver, status string, limit int) ([]View, error) {
	return h.store.recent(ctx, status, who.Tenants, limit)
}

// Close interrupts every pending approval (the waiting requests are denied
// with approval_interrupted), sends every approver a close frame and waits
// for their connections to end, forcing them closed when ctx ends. It must
// run before the audit store is closed. Later calls only wait.
func (h *Hub) Close(ctx context.Context) error {
	h.closeOnce.Do(func() {
		h.mu.Lock()
		h.closed = true
		ps := make([]*pending, 0, len(h.pending))
		for _, p := range h.pending {
			ps = append(ps, p)
		}
		h.mu.Unlock()
		for _, p := range ps {
			h.resolve(p, StatusInterrupted, "", "the gateway is shutting down")
		}
		h.mu.Lock()
		for c := range h.subs {
			h.detachLocked(c, websocket.CloseGoingAway, "the gateway is shutting down")
		}
		h.mu.Unlock()
		h.baseCancel()
		if h.listenDone != nil {
			<-h.listenDone
		}
	})
	done := make(chan struct{})
	go func() { h.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		h.mu.Lock()
		for c := range h.live {
			_ = c.ws.Close()
		}
		h.mu.Unlock()
		<-done
	}
	h.closeChannels(ctx)
	return nil
}

func (h *Hub) isClosed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closed
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	return "apr_" + hex.EncodeToString(b[:])
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func sortViews(vs []View) {
	slices.SortFunc(vs, func(a, b View) int {
		if c := a.RequestedAt.Compare(b.RequestedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}

// Interface guards.
var _ Service = (*Hub)(nil)
