package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/kernel"
	"github.com/sandgate/sandgate/executors/output"
)

// Stateful runs (DESIGN.md §11, executors/kernel). A session's kernel
// lives in a container of its own, created like a run's (network none,
// read-only root, all capabilities dropped, the session's uid, the
// workspace at /workspace) whose command is the kernel driver instead of
// the boot script. The container's memory and pids limits therefore
// bound the kernel over its whole life. The container stays until the
// session is deleted, the kernel idles for kernelIdle, or the gateway
// stops.
const (
	// kernelIdle removes a kernel nobody used for this long (the AIO
	// sandbox's Jupyter sessions expire after the same 30 minutes); the
	// next cell starts a new one and says so.
	kernelIdle = 30 * time.Minute
	// kernelCPUSeconds is RLIMIT_CPU of a kernel's processes: CPU time
	// summed over the kernel's life, not one cell (each cell has its
	// timeout). A kernel that used it up is killed and restarted on the
	// next cell.
	kernelCPUSeconds = 3600
	// kernelStart bounds the driver's start (container, Python, ipykernel).
	kernelStart = 2 * time.Minute
	// labelKernel marks a kernel's container.
	labelKernel = labelPrefix + "kernel"
)

// dkernel is one session's kernel container.
type dkernel struct {
	b    *box
	conn *kernel.Conn
	idle *time.Timer
}

// kernels holds the kernels by session. had remembers sessions whose
// kernel is gone, so that the next cell reports the restart.
type kernels struct {
	e   *Executor
	mu  sync.Mutex
	m   map[string]*dkernel
	had map[string]bool
}

func newKernels(e *Executor) *kernels {
	return &kernels{e: e, m: map[string]*dkernel{}, had: map[string]bool{}}
}

// executeCell is Execute for a stateful Spec.
func (e *Executor) executeCell(ctx context.Context, spec executors.Spec) (executors.Result, error) {
	if spec.SessionID == "" {
		return executors.Result{}, fmt.Errorf("%s: a stateful run needs a session", e.cfg.Kind)
	}
	if spec.Language != executors.LangPython {
		return executors.Result{}, fmt.Errorf("%s: %w: stateful runs are python only", e.cfg.Kind, executors.ErrUnsupportedLanguage)
	}
	if spec.Network {
		// The egress bridge starts with a run's boot script, which a
		// kernel's container does not have: fail closed, with the reason.
		return executors.Result{}, &executors.CapabilityError{Kind: e.cfg.Kind,
			Missing: []string{executors.CapNetworkGrant}, Isolation: "stateful kernel"}
	}
	spec, err := e.prologue.Resolve(spec)
	if err != nil {
		return executors.Result{}, err
	}
	dir, err := checkWorkspace(spec.WorkspaceDir, spec.UID, spec.GID)
	if err != nil {
		return executors.Result{}, err
	}
	lim := spec.Limits
	lim.CPUSeconds = kernelCPUSeconds
	sh := newShape(e.cfg.Images[executors.LangPython], dir, spec.UID, spec.GID, lim, e.cfg.Runtime).withLayout(spec.Layout)
	log := e.log.With("request_id", spec.RequestID, "session_id", spec.SessionID)
	began := time.Now()
	k, started, err := e.kernels.get(ctx, spec.SessionID, sh)
	if err != nil {
		return executors.Result{}, err
	}
	release, err := k.conn.Acquire(ctx)
	if err != nil {
		return executors.Result{}, fmt.Errorf("docker: wait for the kernel: %w", err)
	}
	defer release()
	res, err := e.cell(ctx, k, spec, dir, log)
	if res.Cell == nil {
		res.Cell = &executors.CellResult{}
	}
	res.Cell.KernelRestarted = res.Cell.KernelRestarted || started
	res.Duration = time.Since(began)
	return res, err
}

// cell runs spec's code in k and maps the outcome to a Result.
func (e *Executor) cell(ctx context.Context, k *dkernel, spec executors.Spec, dir string, log *slog.Logger) (executors.Result, error) {
	rel, shown := output.SpillPaths(spec.RequestID)
	out := output.New(output.Options{
		Limit: spec.Limits.MaxOutputBytes, Mask: output.HostPaths(dir), SpillPath: shown, Tap: spec.Output,
		Spill: output.Spill{
			Limit:   spec.Limits.MaxSpillBytes,
			Open:    func() (io.WriteCloser, error) { return output.CreateIn(dir, rel) },
			OnError: func(err error) { log.Warn("spill file", "err", err.Error()) },
		},
	})
	oc, err := k.conn.Run(ctx, kernel.Cell{Code: spec.Code, Timeout: spec.Timeout, Mask: output.HostPaths(dir)},
		out.Stdout(), out.Stderr())
	if errors.Is(err, kernel.ErrGone) || errors.Is(err, kernel.ErrStuck) {
		oom := e.oomKilled(k.b.id)
		e.kernels.drop(spec.SessionID, k)
		log.Info("kernel container lost", "err", err.Error(), "oom_killed", oom)
		_, _ = io.WriteString(out.Stderr(), "sandgate: the kernel's sandbox ended; the next call starts a new kernel\n")
		oc = kernel.Outcome{ExitCode: exitSIGKILL, Died: true, TimedOut: errors.Is(err, kernel.ErrStuck)}
		if oc.TimedOut {
			oc.ExitCode = executors.ExitCodeTimeout
		}
		o := out.Finish()
		return executors.Result{Stdout: o.Stdout, Stderr: o.Stderr, ExitCode: oc.ExitCode, TimedOut: oc.TimedOut,
			OOMKilled: oom, Truncated: o.Truncated, OutputPath: o.SpillPath}, nil
	}
	o := out.Finish()
	res := executors.Result{Stdout: o.Stdout, Stderr: o.Stderr, ExitCode: oc.ExitCode, TimedOut: oc.TimedOut,
		Truncated: o.Truncated || oc.Dropped, OutputPath: o.SpillPath,
		Cell: &executors.CellResult{Results: oc.Results, KernelRestarted: oc.Restarted}}
	if err != nil {
		return res, fmt.Errorf("docker: cell: %w", err)
	}
	k.touch()
	return res, nil
}

