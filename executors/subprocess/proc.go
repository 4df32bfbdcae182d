package subprocess

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/process"
)

// proc is one started launch chain, cold or warm. Its reaper goroutine
// waits for the init step to exit without reaping it, kills what is left
// of its process group, and only then reaps it. kill may be called from
// any goroutine at any time: it never signals a pid that was already
// reaped, so it cannot hit a reused one.
type proc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	reaped bool
	exited chan struct{} // the init step has exited (a zombie, its pid still ours)
	done   chan struct{} // reaped, output pipes drained; state and err are set
	state  *os.ProcessState
	err    error
	// release ends the thread a rooted launch was forked from (see
	// startInRoot); nil for launches from the shared spawner.
	release chan struct{}
}

// startLaunch starts cmd, made by command(l), and reaps it in the
// background: from a thread of its own inside l's minimal root when l has
// one, from the shared spawner thread otherwise.
func (e *Executor) startLaunch(cmd *exec.Cmd, l launch) (*proc, error) {
	p := &proc{cmd: cmd, exited: make(chan struct{}), done: make(chan struct{})}
	if l.root != nil && e.isolation == IsolationNamespaces {
		base, err := e.base.get(e.sysRoot, e.stage)
		if err != nil {
			return nil, err
		}
		release, err := startInRoot(cmd, *l.root, base, l.bridge.fd(), l.slot)
		if err != nil {
			return nil, err
		}
		p.release = release
	} else if err := start(cmd); err != nil {
		return nil, err
	}
	go p.reap(e.log)
	return p, nil
}

func (p *proc) reap(log *slog.Logger) {
	pid := p.cmd.Process.Pid
	if err := process.AwaitExit(pid); err != nil {
		log.Warn("waitid", "error", err.Error())
	}
	p.mu.Lock()
	// The leader is a zombie, so its pid still names our group: kill what
	// is left of it (background jobs in process-group mode).
	_ = process.KillGroup(pid)
	p.reaped = true
	p.mu.Unlock()
	close(p.exited)
	p.err = p.cmd.Wait()
	p.state = p.cmd.ProcessState
	if p.release != nil {
		close(p.release)
	}
	close(p.done)
}

// kill SIGKILLs the whole tree (see killTree) unless it was reaped.
func (p *proc) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.reaped {
		_ = process.KillGroup(p.cmd.Process.Pid)
	}
}

// waitDone waits until p is reaped or ctx is done.
func (p *proc) waitDone(ctx context.Context) error {
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// await waits for p, killing the tree when runCtx is done first, and turns
// its end into a Result. began is when the run's clock started. A parent
// ctx that ended first is returned as an error (the client went away); the
// timeout is a Result.
func (e *Executor) await(ctx, runCtx context.Context, p *proc, out *output, began time.Time) (executors.Result, error) {
	select {
	case <-p.exited:
	case <-runCtx.Done():
		p.kill()
		<-p.exited
	}
	deadlineHit := runCtx.Err() != nil
	<-p.done
	res := executors.Result{Duration: time.Since(began)}
	res.Stdout, res.Stderr, res.Truncated, res.OutputPath = out.finish()
	if p.state == nil {
		return res, fmt.Errorf("subprocess: wait: %w", p.err)
	}
	res.ExitCode = process.ExitCode(p.state)
	if deadlineHit {
		if ctx.Err() != nil {
			return res, fmt.Errorf("subprocess: run aborted: %w", context.Cause(ctx))
		}
		res.ExitCode, res.TimedOut = executors.ExitCodeTimeout, true
	}
	return res, nil
}
