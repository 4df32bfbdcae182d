package api

import (
	"context"
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandgate/sandgate/confirm"
	"github.com/sandgate/sandgate/executors/output"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/risk"
)

// mediaNDJSON is the media type of a streamed run: one JSON event per
// line (DESIGN.md §10).
const mediaNDJSON = "application/x-ndjson"

// The events of a streamed run, in the order they can come: decision;
// approval_pending and approval_resolved when the policy asks a human;
// stdout and stderr while the program runs, with keepalive every
// Config.StreamKeepalive throughout; and last exactly one of exit (whose
// body is the JSON response the request gets without streaming) or error
// (whose body is the error body, with the HTTP status it would have had).
const (
	eventDecision         = "decision"
	eventApprovalPending  = "approval_pending"
	eventApprovalResolved = "approval_resolved"
	eventKeepalive        = "keepalive"
	eventExit             = "exit"
	eventError            = "error"
	// eventStdout and eventStderr are output.Stream's names.
)

// streamEvent is one line of a streamed run.
type streamEvent struct {
	Event string `json:"event"`
	// Seq numbers the stdout and stderr events together, from 1: sorted
	// by Seq they are in the order the program wrote them.
	Seq uint64 `json:"seq,omitempty"`
	// Data is a piece of stdout or stderr: whole UTF-8 characters (a
	// character split between two writes waits for its end), masked and
	// within the response's cap like the response itself.
	Data     string           `json:"data,omitempty"`
	Risk     *risk.Assessment `json:"risk,omitempty"`
	Decision *decisionView    `json:"decision,omitempty"`
	Approval any              `json:"approval,omitempty"`
	// Status is the HTTP status of an error event's body.
	Status int `json:"status,omitempty"`
	Body   any `json:"body,omitempty"`
}

// pendingView is the approval a held request waits for.
type pendingView struct {
	ID        string          `json:"id"`
	Status    string          `json:"status"`
	RiskLevel string          `json:"risk_level"`
	Patterns  []risk.Pattern  `json:"patterns"`
	Reasons   []policy.Reason `json:"reasons"`
	Deadline  time.Time       `json:"deadline"`
}

// wantsStream reports whether the client accepts application/x-ndjson
// (with a q above zero). JSON stays the default.
func wantsStream(r *http.Request) bool {
	for _, h := range r.Header.Values("Accept") {
		for part := range strings.SplitSeq(h, ",") {
			mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err != nil || mt != mediaNDJSON {
				continue
			}
			if q, ok := params["q"]; ok {
				if f, err := strconv.ParseFloat(q, 64); err != nil || f <= 0 {
					continue
				}
			}
			return true
		}
	}
	return false
}

// stream answers req as a streamed run.
//
// The stream starts (200, application/x-ndjson) with the decision event,
// and only when the decision lets the request go on (allow or
// require_approval): a request the validation or the policy refuses gets
// the ordinary JSON error with its status, as without streaming. After
// the start, an error is an error event carrying the stable code.
//
// The manager runs the request in a goroutine; this one writes. The
// hooks only queue (the output hook is the executor's Collector Tap, under
// its lock), so a client that reads slowly holds back its own stream and
// never the program: chunks waiting for it merge (output.Queue), and what
// waits is bounded by the response's caps, which the Collector applies
// before the tap, exactly as without streaming. Each write has its own
// deadline (Config.StreamWriteTimeout) instead of the server's
// WriteTimeout, so a long run is never cut while its client reads. A
// write that fails, or a client that disconnects, cancels the run: the
// executor kills its process tree and the one audit record says
// cancelled.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, req manager.RunRequest, view responseView) error {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	st := newRunStream(w, s.cfg.StreamWriteTimeout)
	req.OnDecision = st.onDecision
	req.OnApprovalPending = st.onApprovalPending
	req.OnApprovalResolved = st.onApprovalResolved
	req.OnOutput = st.out.Push
	done := make(chan runDone, 1)
	go s.runFor(ctx, req, done)

	keepalive := time.NewTicker(s.cfg.StreamKeepalive)
	defer keepalive.Stop()
	for {
		select {
		case <-st.ready:
		case <-st.out.Ready():
		case <-keepalive.C:
			if st.started {
				st.write(streamEvent{Event: eventKeepalive})
			}
		case d := <-done:
			return s.finishStream(r, st, d, view)
		}
		st.send()
		if st.broken {
			cancel() // the client is gone; wait for the run to end
		}
	}
}

type runDone struct {
	res *manager.RunResult
	err error
}

// runFor runs req and reports on done; a panic is an internal error, as
// ServeHTTP makes of one in the handler's own goroutine.
func (s *Server) runFor(ctx context.Context, req manager.RunRequest, done chan<- runDone) {
	defer func() {
		if v := recover(); v != nil {
			s.log.ErrorContext(ctx, "handler panic", "request_id", req.RequestID, "panic", v)
			done <- runDone{err: errPanic}
		}
	}()
	res, err := s.deps.Manager.Run(ctx, req)
	done <- runDone{res: res, err: err}
}

