package docker

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/output"
)

// box is a created, attached and started container whose boot step waits
// for its program on stdin. It serves exactly one run.
type box struct {
	id     string
	shape  shape
	conn   client.HijackedResponse
	exit   *exitWatch
	egress *egressBox // nil unless the shape is granted network
	// slot is a pooled container's slot directory and release, when
	// set, removes it once the container is discarded (pool.go).
	slot    string
	release func()
	// holder is the network holder of a pooled pair until a claim makes
	// it a session's (poolpair.go).
	holder *box
	// procSock is the host path of a session sandbox's process server's
	// socket (procserver.go), "" when its commands are execs.
	procSock string
	// refill, set on a sandbox claimed from the pool, asks the pool for
	// its replacement (once; poolsandbox.go).
	refill func()
}

// exitWatch holds the outcome of the engine's wait on one container. The
// wait is registered before the container starts, so no exit is missed.
type exitWatch struct {
	done   chan struct{}
	code   int64
	err    error
	cancel context.CancelFunc
}

// watchExit registers the engine-side wait for the container's next exit.
// It returns once the engine has registered it.
func (e *Executor) watchExit(id string) *exitWatch {
	ctx, cancel := context.WithCancel(e.life)
	w := &exitWatch{done: make(chan struct{}), cancel: cancel}
	res := e.cli.ContainerWait(ctx, id, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})
	go func() {
		defer close(w.done)
		select {
		case r := <-res.Result:
			w.code = r.StatusCode
			if r.Error != nil && r.Error.Message != "" {
				w.err = errors.New(r.Error.Message)
			}
		case err := <-res.Error:
			w.err = err
		}
	}()
	return w
}

// exited reports whether the container is known to have exited.
func (w *exitWatch) exited() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// prepare creates, attaches and starts a container of shape sh. The wait
// and the attach are set up concurrently, both before the start, so no
// output and no exit can be missed. On failure nothing is left behind.
//
// The engine calls themselves are not cut short by ctx: a create whose
// answer was lost to a cancellation would leave a container nobody knows
// of. ctx is checked between the steps instead, so a cancelled request
// costs at most one step.
func (e *Executor) prepare(ctx context.Context, sh shape, labels map[string]string) (*box, error) {
	return e.launch(ctx, sh, labels, nil)
}

// launch is prepare with adjust, when set, applied to the engine's create
// request (a kernel's container differs from a run's in its command, see
// kernel.go).
func (e *Executor) launch(ctx context.Context, sh shape, labels map[string]string, adjust func(*client.ContainerCreateOptions)) (*box, error) {
	labels[labelBoot] = e.boot
	nonce := rand.Text() // labelCreate: finds this create's container if its answer is lost
	labels[labelCreate] = nonce
	opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.EngineTimeout)
	defer cancel()
	nf, err := e.netFilesMounts()
	if err != nil {
		return nil, err
	}
	var eb *egressBox
	if sh.egress {
		var err error
		if eb, err = e.newEgressBox(); err != nil {
			return nil, err
		}
	}
	opts := e.createOptions(sh, labels, eb)
	opts.HostConfig.Mounts = append(opts.HostConfig.Mounts, nf...)
	if adjust != nil {
		adjust(&opts)
	}
	created, err := e.cli.ContainerCreate(opCtx, opts)
	if err != nil {
		if eb != nil {
			eb.close()
		}
		e.sweepUnconfirmed(nonce)
		return nil, e.engineError(ctx, "create", err)
	}
	b := &box{id: created.ID, shape: sh, egress: eb}
	fail := func(op string, err error) (*box, error) {
		e.discard(b)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("docker: %s: %w", op, context.Cause(ctx))
		}
		return nil, e.engineError(ctx, op, err)
	}
	if ctx.Err() != nil {
		return fail("create", ctx.Err())
	}
	if eb != nil && sh.ca != "" {
		if err := e.writeBundle(opCtx, eb, b.id, sh.image, sh.ca); err != nil {
			e.discard(b)
			return nil, err
		}
	}
	var wg sync.WaitGroup
	var attachErr error
	wg.Go(func() { b.exit = e.watchExit(b.id) })
	wg.Go(func() {
		var a client.ContainerAttachResult
		a, attachErr = e.cli.ContainerAttach(opCtx, b.id, client.ContainerAttachOptions{
			Stream: true, Stdin: true, Stdout: true, Stderr: true,
		})
		b.conn = a.HijackedResponse
	})
	wg.Wait()
	if attachErr != nil || ctx.Err() != nil {
		return fail("attach", attachErr)
	}
	if _, err := e.cli.ContainerStart(opCtx, b.id, client.ContainerStartOptions{}); err != nil || ctx.Err() != nil {
		return fail("start", err)
	}
	return b, nil
}

