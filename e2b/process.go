package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/executors/output"
	"github.com/sandgate/sandgate/manager"
)

// envd's process.Process service. Each Start is one
// manager.StartDetached (kind execute, language bash) in the sandbox's
// session: validation, risk, policy, approval, the executor the policy
// chooses, and one audit record. The process is a detached run (detached.go): it outlives the
// Start stream, as envd's processes do, until it exits, its time limit,
// SendSignal or the sandbox's end. While it lives, other requests see it:
// List shows it, SendSignal kills it (SIGKILL and SIGTERM kill its
// process tree), Connect streams the rest of its output, and SendInput
// and CloseStdin reach its input when its Start asked for one.
// StreamInput (client streaming, which the SDKs do not use over HTTP/1.1)
// and a Start that asks for a PTY are refused.

// processConfig is envd's ProcessConfig.
type processConfig struct {
	Cmd  string            `json:"cmd"`
	Args []string          `json:"args"`
	Envs map[string]string `json:"envs,omitempty"`
	Cwd  *string           `json:"cwd,omitempty"`
}

type startRequest struct {
	Process processConfig   `json:"process"`
	PTY     json.RawMessage `json:"pty"`
	Tag     *string         `json:"tag"`
	Stdin   *bool           `json:"stdin"`
}

// selector is envd's ProcessSelector: a pid or a tag.
type selector struct {
	PID *uint32 `json:"pid"`
	Tag *string `json:"tag"`
}

type selectRequest struct {
	Process selector        `json:"process"`
	Signal  json.RawMessage `json:"signal"`
}

type processInfo struct {
	Config processConfig `json:"config"`
	PID    uint32        `json:"pid"`
	Tag    *string       `json:"tag,omitempty"`
}

// processEvent is envd's ProcessEvent, a oneof: exactly one field set.
type processEvent struct {
	Start     *startEvent `json:"start,omitempty"`
	Data      *dataEvent  `json:"data,omitempty"`
	End       *endEvent   `json:"end,omitempty"`
	Keepalive *struct{}   `json:"keepalive,omitempty"`
}

type startEvent struct {
	PID uint32 `json:"pid"`
}

// dataEvent carries bytes, base64 in JSON.
type dataEvent struct {
	Stdout []byte `json:"stdout,omitempty"`
	Stderr []byte `json:"stderr,omitempty"`
}

type endEvent struct {
	ExitCode int32   `json:"exitCode"`
	Exited   bool    `json:"exited"`
	Status   string  `json:"status"`
	Error    *string `json:"error,omitempty"`
}

type eventMessage struct {
	Event processEvent `json:"event"`
}

// process is one live command: its config, the run's cancel, and the
// events it has produced, which any number of readers follow (the Start
// request, and Connects). Its output is what the run's collector kept,
// so within the run's caps.
type process struct {
	pid    uint32
	config processConfig
	tag    *string
	cancel context.CancelFunc

	mu      sync.Mutex
	det     *manager.DetachedRun // the run, once it has started (detached.go)
	events  []processEvent
	done    bool
	changed chan struct{} // closed and replaced at each change
}

func (p *process) append(ev processEvent, last bool) {
	p.mu.Lock()
	if !p.done {
		p.events = append(p.events, ev)
		p.done = last
	}
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

// since returns the events from i on, whether the last is the end, and a
// channel closed at the next change.
func (p *process) since(i int) ([]processEvent, bool, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.events[i:], p.done, p.changed
}

// processRPC serves POST /e2b/process.Process/{method}.
func (s *Server) processRPC(w http.ResponseWriter, r *http.Request) {
	method := r.PathValue("method")
	streaming := method == "Start" || method == "Connect"
	sb, status, msg := s.sandboxOf(r, false)
	if sb == nil {
		e := rpcErr(statusCode(status), msg)
		if streaming {
			newStreamWriter(w, s.cfg.WriteTimeout).end(e)
		} else {
			writeUnaryError(w, e)
		}
		return
	}
	r = sandboxContext(r, sb)
	switch method {
	case "Start":
		s.start(w, r, sb)
	case "Connect":
		s.connect(w, r, sb)
	case "List":
		s.list(w, r, sb)
	case "SendSignal":
		s.signal(w, r, sb)
	case "SendInput", "CloseStdin":
		s.input(w, r, sb, method == "CloseStdin")
	default:
		writeUnaryError(w, rpcErr(codeUnimplemented, "process."+manager.Printable(method, 64)+" is not served by sandgate"))
	}
}

// find is the live process sel names.
func (sb *sandbox) find(sel selector) (*process, bool) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sel.PID != nil {
		p, ok := sb.procs[*sel.PID]
		return p, ok
	}
	if sel.Tag != nil {
		for _, p := range sb.procs {
			if p.tag != nil && *p.tag == *sel.Tag {
				return p, true
			}
		}
	}
	return nil, false
}

