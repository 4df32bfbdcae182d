package aio

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"path"
	"time"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/output"
)

// kernelSession is the Jupyter session id the gateway uses in its
// instances: an instance serves one sandgate session, so one kernel.
const kernelSession = "sandgate"

// cell runs a stateful Spec on the session's instance l and releases it.
// A cell granted network is refused: the egress relay is set up per run
// and a kernel outlives runs, so the grant could not end with the cell.
func (e *Executor) cell(ctx context.Context, l *lease, spec executors.Spec) (executors.Result, error) {
	if spec.Network {
		l.release(false)
		return executors.Result{}, &executors.CapabilityError{Kind: executors.KindAIO,
			Missing: []string{executors.CapNetworkGrant}, Isolation: "stateful kernel"}
	}
	res, err := runCell(ctx, l.client(), spec, DefaultClientMargin)
	broken := errors.Is(err, errUnknownOutcome)
	l.release(broken)
	if broken {
		e.cfg.Logger.Warn("aio: cell outcome unknown; instance recycled", "session_id", spec.SessionID,
			"request_id", spec.RequestID, "err", err.Error())
		return executors.Result{}, unavailable("sandbox did not deliver the cell's outcome", err)
	}
	return res, err
}

// runCell runs a stateful Spec on the session's instance: sandboxd's
// kernel for kernelSession (cmd/sandboxd/kernel.go), through the AIO
// API's stateful /v1/code/execute. The kernel lives as long as the
// instance: deleting the session, the idle timeout and MaxUses end both.
func runCell(ctx context.Context, c *Client, spec executors.Spec, margin time.Duration) (executors.Result, error) {
	start := time.Now()
	spill, _ := output.SpillPaths(spec.RequestID)
	lim := spec.Limits
	ext := &RunExtension{
		OutputLimit: lim.MaxOutputBytes, SpillPath: path.Join(workspaceMount, spill), SpillLimit: lim.MaxSpillBytes,
		TimeoutMS: max(spec.Timeout.Milliseconds(), 1),
		Limits: &RunLimits{CPUSeconds: kernelCPUSeconds, MaxOpenFiles: lim.MaxOpenFiles,
			MaxFileSizeMB: lim.MaxFileSizeMB, MemoryMB: lim.MemoryMB, MaxProcs: lim.MaxProcs},
	}
	secs := int(math.Ceil(spec.Timeout.Seconds()))
	// The kernel's own start and the driver's interrupt grace come on top
	// of the cell's timeout.
	cctx, cancel := context.WithTimeout(ctx, spec.Timeout+margin+kernelMargin)
	defer cancel()
	res, err := c.CodeExecute(cctx, CodeExecuteRequest{Language: executors.LangPython, Code: spec.Code, Timeout: &secs,
		Cwd: spec.Layout.Dir(), Stateful: true, SessionID: kernelSession, XSandgate: ext})
	if err != nil {
		return executors.Result{}, classify(ctx, cctx, err)
	}
	if res.XSandgate == nil {
		return executors.Result{}, fmt.Errorf("aio: %w: the sandbox's server does not host sandgate kernels", errUnknownOutcome)
	}
	o, err1 := base64.StdEncoding.DecodeString(res.XSandgate.StdoutB64)
	e, err2 := base64.StdEncoding.DecodeString(res.XSandgate.StderrB64)
	if err := errors.Join(err1, err2); err != nil {
		return executors.Result{}, fmt.Errorf("aio: decode output: %w", err)
	}
	out := executors.Result{Duration: time.Since(start),
		Stdout: capText(o, lim.MaxOutputBytes, res.XSandgate.StdoutTruncated), Stderr: capText(e, lim.MaxOutputBytes, res.XSandgate.StderrTruncated),
		Truncated: res.XSandgate.Truncated || res.XSandgate.ResultsDropped,
		Cell:      &executors.CellResult{KernelRestarted: res.XSandgate.KernelRestarted}}
	if res.XSandgate.SpillPath != nil && res.XSandgate.Truncated {
		out.OutputPath = *res.XSandgate.SpillPath
	}
	for _, o := range res.Outputs {
		if o.OutputType == "display_data" || o.OutputType == "execute_result" {
			out.Cell.Results = append(out.Cell.Results, executors.Bundle(o.Data))
		}
	}
	switch {
	case res.Status == "timeout":
		out.ExitCode, out.TimedOut = executors.ExitCodeTimeout, true
	case res.ExitCode != nil:
		out.ExitCode = *res.ExitCode
	default:
		out.ExitCode = 1
	}
	return out, nil
}

const (
	// kernelMargin is added to a cell's HTTP deadline: the kernel's start
	// on the first cell and the driver's interrupt grace.
	kernelMargin = 2 * time.Minute
	// kernelCPUSeconds is the kernel's RLIMIT_CPU, over its whole life
	// (the docker executor's figure).
	kernelCPUSeconds = 3600
)

// RestartKernel implements executors.KernelHost: sandboxd kills the
// session's kernel, and the next cell starts one. A session without a
// ready instance has no kernel.
func (e *Executor) RestartKernel(ctx context.Context, sessionID string) (bool, error) {
	c, ok := e.Client(sessionID)
	if !ok {
		return false, nil
	}
	err := c.JupyterSessionDelete(ctx, kernelSession)
	var apiErr *APIError
	if errors.As(err, &apiErr) && apiErr.Status == 404 {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("aio: restart kernel: %w", err)
	}
	return true, nil
}