// get returns the session's kernel, starting one when there is none or
// the one there cannot serve sh (dead, or made for other limits or
// another workspace). started reports that a kernel the session had
// before was replaced.
func (ks *kernels) get(ctx context.Context, session string, sh shape) (*dkernel, bool, error) {
	ks.mu.Lock()
	k := ks.m[session]
	if k != nil && k.conn.Alive() && !k.b.exit.exited() && k.b.shape == sh {
		ks.mu.Unlock()
		return k, false, nil
	}
	had := ks.had[session] || k != nil
	if k != nil {
		delete(ks.m, session)
		ks.e.discardKernel(k)
	}
	ks.mu.Unlock()
	// Two first cells of one session may both start a kernel; the loser's
	// is removed and it uses the winner's.
	nk, err := ks.e.startKernel(ctx, session, sh)
	if err != nil {
		return nil, false, err
	}
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if cur := ks.m[session]; cur != nil && cur.conn.Alive() && cur.b.shape == sh {
		ks.e.discardKernel(nk)
		return cur, had, nil
	}
	ks.m[session] = nk
	ks.had[session] = true
	nk.idle = time.AfterFunc(kernelIdle, func() { ks.expire(session, nk) })
	return nk, had, nil
}

// drop removes k if it is still the session's kernel; the next cell
// starts a new one and reports the restart.
func (ks *kernels) drop(session string, k *dkernel) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if ks.m[session] == k {
		delete(ks.m, session)
	}
	ks.e.discardKernel(k)
}

func (ks *kernels) expire(session string, k *dkernel) {
	ks.drop(session, k)
}

// release kills the session's kernel for good (the session is deleted).
func (ks *kernels) release(session string) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if k := ks.m[session]; k != nil {
		ks.e.discardKernel(k)
	}
	delete(ks.m, session)
	delete(ks.had, session)
}

func (ks *kernels) closeAll() {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	for s, k := range ks.m {
		ks.e.discardKernel(k)
		delete(ks.m, s)
	}
}

func (k *dkernel) touch() {
	if k.idle != nil {
		k.idle.Reset(kernelIdle)
	}
}

// RestartKernel implements executors.KernelHost: the driver replaces the
// kernel in the same container (the container's limits keep counting);
// a kernel whose container is gone is dropped, and the next cell starts
// one. It waits for a running cell of the session to finish.
func (e *Executor) RestartKernel(ctx context.Context, session string) (bool, error) {
	e.kernels.mu.Lock()
	k := e.kernels.m[session]
	had := e.kernels.had[session]
	e.kernels.mu.Unlock()
	if k == nil {
		return had, nil
	}
	release, err := k.conn.Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("docker: wait for the kernel: %w", err)
	}
	defer release()
	rctx, cancel := context.WithTimeout(ctx, kernelStart)
	defer cancel()
	if err := k.conn.Restart(rctx); err != nil {
		if ctx.Err() != nil {
			return false, fmt.Errorf("docker: restart kernel: %w", context.Cause(ctx))
		}
		e.kernels.drop(session, k)
	}
	return true, nil
}

// startKernel creates the kernel container and waits for the driver's
// first kernel.
func (e *Executor) startKernel(ctx context.Context, session string, sh shape) (*dkernel, error) {
	labels := e.labels(session, "")
	delete(labels, labelWarm)
	labels[labelKernel] = "true"
	b, err := e.launch(ctx, sh, labels, func(opts *client.ContainerCreateOptions) {
		opts.Config.Entrypoint = kernel.Command()
		opts.Config.Cmd = nil
		opts.Config.StdinOnce = false // the driver reads cells for the container's life
	})
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	go func() {
		_, err := stdcopy.StdCopy(pw, driverLog{e.log, session}, b.conn.Reader)
		pw.CloseWithError(errOr(err, io.EOF))
	}()
	k := &dkernel{b: b, conn: kernel.New(b.conn.Conn, pr)}
	sctx, cancel := context.WithTimeout(ctx, kernelStart)
	defer cancel()
	if err := k.conn.Ready(sctx); err != nil {
		e.discardKernel(k)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("docker: start kernel: %w", context.Cause(ctx))
		}
		return nil, fmt.Errorf("docker: start kernel: %w", err)
	}
	return k, nil
}

func (e *Executor) discardKernel(k *dkernel) {
	if k.idle != nil {
		k.idle.Stop()
	}
	k.conn.Close()
	e.discard(k.b)
}

func errOr(err, def error) error {
	if err != nil {
		return err
	}
	return def
}

// driverLog logs what the driver writes to stderr (never cell output:
// that travels in the protocol), a line at a time, at debug.
type driverLog struct {
	log     *slog.Logger
	session string
}

func (d driverLog) Write(p []byte) (int, error) {
	const max = 512
	msg := string(p)
	if len(msg) > max {
		msg = msg[:max]
	}
	d.log.Debug("kernel driver", "session_id", d.session, "stderr", msg)
	return len(p), nil
}