// finishStream writes what still waits and the last event, or returns
// the error for an ordinary answer when the stream never started.
func (s *Server) finishStream(r *http.Request, st *runStream, d runDone, view responseView) error {
	st.send()
	if d.err != nil {
		if !st.started {
			return d.err
		}
		status, body := s.errorResponse(r, d.err)
		st.write(streamEvent{Event: eventError, Status: status, Body: body})
	} else {
		st.rest(output.Stdout, d.res.Result.Stdout)
		st.rest(output.Stderr, d.res.Result.Stderr)
		st.write(streamEvent{Event: eventExit, Body: view(d.res, requestID(r.Context()))})
	}
	st.flush()
	return nil
}

// runStream is the writing side of one streamed run.
type runStream struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	enc     *json.Encoder
	timeout time.Duration
	out     *output.Queue

	mu      sync.Mutex
	control []streamEvent // decision and approval events
	ready   chan struct{} // a token while control is not empty

	started, broken bool
	seq             uint64
	text            [2]streamText
}

// streamText is what one output stream has sent so far, and the bytes of
// a character that the last chunk split.
type streamText struct {
	sent []byte
	held []byte
}

func newRunStream(w http.ResponseWriter, timeout time.Duration) *runStream {
	return &runStream{w: w, rc: http.NewResponseController(w), enc: json.NewEncoder(w), timeout: timeout,
		out: output.NewQueue(0), ready: make(chan struct{}, 1)}
}

// onDecision starts the stream when the decision lets the request go on.
func (st *runStream) onDecision(a risk.Assessment, d policy.Decision) {
	if d.Action != policy.ActionAllow && d.Action != policy.ActionRequireApproval {
		return // refused: the ordinary error answer
	}
	dv := viewDecision(d)
	st.queue(streamEvent{Event: eventDecision, Risk: &a, Decision: &dv})
}

func (st *runStream) onApprovalPending(p manager.ApprovalPending) {
	reasons := p.Reasons
	if reasons == nil {
		reasons = []policy.Reason{}
	}
	st.queue(streamEvent{Event: eventApprovalPending, Approval: pendingView{ID: p.ID, Status: confirm.StatusPending,
		RiskLevel: p.RiskLevel, Patterns: p.Patterns, Reasons: reasons, Deadline: p.Deadline}})
}

func (st *runStream) onApprovalResolved(o confirm.Outcome) {
	st.queue(streamEvent{Event: eventApprovalResolved, Approval: viewApproval(&o)})
}

func (st *runStream) queue(ev streamEvent) {
	st.mu.Lock()
	st.control = append(st.control, ev)
	st.mu.Unlock()
	select {
	case st.ready <- struct{}{}:
	default:
	}
}

// send writes the waiting events, control first (they all come before
// the run starts, so before any output), and flushes them.
func (st *runStream) send() {
	st.mu.Lock()
	control := st.control
	st.control = nil
	st.mu.Unlock()
	for _, ev := range control {
		st.write(ev)
	}
	for _, c := range st.out.Take() {
		st.chunk(c.Stream, c.Data)
	}
	st.flush()
}

// chunk writes p of stream s as an event, keeping back an incomplete
// UTF-8 sequence at its end for the next chunk: JSON strings carry
// characters, and a split one would arrive as two replacement runes.
func (st *runStream) chunk(s output.Stream, p []byte) {
	t := &st.text[s]
	data := append(t.held, p...)
	whole := output.TrimRune(data)
	t.held = append([]byte(nil), data[len(whole):]...)
	if len(whole) == 0 {
		return
	}
	t.sent = append(t.sent, whole...)
	st.seq++
	st.write(streamEvent{Event: s.String(), Seq: st.seq, Data: string(whole)})
}

// rest sends what the response has of stream s beyond what was streamed:
// the bytes of a character still held back, and all of the output of a
// backend that could not stream (an AIO server other than sandboxd). So
// the stream's text always adds up to the response's, which stays the
// authority: if they differ otherwise, nothing more is sent.
func (st *runStream) rest(s output.Stream, final string) {
	sent := st.text[s].sent
	if len(final) <= len(sent) || !strings.HasPrefix(final, string(sent)) {
		return
	}
	st.text[s].held = nil
	st.chunk(s, []byte(final[len(sent):]))
	if h := st.text[s].held; len(h) > 0 { // an invalid sequence at the very end
		st.text[s].held = nil
		st.text[s].sent = append(st.text[s].sent, h...)
		st.seq++
		st.write(streamEvent{Event: s.String(), Seq: st.seq, Data: string(h)})
	}
}

// write writes one event, starting the response first if need be.
func (st *runStream) write(ev streamEvent) {
	if st.broken {
		return
	}
	if !st.started {
		h := st.w.Header()
		h.Set("Content-Type", mediaNDJSON)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "no-store")
		h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
		st.w.WriteHeader(http.StatusOK)
		st.started = true
	}
	st.deadline()
	if err := st.enc.Encode(ev); err != nil {
		st.broken = true
	}
}

// flush pushes what was written to the client.
func (st *runStream) flush() {
	if !st.started || st.broken {
		return
	}
	st.deadline()
	if err := st.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		st.broken = true
	}
}

// deadline gives the next write its own deadline. A writer that cannot
// set one keeps the server's WriteTimeout.
func (st *runStream) deadline() {
	_ = st.rc.SetWriteDeadline(time.Now().Add(st.timeout))
}