// discard closes the box's connections and removes its container in the
// background.
func (e *Executor) discard(b *box) {
	if b.conn.Conn != nil {
		b.conn.Close()
	}
	if b.exit != nil {
		b.exit.cancel()
	}
	if b.egress != nil {
		b.egress.close()
	}
	if b.release != nil {
		b.release()
	}
	e.remove(b.id)
}

// runInput is what one run needs besides its container.
type runInput struct {
	lang, code string
	timeout    time.Duration
	limits     executors.Limits
	dir        string // host workspace
	requestID  string
	log        *slog.Logger
	tap        func(output.Chunk) // Spec.Output
	// stdin, when set, follows the program on the container's stdin
	// until it ends (a detached run's input, detached.go).
	stdin io.Reader
}

// run feeds the program to b and collects its output and exit status. At
// the timeout, or when ctx ends, the container is killed; the output
// written before that is kept. A parent ctx that ends is an error (the
// client went away), the timeout a Result.
func (e *Executor) run(ctx context.Context, b *box, in runInput) (executors.Result, error) {
	rel, shown := output.SpillPaths(in.requestID)
	out := newRunOutput(output.Options{
		Limit: in.limits.MaxOutputBytes,
		// The mount table inside the container names the host path.
		Mask:      output.HostPaths(in.dir),
		SpillPath: shown,
		Tap:       in.tap,
		Spill: output.Spill{
			Limit:   in.limits.MaxSpillBytes,
			Open:    func() (io.WriteCloser, error) { return output.CreateIn(in.dir, rel) },
			OnError: func(err error) { in.log.Warn("spill file", "err", err.Error()) },
		},
	})
	began := time.Now()
	copied := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(out.Stdout(), out.Stderr(), b.conn.Reader)
		copied <- err
	}()
	go e.feed(b, in, in.log)

	killedFor, copyErr := e.await(ctx, b, in.timeout, copied, out.ended)
	res, settled, err := runEnd(out, began, killedFor, copyErr)
	if settled {
		return res, err
	}
	code, waitErr := e.exitStatus(b)
	if waitErr != nil {
		return res, e.engineError(ctx, "wait", errors.Join(waitErr, copyErr))
	}
	res.ExitCode = int(code)
	if code == exitSIGKILL {
		res.OOMKilled = e.oomKilled(b.id)
	}
	return res, nil
}

// runEnd is the result of a run whose output has ended, as far as the
// run itself tells it (a container's run and a session sandbox's exec
// alike): an abort, a timeout, or the boot script's trailer. settled is
// false when the engine has the last word: without a trailer (the shell
// itself was killed) or for a SIGKILL, which may be the memory limit's.
func runEnd(out *runOutput, began time.Time, killedFor, copyErr error) (res executors.Result, settled bool, err error) {
	o := out.finish()
	res = executors.Result{Duration: time.Since(began), Stdout: o.Stdout, Stderr: o.Stderr,
		Truncated: o.Truncated, OutputPath: o.SpillPath}
	switch {
	case killedFor != nil && !errors.Is(killedFor, errTimedOut):
		return res, true, fmt.Errorf("docker: run aborted: %w", killedFor)
	case killedFor != nil:
		res.ExitCode, res.TimedOut = executors.ExitCodeTimeout, true
		return res, true, nil
	}
	if code, ok := out.exitStatus(); ok && code != exitSIGKILL && copyErr == nil {
		res.ExitCode = code
		return res, true, nil
	}
	return res, false, nil
}

