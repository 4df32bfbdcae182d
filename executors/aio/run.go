package aio

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"net"
	"path"
	"time"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/output"
)

// workspaceMount is the workspace as the sandbox sees it.
const workspaceMount = "/workspace"

// runRequest is one run on one sandbox.
type runRequest struct {
	// dir is the workspace as the sandbox sees it (workspaceMount).
	dir string
	// cwd is the run's directory, the session's layout workdir; "" is
	// dir.
	cwd      string
	id       string
	lang     string
	code     string
	timeout  time.Duration
	margin   time.Duration
	limits   executors.Limits
	extended bool // send sandboxd's x_sandgate part
	// output is Spec.Output: with extended, sandboxd streams the run's
	// output and each chunk is relayed to it as it arrives.
	output func(output.Chunk)
	// egress is the run's network grant (nil: none), sent to sandboxd.
	egress *RunEgress
	// release is Spec.Release: sandboxd holds the run until it says go.
	release func(context.Context) error
}

func (r runRequest) workdir() string {
	if r.cwd == "" {
		return r.dir
	}
	return r.cwd
}

// errUnknownOutcome marks a run whose result the sandbox never delivered
// (transport failure after the request went out, or no answer by the
// client deadline): the instance's state is unknown and it is recycled.
var errUnknownOutcome = errors.New("run outcome unknown")

// errNotDelivered marks a run whose request never reached the sandbox
// (the connection was refused): nothing of it ran. It comes with
// errUnknownOutcome, since the instance is as broken.
var errNotDelivered = errors.New("run not delivered")

// run executes r on c: bash through /v1/bash/exec (a fresh bash session,
// closed afterwards), python and javascript through /v1/code/execute. The
// HTTP deadline is the hard timeout plus a margin; nothing is retried.
func run(ctx context.Context, c *Client, r runRequest) (executors.Result, error) {
	start := time.Now()
	spill, _ := output.SpillPaths(r.id)
	ext := &RunExtension{
		OutputLimit: r.limits.MaxOutputBytes,
		SpillPath:   path.Join(r.dir, spill),
		SpillLimit:  r.limits.MaxSpillBytes,
		TimeoutMS:   max(r.timeout.Milliseconds(), 1),
		Program:     r.id, // run as the program file every backend uses
		Limits: &RunLimits{CPUSeconds: r.limits.CPUSeconds, MaxOpenFiles: r.limits.MaxOpenFiles,
			MaxFileSizeMB: r.limits.MaxFileSizeMB, MemoryMB: r.limits.MemoryMB, MaxProcs: r.limits.MaxProcs},
	}
	ext.Egress = r.egress
	onChunk := relay(r.output, r.limits.MaxOutputBytes)
	if !r.extended {
		ext, onChunk = nil, nil
		// Another server holds nothing: the run waits here instead.
		if err := releaseNow(ctx, r.release); err != nil {
			return executors.Result{}, err
		}
		r.release = nil
	}
	cctx, cancel := context.WithTimeout(ctx, r.timeout+r.margin)
	defer cancel()

	var (
		status             string
		exitCode           *int
		stdout, stderr     *string
		out                *RunOutput
		timedOut, finished bool
		err                error
	)
	switch r.lang {
	case executors.LangBash:
		var res BashExecResult
		res, err = runBash(cctx, ctx, c, r, ext, onChunk)
		status, exitCode, stdout, stderr, out = res.Status, res.ExitCode, res.Stdout, res.Stderr, res.XSandgate
		timedOut = status == "timed_out"
		finished = status == "completed" || timedOut
	case executors.LangPython, executors.LangJavaScript:
		secs := int(math.Ceil(r.timeout.Seconds()))
		var res CodeExecuteResult
		res, err = c.CodeExecuteStream(cctx, CodeExecuteRequest{Language: r.lang, Code: r.code, Timeout: &secs,
			Cwd: r.workdir(), XSandgate: ext, Release: r.release}, onChunk)
		status, exitCode, stdout, stderr, out = res.Status, res.ExitCode, res.Stdout, res.Stderr, res.XSandgate
		timedOut = status == "timeout"
		finished = status == "ok" || status == "error" || timedOut
		if exitCode == nil && status == "ok" {
			exitCode = ptr(0)
		}
	default:
		return executors.Result{}, fmt.Errorf("aio: %w: %q", executors.ErrUnsupportedLanguage, r.lang)
	}
	if err != nil {
		return executors.Result{}, classify(ctx, cctx, err)
	}
	if !finished {
		if ctx.Err() != nil {
			return executors.Result{}, ctx.Err()
		}
		return executors.Result{}, fmt.Errorf("aio: %w: run ended with status %q", errUnknownOutcome, status)
	}
	res := executors.Result{Duration: time.Since(start)}
	if out != nil {
		o, err1 := base64.StdEncoding.DecodeString(out.StdoutB64)
		e, err2 := base64.StdEncoding.DecodeString(out.StderrB64)
		if err := errors.Join(err1, err2); err != nil {
			return executors.Result{}, fmt.Errorf("aio: decode output: %w", err)
		}
		res.Stdout, res.Stderr = capText(o, r.limits.MaxOutputBytes, out.StdoutTruncated), capText(e, r.limits.MaxOutputBytes, out.StderrTruncated)
		res.Truncated = out.Truncated
		if out.SpillPath != nil && out.Truncated {
			res.OutputPath = *out.SpillPath
		}
	} else {
		// Another server: its strings are the output (UTF-8 only), cut
		// here at the cap; there is no spill file then.
		o, e := deref(stdout), deref(stderr)
		res.Truncated = len(o) > r.limits.MaxOutputBytes || len(e) > r.limits.MaxOutputBytes
		res.Stdout, res.Stderr = capText([]byte(o), r.limits.MaxOutputBytes, false), capText([]byte(e), r.limits.MaxOutputBytes, false)
	}
	switch {
	case timedOut:
		res.ExitCode, res.TimedOut = executors.ExitCodeTimeout, true
	case exitCode != nil:
		res.ExitCode = *exitCode
	default:
		res.ExitCode = 1
	}
	return res, nil
}

