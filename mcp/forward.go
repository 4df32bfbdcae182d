package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sync"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/manager"
)

// Tool calls across a fleet (DESIGN.md §13). An MCP session lives on the
// replica its client connected to, but the sandgate session a tool call
// works in may be served by another: its kernel, warm processes and
// browser are there. Such a call is forwarded whole, at the tool-call
// level, to the replica that serves the session, which runs it through
// the same tool handler and streams back each progress notification and
// then the result; this replica relays them to its client. The owner
// authenticates the call again from the client's own credential, which
// the forward carries, as a forwarded REST request is.

// Fleet sends a forwarded tool call to another replica (package fleet,
// wired in main); nil serves every call here.
type Fleet interface {
	// CallTool posts body to ForwardPath on the replica at url, signed as
	// a hop of the fleet and authenticated by authorization, and hands
	// each line of the answer to line.
	CallTool(ctx context.Context, url, authorization, requestID string, body []byte, line func([]byte)) error
}

// ForwardPath is where a replica takes tool calls another forwards.
const ForwardPath = "/v1/fleet/mcp/call"

// forwarded is what a forwarded call brings of the MCP session it came
// from.
type forwarded struct {
	via        string
	ownSession string
	progress   bool
	notify     func(ctx context.Context, p *sdk.ProgressNotificationParams) error
	// elicitation: the client declared URL elicitation; send passes the
	// elicitation's lines back.
	elicitation bool
	send        func(forwardLine)
}

// forwardBody is a forwarded call.
type forwardBody struct {
	Tool       string          `json:"tool"`
	Arguments  json.RawMessage `json:"arguments"`
	Via        string          `json:"via"`
	OwnSession string          `json:"own_session"`
	Progress   bool            `json:"progress"`
	BaseURL    string          `json:"base_url"`
	// Elicitation: the client declared URL-mode elicitation.
	Elicitation bool `json:"elicitation"`
}

// forwardLine is one line of a forwarded call's answer: a progress
// notification, or the result (the last line).
type forwardLine struct {
	Progress *sdk.ProgressNotificationParams `json:"progress,omitempty"`
	// Elicit asks the client to open the approval page; ElicitDone says
	// the approver decided (or the call ended).
	Elicit     *sdk.ElicitParams   `json:"elicit,omitempty"`
	ElicitDone string              `json:"elicit_done,omitempty"`
	Result     *sdk.CallToolResult `json:"result,omitempty"`
}

var errForward = errcode.New(errcode.SessionUnavailable,
	"the replica serving this session failed while answering; retry shortly")

// forwardElsewhere forwards c to the replica that serves its session,
// when that is another one, and returns that replica's result. Otherwise
// it returns the context to run c with here.
func (s *Server) forwardElsewhere(ctx context.Context, c *call) (*sdk.CallToolResult, context.Context, bool) {
	if s.deps.Fleet == nil {
		return nil, ctx, false
	}
	session, args, err := withSession(c)
	if err != nil {
		return nil, ctx, false // the tool refuses the arguments itself
	}
	owner, err := s.deps.Manager.Where(ctx, c.principal, session)
	if err != nil {
		return s.errorResult(ctx, c, err), ctx, true
	}
	if owner.Local {
		if ref, err := s.deps.Manager.ResolveSession(c.principal, session); err == nil {
			ctx = manager.WithServedHere(ctx, ref.Key)
		}
		return nil, ctx, false
	}
	ss := c.req.Session
	body, _ := json.Marshal(forwardBody{Tool: c.req.Params.Name, Arguments: args, Via: via(c.req),
		OwnSession: c.ownSession(), Progress: c.req.Params.GetProgressToken() != nil, BaseURL: baseURLOf(c.req.Extra),
		Elicitation: ss != nil && supportsURLElicitation(ss)})
	prog := newProgress(c)
	el := &relayedElicitations{ss: ss, log: s.log}
	defer el.end()
	var res *sdk.CallToolResult
	err = s.deps.Fleet.CallTool(ctx, owner.URL, c.req.Extra.Header.Get("Authorization"), c.requestID, body, func(b []byte) {
		var l forwardLine
		if json.Unmarshal(b, &l) != nil {
			return
		}
		switch {
		case l.Progress != nil:
			prog.send(ctx, l.Progress.Progress, l.Progress.Total, l.Progress.Message)
		case l.Elicit != nil:
			el.start(ctx, l.Elicit)
		case l.ElicitDone != "":
			el.done(ctx, l.ElicitDone)
		case l.Result != nil:
			res = l.Result
		}
	})
	if err == nil && res == nil {
		err = errors.New("mcp: the forwarded call's answer had no result")
	}
	if err != nil {
		s.log.WarnContext(ctx, "mcp: forwarded tool call failed", "request_id", c.requestID, "owner", owner.Replica, "err", err)
		if code, _, _ := errcode.Of(err); code != errcode.Internal {
			return s.errorResult(ctx, c, err), ctx, true
		}
		return s.errorResult(ctx, c, errForward), ctx, true
	}
	return res, ctx, true
}

