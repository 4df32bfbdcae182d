package mcp

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandgate/sandgate/confirm"
	"github.com/sandgate/sandgate/manager"
)

// approvalWatch keeps a client informed while its call is held for
// approval: progress notifications every Config.ProgressInterval, a
// URL-mode elicitation pointing at the approval page when the client
// supports it, and a last notification with the answer. The manager calls
// pending and resolved (which never block); the tool calls stop once Run
// returns. Nothing happens for a call that is not held.
type approvalWatch struct {
	s    *Server
	c    *call
	ctx  context.Context
	prog *progress

	onPending  chan manager.ApprovalPending
	onResolved chan confirm.Outcome
	quit       chan struct{}
	done       chan struct{}
	stopOnce   sync.Once
}

// testHookWatching runs once the watch has told the client it waits, as
// it starts waiting for the decision: a test holds it there until the
// call has ended, so that the decision and the end are both ready.
var testHookWatching = func(*approvalWatch) {}

func (s *Server) watchApproval(ctx context.Context, c *call, prog *progress) *approvalWatch {
	w := &approvalWatch{s: s, c: c, ctx: ctx, prog: prog,
		onPending: make(chan manager.ApprovalPending, 1), onResolved: make(chan confirm.Outcome, 1),
		quit: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

func (w *approvalWatch) pending(p manager.ApprovalPending) {
	select {
	case w.onPending <- p:
	default:
	}
}

func (w *approvalWatch) resolved(o confirm.Outcome) {
	select {
	case w.onResolved <- o:
	default:
	}
}

// stop ends the watch and waits for it: nothing is sent on the call's
// stream after its result.
func (w *approvalWatch) stop() {
	w.stopOnce.Do(func() { close(w.quit) })
	<-w.done
}

func (w *approvalWatch) run() {
	defer close(w.done)
	var p manager.ApprovalPending
	select {
	case p = <-w.onPending:
	case <-w.quit:
		return
	case <-w.ctx.Done():
		return
	}
	start := time.Now()
	total := math.Max(p.Deadline.Sub(start).Seconds(), 1)
	page := w.pageURL(p.ID)
	endElicit := w.elicit(p, page)
	defer endElicit()
	w.prog.send(w.ctx, 0, total, waitingMessage(p, page, p.Deadline))
	testHookWatching(w)
	tick := time.NewTicker(w.s.cfg.ProgressInterval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			w.prog.send(w.ctx, time.Since(start).Seconds(), total, waitingMessage(p, "", p.Deadline))
		case o := <-w.onResolved:
			w.prog.send(w.ctx, time.Since(start).Seconds(), total, resolvedMessage(o))
			return
		case <-w.quit:
			// A denial ends the call right after its decision, so both
			// may be ready here, and select picks one at random: the
			// decision is still told before the result.
			select {
			case o := <-w.onResolved:
				w.prog.send(w.ctx, time.Since(start).Seconds(), total, resolvedMessage(o))
			default:
			}
			return
		case <-w.ctx.Done():
			return
		}
	}
}

// pageURL is where an approver decides: the approval page, with the
// approval's id as fragment (the page lists it among the pending ones).
func (w *approvalWatch) pageURL(id string) string {
	base := baseURLOf(w.c.req.Extra)
	if w.s.public != nil {
		base = w.s.public.String()
	}
	if base == "" {
		return ""
	}
	return base + "/#" + id
}

// elicit sends the URL-mode elicitation, when the client declared it, in
// the background: the client answers when its user has seen it, which may
// be never. The returned function completes it (the approver decided, or
// the call ended) and waits for the request to end.
func (w *approvalWatch) elicit(p manager.ApprovalPending, page string) func() {
	params := &sdk.ElicitParams{
		Mode: "url", URL: page, ElicitationID: p.ID,
		Message: fmt.Sprintf("sandgate is holding this %s call for a human approver (%s). "+
			"Approval %s can be approved or denied on the approval page by anyone with an approver token.",
			toolName(w.c), riskSummary(p), p.ID),
	}
	if f := w.c.fwd; f != nil {
		// Forwarded: the replica holding the client's MCP session asks
		// the client, and completes it when told to.
		if page == "" || !f.elicitation {
			return func() {}
		}
		f.send(forwardLine{Elicit: params})
		return func() { f.send(forwardLine{ElicitDone: p.ID}) }
	}
	ss := w.c.req.Session
	if page == "" || ss == nil || !supportsURLElicitation(ss) {
		return func() {}
	}
	ctx, cancel := context.WithCancel(w.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, err := ss.Elicit(ctx, params)
		if err != nil && ctx.Err() == nil {
			w.s.log.Debug("mcp url elicitation not answered", "approval_id", p.ID, "err", err)
		}
	}()
	return func() {
		_ = ss.NotifyElicitationComplete(w.ctx, &sdk.ElicitationCompleteParams{ElicitationID: p.ID})
		cancel()
		<-done
	}
}

func supportsURLElicitation(ss *sdk.ServerSession) bool {
	ip := ss.InitializeParams()
	return ip != nil && ip.Capabilities != nil && ip.Capabilities.Elicitation != nil && ip.Capabilities.Elicitation.URL != nil
}

// waitingMessage is the progress message while held, as in "waiting for
// approval apr_...: HIGH, subprocess spawns processes (115 s left)".
func waitingMessage(p manager.ApprovalPending, page string, deadline time.Time) string {
	msg := fmt.Sprintf("waiting for approval %s: %s (%d s left)", p.ID, riskSummary(p),
		int(math.Max(0, time.Until(deadline).Round(time.Second).Seconds())))
	if page != "" {
		msg += "; approval page: " + page
	}
	return msg
}

// riskSummary is the level and what was found: the first risk pattern's
// message, else the policy's first reason.
func riskSummary(p manager.ApprovalPending) string {
	switch {
	case len(p.Patterns) > 0:
		return p.RiskLevel + ", " + p.Patterns[0].Message
	case len(p.Reasons) > 0:
		return p.RiskLevel + ", " + p.Reasons[0].Message
	}
	return p.RiskLevel
}

func resolvedMessage(o confirm.Outcome) string {
	switch o.Status {
	case confirm.StatusApproved:
		return fmt.Sprintf("approval %s: approved by %s; running", o.ApprovalID, o.DecidedBy)
	case confirm.StatusDenied:
		return fmt.Sprintf("approval %s: denied by %s", o.ApprovalID, o.DecidedBy)
	}
	return fmt.Sprintf("approval %s: %s", o.ApprovalID, o.Status)
}