// runBash runs one bash command in a bash session of its own, so that a
// cancelled run can be killed by session id on any server, and closes it.
func runBash(cctx, parent context.Context, c *Client, r runRequest, ext *RunExtension, onChunk func(StreamEvent)) (BashExecResult, error) {
	sid := "sg-" + r.id
	if err := createBashSession(cctx, c, sid, r.workdir()); err != nil {
		return BashExecResult{}, err
	}
	defer func() {
		// The clean-up must run even when the run's context ended.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(parent), 5*time.Second)
		defer cancel()
		if cctx.Err() != nil {
			_ = c.BashKill(dctx, sid) // sandboxd already killed it; other servers may not have
		}
		_ = c.BashSessionClose(dctx, sid)
	}()
	hard := r.timeout.Seconds()
	limit := r.limits.MaxOutputBytes
	return c.BashExecStream(cctx, BashExecRequest{Command: r.code, SessionID: sid, ExecDir: r.workdir(),
		HardTimeout: &hard, MaxOutputLength: &limit, XSandgate: ext, Release: r.release}, onChunk)
}

// releaseNow waits for a run's release where it cannot be held in the
// sandbox (nil: none to wait for).
func releaseNow(ctx context.Context, release func(context.Context) error) error {
	if release == nil {
		return nil
	}
	if err := release(ctx); err != nil {
		return fmt.Errorf("aio: run not released: %w", err)
	}
	return nil
}

// sessionCreateTimeout bounds the bash session's create, a control call
// that runs none of the agent's code and that a sandbox answers at once.
// A sandbox whose transport stalled (a Kubernetes node's kubelet stopped
// under a port-forward) would otherwise hold the run to its whole timeout
// before it failed.
var sessionCreateTimeout = 10 * time.Second // a var for its test

// createBashSession creates the run's bash session. No answer within
// sessionCreateTimeout is the sandbox unavailable, and the run was not
// delivered: its code had not been sent.
func createBashSession(cctx context.Context, c *Client, sid, dir string) error {
	ctx, cancel := context.WithTimeout(cctx, sessionCreateTimeout)
	defer cancel()
	err := c.BashSessionCreate(ctx, sid, dir)
	if err != nil && cctx.Err() == nil && ctx.Err() != nil {
		// %v: the sandbox did not answer; this is no deadline of the run's.
		return &executors.UnavailableError{Kind: executors.KindAIO, Reason: "sandbox did not answer",
			Err: fmt.Errorf("%w: %w: no answer to the bash session's create in %v: %v",
				errUnknownOutcome, errNotDelivered, sessionCreateTimeout, err)}
	}
	return err
}

// relay turns sandboxd's streamed chunks into calls of out (Spec.Output),
// or is nil when nobody streams. The gateway does not take the sandbox's
// word for the cap: each stream relays at most limit bytes, the most the
// Result keeps, and the chunks are numbered here, from 1.
func relay(out func(output.Chunk), limit int) func(StreamEvent) {
	if out == nil {
		return nil
	}
	var (
		seq  uint64
		sent [2]int
	)
	return func(ev StreamEvent) {
		var s output.Stream
		switch ev.Stream {
		case "stdout":
			s = output.Stdout
		case "stderr":
			s = output.Stderr
		default:
			return
		}
		data := ev.Data[:min(len(ev.Data), max(limit-sent[s], 0))]
		if len(data) == 0 {
			return
		}
		sent[s] += len(data)
		seq++
		out(output.Chunk{Seq: seq, Stream: s, Data: data})
	}
}

// classify turns a client error into the executor's error: the caller's
// cancellation as is, a missing endpoint or a refused key as unavailable,
// anything that leaves the outcome unknown as errUnknownOutcome.
func classify(parent, cctx context.Context, err error) error {
	if perr := parent.Err(); perr != nil {
		return perr
	}
	switch {
	case errors.Is(err, ErrEndpointMissing):
		return &executors.UnavailableError{Kind: executors.KindAIO,
			Reason: "the sandbox image lacks an endpoint this executor needs (agent-infra ≥ 1.9.3 or sandboxd)", Err: err}
	case errors.Is(err, ErrUnauthorized):
		return &executors.UnavailableError{Kind: executors.KindAIO, Reason: "the sandbox refused the API key", Err: err}
	case errors.Is(err, executors.ErrUnavailable), errors.Is(err, errNotReleased):
		return err
	case isDialError(err):
		return &executors.UnavailableError{Kind: executors.KindAIO, Reason: "sandbox unreachable", Err: fmt.Errorf("%w: %w: %w", errUnknownOutcome, errNotDelivered, err)}
	case cctx.Err() != nil:
		return fmt.Errorf("aio: %w: no answer by the client deadline: %w", errUnknownOutcome, err)
	}
	var apiErr *APIError
	if errors.As(err, &apiErr) {
		return fmt.Errorf("aio: %w", err)
	}
	return fmt.Errorf("aio: %w: %w", errUnknownOutcome, err)
}

// isDialError reports a connection that was never made: the request was
// not delivered.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// capText cuts b at limit bytes and, when the output was cut, drops a
// UTF-8 sequence the cut split.
func capText(b []byte, limit int, truncated bool) string {
	if limit > 0 && len(b) > limit {
		b, truncated = b[:limit], true
	}
	if truncated {
		b = output.TrimRune(b)
	}
	return string(b)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func ptr[T any](v T) *T { return &v }
