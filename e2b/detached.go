package e2b

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sandgate/sandgate/confirm"
	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/executors/output"
	"github.com/sandgate/sandgate/manager"
)

// A process Start begins is a detached run of the manager
// (manager.StartDetached), as envd's processes outlive the stream that
// started them: the SDK's background: true is only the client not
// waiting, so every Start is one. The process lives until it exits, its
// time limit (the stream's Connect-Timeout-Ms, the SDK's timeoutMs, 60 s
// by default; 0 asks for the policy's longest, max_timeout_s), SendSignal,
// or the sandbox's kill; the stream that started it, and any Connect,
// only follows it. Its input is served when the Start asked for it
// (stdin: true): SendInput writes to it, CloseStdin ends it.

// noLimit is the time limit asked for a process started without one: the
// policy caps it at its max_timeout_s.
const noLimit = 3600

// startedRun waits for the manager's run behind p to start (the policy
// and a human may still be deciding), as input sent to an envd process
// right after its start reaches it: nil when the process ended without
// starting or ctx ended first.
func (p *process) startedRun(ctx context.Context) *manager.DetachedRun {
	for {
		p.mu.Lock()
		d, done, changed := p.det, p.done, p.changed
		p.mu.Unlock()
		if d != nil || done {
			return d
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil
		}
	}
}

// runDetached starts req as a detached run and feeds p's events from its
// output until it ends; cancel (SendSignal, the sandbox's end) kills it.
func (s *Server) runDetached(ctx context.Context, cancel context.CancelFunc, req manager.RunRequest, p *process, sb *sandbox, stdin bool) {
	defer cancel()
	defer sb.unregister(p.pid)
	req.OnApprovalPending = func(manager.ApprovalPending) {}
	req.OnApprovalResolved = func(confirm.Outcome) {}
	d, err := s.startSafely(ctx, req, stdin)
	if err != nil {
		msg := refusal(ctx, err)
		if !errors.Is(err, manager.ErrCancelled) && ctx.Err() == nil {
			p.append(dataOf(output.Stderr, []byte("sandgate: "+msg+"\n")), false)
		}
		p.append(endOf(killedOr(ctx, err), msg), true)
		return
	}
	p.mu.Lock()
	p.det = d
	close(p.changed) // wakes an input waiting for the start
	p.changed = make(chan struct{})
	p.mu.Unlock()
	stop := context.AfterFunc(ctx, d.Kill)
	defer stop()
	var sent [2]int
	i := 0
	for {
		chunks, next, done, changed := d.Since(i)
		for _, c := range chunks {
			sent[c.Stream] += len(c.Data)
			p.append(dataOf(c.Stream, c.Data), false)
		}
		i = next
		if done {
			break
		}
		<-changed
	}
	res, err := d.Result()
	if err != nil {
		msg := refusal(ctx, err)
		p.append(endOf(killedOr(ctx, err), msg), true)
		return
	}
	for i, full := range []string{res.Result.Stdout, res.Result.Stderr} {
		if len(full) > sent[i] {
			p.append(dataOf(output.Stream(i), []byte(full[sent[i]:])), false)
		}
	}
	p.append(processEvent{End: endFor(res)}, true)
}

// endFor is the end event of a run that ran.
func endFor(res *manager.RunResult) *endEvent {
	end := &endEvent{ExitCode: int32(res.Result.ExitCode), Exited: true, Status: "exit status " + strconv.Itoa(res.Result.ExitCode)}
	switch {
	case res.Result.TimedOut:
		e := "sandgate: the command was killed at its time limit"
		end.Error, end.Status = &e, "timed out"
	case res.Result.ExitCode == exitKilled:
		e := "signal: killed"
		end.Exited, end.Status, end.Error = false, e, &e
	case res.Result.Truncated && res.Result.ExitCode != 0:
		e := "sandgate: the output was cut at the gateway's cap"
		if res.Result.OutputPath != "" {
			e += "; all of it is in " + res.Result.OutputPath
		}
		end.Error = &e
	}
	return end
}

// killedOr is err, marked as a kill when ctx ended (SendSignal, or the
// sandbox's end): a command killed while it was still starting (its
// sandbox being claimed or created) fails with whatever the interrupted
// step says, and the client asked for a kill, so it is told 137, not
// that sandgate refused the command.
func killedOr(ctx context.Context, err error) error {
	if ctx.Err() != nil && !errors.Is(err, context.Canceled) {
		return errors.Join(err, context.Canceled)
	}
	return err
}

// startSafely is manager.StartDetached with a panic turned into an error.
func (s *Server) startSafely(ctx context.Context, req manager.RunRequest, stdin bool) (d *manager.DetachedRun, err error) {
	defer func() {
		if v := recover(); v != nil {
			s.log.ErrorContext(ctx, "e2b start panic", "request_id", req.RequestID, "panic", v)
			d, err = nil, errcode.New(errcode.Internal, "internal error")
		}
	}()
	d, _, err = s.deps.Manager.StartDetached(ctx, req, stdin)
	return d, err
}

// inputRequest is SendInput's: the process and its input, stdin bytes
// (base64 in JSON) or pty bytes, which are refused.
type inputRequest struct {
	Process selector `json:"process"`
	Input   struct {
		Stdin []byte `json:"stdin"`
		PTY   []byte `json:"pty"`
	} `json:"input"`
}

// stdinWrite bounds one SendInput's wait for a program that does not read.
const stdinWrite = 10 * time.Second

// input serves SendInput and CloseStdin.
func (s *Server) input(w http.ResponseWriter, r *http.Request, sb *sandbox, closing bool) {
	var req inputRequest
	if err := readUnary(r, &req); err != nil {
		writeUnaryError(w, err)
		return
	}
	p, ok := sb.find(req.Process)
	if !ok {
		writeUnaryError(w, rpcErr(codeNotFound, "no such process"))
		return
	}
	d := p.startedRun(r.Context())
	switch {
	case d == nil:
		writeUnaryError(w, rpcErr(codeFailedPrecondition, "the process did not start (refused, or the request ended first)"))
		return
	case req.Input.PTY != nil:
		writeUnaryError(w, rpcErr(codeUnimplemented, "a PTY is not served by sandgate"))
		return
	case closing:
		_ = d.Stdin().Close()
		writeUnary(w, struct{}{})
		return
	}
	if err := writeBounded(d, req.Input.Stdin); err != nil {
		writeUnaryError(w, rpcErr(codeFailedPrecondition, "the process does not take input: "+err.Error()))
		return
	}
	writeUnary(w, struct{}{})
}

var errStdinStuck = errors.New("it has not read its input for " + stdinWrite.String())

// writeBounded writes b to d's input, giving up after stdinWrite (the
// write goes on in the background, then fails when the process ends).
func writeBounded(d *manager.DetachedRun, b []byte) error {
	done := make(chan error, 1)
	var once sync.Once
	go func() {
		_, err := d.Stdin().Write(b)
		once.Do(func() { done <- err })
	}()
	t := time.NewTimer(stdinWrite)
	defer t.Stop()
	select {
	case err := <-done:
		if err != nil {
			return errors.New("its input is closed")
		}
		return nil
	case <-t.C:
		return errStdinStuck
	}
}