// exitSIGKILL is the status of a process killed by SIGKILL: a kill, or the
// memory cgroup's OOM killer.
const exitSIGKILL = 128 + 9

// feed writes the header line (language and request id) and the program to the container's stdin
// and closes it. A container that died early makes the write fail; the
// run then reports what the container did.
func (e *Executor) feed(b *box, in runInput, log *slog.Logger) {
	r := io.MultiReader(bytes.NewReader(stdinHeader(in.lang, in.requestID)), bytes.NewReader([]byte(in.code)))
	if in.stdin != nil {
		r = io.MultiReader(r, in.stdin)
	}
	if _, err := io.Copy(b.conn.Conn, r); err != nil {
		log.Debug("write program", "err", err.Error())
	}
	if err := b.conn.CloseWrite(); err != nil {
		log.Debug("close stdin", "err", err.Error())
	}
}

// await waits for the output stream to end, or for both streams to end
// with the boot script's trailer (ended). At the timeout or when ctx ends
// it kills the container first, and after KillGrace it stops waiting for a
// stream the engine never closes. It returns why the container was killed
// (errTimedOut or ctx's cause), nil when it ended by itself.
func (e *Executor) await(ctx context.Context, b *box, timeout time.Duration, copied <-chan error, ended <-chan struct{}) (killedFor, copyErr error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	done := ctx.Done()
	var grace <-chan time.Time
	kill := func(why error) {
		killedFor = why
		deadline.Stop()
		done = nil
		e.kill(b.id)
		grace = time.After(e.cfg.KillGrace)
	}
	for {
		select {
		case copyErr = <-copied:
			return killedFor, copyErr
		case <-ended:
			return killedFor, nil
		case <-deadline.C:
			kill(errTimedOut)
		case <-done:
			kill(context.Cause(ctx))
		case <-grace:
			b.conn.Close() // unblocks the copy
			grace = nil
		}
	}
}

// kill SIGKILLs the container: every process in it dies with its PID
// namespace, setsid'd and double-forked ones included.
func (e *Executor) kill(id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(e.life), e.cfg.EngineTimeout)
	defer cancel()
	if _, err := e.cli.ContainerKill(ctx, id, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		e.log.Debug("kill container", "container", shortID(id), "err", err.Error())
	}
}

// exitStatus returns the container's exit code from the engine once the
// stream has ended.
func (e *Executor) exitStatus(b *box) (int64, error) {
	t := time.NewTimer(e.cfg.EngineTimeout)
	defer t.Stop()
	select {
	case <-b.exit.done:
		return b.exit.code, b.exit.err
	case <-t.C:
		return 0, errors.New("no exit status from the engine")
	}
}

// oomKilled asks the engine whether the memory limit killed the container
// (exit 137 is also what any SIGKILL gives). The engine learns of an OOM
// kill from its own event, which containerd may deliver after the exit
// (seen under runsc's shim: CI 14 read OOMKilled false on a run the limit
// had killed), so a "no" is asked again for a short while before it is
// believed. Only a SIGKILLed run pays that wait.
func (e *Executor) oomKilled(id string) bool {
	ctx, cancel := context.WithTimeout(e.life, e.cfg.EngineTimeout)
	defer cancel()
	deadline := time.Now().Add(oomEventGrace)
	for {
		r, err := e.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		if err != nil || r.Container.State == nil {
			return false
		}
		if r.Container.State.OOMKilled || time.Now().After(deadline) {
			return r.Container.State.OOMKilled
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(oomEventGrace / 10):
		}
	}
}

// oomEventGrace bounds how long oomKilled waits for a late OOM event.
const oomEventGrace = 300 * time.Millisecond