// withSession returns the session c works in and its arguments with
// session_id set to it, so that the replica it is forwarded to (which
// holds no MCP session for it) works in the same one. session_info's
// arguments are left as they are: its answer says whether the session is
// the MCP session's own, which the forward carries (own_session).
func withSession(c *call) (string, json.RawMessage, error) {
	m := map[string]json.RawMessage{}
	raw := c.req.Params.Arguments
	if t := bytes.TrimSpace(raw); len(t) > 0 && !bytes.Equal(t, []byte("null")) {
		if err := json.Unmarshal(raw, &m); err != nil {
			return "", nil, err
		}
	}
	var id string
	if v, ok := m["session_id"]; ok {
		if err := json.Unmarshal(v, &id); err != nil {
			return "", nil, err
		}
	}
	switch {
	case id != "":
	case c.req.Params.Name == "session_info":
		return c.ownSession(), raw, nil
	default:
		id = c.session("")
		m["session_id"], _ = json.Marshal(id)
	}
	out, err := json.Marshal(m)
	return id, out, err
}

// ServeForwarded runs a tool call another replica of the fleet forwarded
// (api checks the hop and authenticates p from the client's credential),
// streaming progress notifications and then the result as NDJSON.
func (s *Server) ServeForwarded(w http.ResponseWriter, r *http.Request, p manager.Principal, requestID string) error {
	var body forwardBody
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 8<<20)).Decode(&body); err != nil {
		return errcode.New(errcode.InvalidRequest, "a forwarded tool call is a JSON object")
	}
	invoke, ok := s.tools[body.Tool]
	if !ok {
		return errcode.New(errcode.NotFound, "no such tool")
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	var mu sync.Mutex
	enc := json.NewEncoder(w)
	flush := http.NewResponseController(w)
	write := func(l forwardLine) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(l)
		_ = flush.Flush()
	}
	req := &sdk.CallToolRequest{
		Params: &sdk.CallToolParamsRaw{Name: body.Tool, Arguments: body.Arguments},
		Extra: &sdk.RequestExtra{Header: r.Header, TokenInfo: &sdkauth.TokenInfo{UserID: userID(p),
			Extra: map[string]any{extraPrincipal: p, extraBaseURL: body.BaseURL}}},
	}
	c := &call{s: s, req: req, principal: p, requestID: requestID, fwd: &forwarded{
		via: body.Via, ownSession: body.OwnSession, progress: body.Progress, elicitation: body.Elicitation,
		notify: func(_ context.Context, n *sdk.ProgressNotificationParams) error {
			write(forwardLine{Progress: n})
			return nil
		},
		send: write,
	}}
	if s.isClosed() {
		write(forwardLine{Result: s.errorResult(r.Context(), c, errClosing)})
		return nil
	}
	write(forwardLine{Result: invoke(manager.WithFrontEnd(r.Context(), "mcp"), c, body.Arguments)})
	return nil
}

// relayedElicitations are the URL elicitations the owner of a forwarded
// call asked for, sent to the client of this replica's MCP session, each
// in the background (the client answers when its user has seen it, which
// may be never) until the owner says the approver decided, or the call
// ends.
type relayedElicitations struct {
	ss  *sdk.ServerSession
	log *slog.Logger

	mu      sync.Mutex
	pending map[string]context.CancelFunc
	wg      sync.WaitGroup
}

func (r *relayedElicitations) start(ctx context.Context, p *sdk.ElicitParams) {
	if r.ss == nil {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	r.mu.Lock()
	if r.pending == nil {
		r.pending = map[string]context.CancelFunc{}
	}
	r.pending[p.ElicitationID] = cancel
	r.mu.Unlock()
	r.wg.Go(func() {
		if _, err := r.ss.Elicit(ctx, p); err != nil && ctx.Err() == nil {
			r.log.Debug("mcp url elicitation not answered", "approval_id", p.ElicitationID, "err", err)
		}
	})
}

func (r *relayedElicitations) done(ctx context.Context, id string) {
	r.mu.Lock()
	cancel, ok := r.pending[id]
	delete(r.pending, id)
	r.mu.Unlock()
	if !ok {
		return
	}
	_ = r.ss.NotifyElicitationComplete(ctx, &sdk.ElicitationCompleteParams{ElicitationID: id})
	cancel()
}

// end cancels what is still open and waits for it.
func (r *relayedElicitations) end() {
	r.mu.Lock()
	for _, cancel := range r.pending {
		cancel()
	}
	r.pending = nil
	r.mu.Unlock()
	r.wg.Wait()
}