// commandOf is the bash command line a Start runs: the SDK always sends
// /bin/bash -l -c <command>; anything else is its argv, quoted. The cwd
// and envs become a leading cd and exports, so the code the policy
// judges, the approver sees and the audit digests is exactly what runs.
func commandOf(sb *sandbox, c processConfig) (string, *rpcError) {
	var line string
	switch {
	case (c.Cmd == "/bin/bash" || c.Cmd == "bash" || c.Cmd == "/bin/sh" || c.Cmd == "sh") &&
		len(c.Args) >= 2 && c.Args[len(c.Args)-2] == "-c" && onlyFlags(c.Args[:len(c.Args)-2]):
		line = c.Args[len(c.Args)-1]
	case c.Cmd == "":
		return "", rpcErr(codeInvalidArgument, "process.cmd is required")
	default:
		words := []string{shellQuote(c.Cmd)}
		for _, a := range c.Args {
			words = append(words, shellQuote(a))
		}
		line = strings.Join(words, " ")
	}
	var pre []string
	if c.Cwd != nil && *c.Cwd != "" {
		ws, sp, ok := toWorkspace(*c.Cwd)
		if !ok {
			return "", rpcErr(codeInvalidArgument, "cwd: "+errOutside)
		}
		// The spelling the SDK used: both are real in the sandbox
		// (Layout), and pwd answers the one asked for.
		if dir := sp.Show(ws); dir != homeDir {
			pre = append(pre, "cd "+shellQuote(dir)+" || exit 1")
		}
	}
	for _, envs := range []map[string]string{sb.envs, c.Envs} {
		keys := make([]string, 0, len(envs))
		for k := range envs {
			if !envName.MatchString(k) {
				return "", rpcErr(codeInvalidArgument, "environment variable names must match [A-Za-z_][A-Za-z0-9_]*")
			}
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			pre = append(pre, "export "+k+"="+shellQuote(envs[k]))
		}
	}
	if len(pre) == 0 {
		return line, nil
	}
	return strings.Join(pre, "\n") + "\n" + line, nil
}

// onlyFlags reports whether args are bash options such as -l.
func onlyFlags(args []string) bool {
	for _, a := range args {
		if !strings.HasPrefix(a, "-") || a == "-c" {
			return false
		}
	}
	return true
}

// start serves process.Process/Start: the start event at once (with the
// pid the process keeps in this sandbox), then keepalives while the
// policy decides and a human approves, the output as the command writes
// it, and the end event.
func (s *Server) start(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	sw := newStreamWriter(w, s.cfg.WriteTimeout)
	var req startRequest
	if err := readStreamRequest(r, &req); err != nil {
		sw.end(err)
		return
	}
	if isSet(req.PTY) {
		sw.end(rpcErr(codeUnimplemented, "a PTY is not served by sandgate"))
		return
	}
	code, rerr := commandOf(sb, req.Process)
	if rerr != nil {
		sw.end(rerr)
		return
	}
	// The process outlives this stream (detached.go): its context is
	// the request's values without its cancellation.
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	timeout := connectTimeout(r)
	limit := runTimeout(timeout)
	if limit == 0 {
		limit = noLimit
	}
	p := sb.register(req.Process, req.Tag, cancel)
	if !sw.send(eventMessage{Event: processEvent{Start: &startEvent{PID: p.pid}}}) {
		cancel()
		sb.unregister(p.pid)
		return
	}
	runReq := manager.RunRequest{
		RequestID: manager.RequestIDFrom(ctx), Kind: manager.KindExecute, Principal: sb.principal,
		SessionID: sb.id, Language: "bash", Code: code, TimeoutS: limit, Via: sb.via(),
	}
	go s.runDetached(ctx, cancel, runReq, p, sb, req.Stdin != nil && *req.Stdin)
	s.follow(r.Context(), sw, p, 0)
}

// runTimeout is the run's time limit from the stream's budget (the SDK's
// timeoutMs, 60 s by default): the whole budget, since the policy caps
// it and the approval's wait is bounded separately; 0 (the gateway's
// default) without one.
func runTimeout(budget time.Duration) int {
	if budget <= 0 {
		return 0
	}
	return int(min(max(budget/time.Second, 1), 3600))
}

// register gives a new process the sandbox's next pid.
func (sb *sandbox) register(c processConfig, tag *string, cancel context.CancelFunc) *process {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	pid := sb.nextPID
	sb.nextPID++
	p := &process{pid: pid, config: c, tag: tag, cancel: cancel, changed: make(chan struct{})}
	sb.procs[pid] = p
	return p
}

func (sb *sandbox) unregister(pid uint32) {
	sb.mu.Lock()
	delete(sb.procs, pid)
	sb.mu.Unlock()
}

// runSafely is manager.Run with a panic turned into an error.
func (s *Server) runSafely(ctx context.Context, req manager.RunRequest) (res *manager.RunResult, err error) {
	defer func() {
		if v := recover(); v != nil {
			s.log.ErrorContext(ctx, "e2b run panic", "request_id", req.RequestID, "panic", v)
			res, err = nil, errcode.New(errcode.Internal, "internal error")
		}
	}()
	return s.deps.Manager.Run(ctx, req)
}

func dataOf(st output.Stream, b []byte) processEvent {
	if st == output.Stderr {
		return processEvent{Data: &dataEvent{Stderr: b}}
	}
	return processEvent{Data: &dataEvent{Stdout: b}}
}

// Exit codes of a command that did not run to its own end.
const (
	// exitRefused is a command sandgate refused (policy, approval,
	// validation, quota): 126, the shell's "cannot execute".
	exitRefused = 126
	// exitKilled is a command killed by SendSignal: 128 + SIGKILL.
	exitKilled = 137
)

// refusal is err as the SDK's CommandExitError carries it: the stable
// code, errcode's message and the policy's reasons.
func refusal(ctx context.Context, err error) string {
	code, _, msg := errcode.Of(err)
	return fmt.Sprintf("%s: %s%s (request %s)", code, msg, reasonsOf(err), manager.RequestIDFrom(ctx))
}

func endOf(err error, msg string) processEvent {
	if errors.Is(err, manager.ErrCancelled) || errors.Is(err, context.Canceled) {
		e := "signal: killed"
		return processEvent{End: &endEvent{ExitCode: exitKilled, Exited: false, Status: "signal: killed", Error: &e}}
	}
	return processEvent{End: &endEvent{ExitCode: exitRefused, Exited: false, Status: "refused by sandgate", Error: &msg}}
}

// follow writes p's events from the i-th on, with a keepalive whenever
// the stream has been quiet for a keepalive interval, until the end event
// or the client leaves. It ends the stream.
func (s *Server) follow(ctx context.Context, sw *streamWriter, p *process, i int) {
	tick := time.NewTicker(s.cfg.Keepalive)
	defer tick.Stop()
	for {
		evs, done, changed := p.since(i)
		for _, ev := range evs {
			if !sw.send(eventMessage{Event: ev}) {
				return
			}
		}
		i += len(evs)
		if done {
			sw.end(nil)
			return
		}
		select {
		case <-changed:
		case <-tick.C:
			if !sw.send(eventMessage{Event: processEvent{Keepalive: &struct{}{}}}) {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// connect serves process.Process/Connect: a live process's start event
// and the rest of its output and end, as Start's stream carries them.
func (s *Server) connect(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	sw := newStreamWriter(w, s.cfg.WriteTimeout)
	var req selectRequest
	if err := readStreamRequest(r, &req); err != nil {
		sw.end(err)
		return
	}
	p, ok := sb.find(req.Process)
	if !ok {
		sw.end(rpcErr(codeNotFound, "no such process (it has ended, or the gateway restarted)"))
		return
	}
	p.mu.Lock()
	from := len(p.events)
	p.mu.Unlock()
	if !sw.send(eventMessage{Event: processEvent{Start: &startEvent{PID: p.pid}}}) {
		return
	}
	s.follow(r.Context(), sw, p, from)
}

func (s *Server) list(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	var req struct{}
	if err := readUnary(r, &req); err != nil {
		writeUnaryError(w, err)
		return
	}
	sb.mu.Lock()
	out := struct {
		Processes []processInfo `json:"processes"`
	}{Processes: make([]processInfo, 0, len(sb.procs))}
	for _, p := range sb.procs {
		out.Processes = append(out.Processes, processInfo{Config: p.config, PID: p.pid, Tag: p.tag})
	}
	sb.mu.Unlock()
	sort.Slice(out.Processes, func(i, j int) bool { return out.Processes[i].PID < out.Processes[j].PID })
	writeUnary(w, out)
}

// signal serves SendSignal: SIGKILL and SIGTERM cancel the run (its
// executor kills the process tree; a command still held for approval is
// withdrawn); a process that is not live is not_found (the SDK's kill
// answers false).
func (s *Server) signal(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	var req selectRequest
	if err := readUnary(r, &req); err != nil {
		writeUnaryError(w, err)
		return
	}
	switch sig := strings.Trim(string(req.Signal), `"`); sig {
	case "SIGNAL_SIGKILL", "9", "SIGNAL_SIGTERM", "15":
	default:
		writeUnaryError(w, rpcErr(codeInvalidArgument, "only SIGKILL and SIGTERM are served"))
		return
	}
	p, ok := sb.find(req.Process)
	if !ok {
		writeUnaryError(w, rpcErr(codeNotFound, "no such process"))
		return
	}
	p.cancel()
	writeUnary(w, struct{}{})
}
