package manager

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/output"
	"github.com/sandgate/sandgate/policy"
)

// Detached runs (issue 28 item 3): a run that outlives the request that
// started it, as E2B's processes do, and as an agent needs that starts a
// server and calls it from its next command.
//
// StartDetached takes the request through the same steps as Run:
// validation, the tenant's quotas, risk, the policy (which sees
// request.detached and routes by config.detached.executor), approval,
// and the executor's capabilities. The executor must hold detached runs
// (executors.DetachedHost, docker and gvisor today); one that cannot is a
// denial (capability_missing), never a blocking run instead. The audit
// record is written ahead when the run starts (outcome started) and
// completed when it ends, with its exit code and duration, whenever that
// is; the run.started and run.finished events bracket it likewise.
//
// The run lives in the session's sandbox until its program exits, its
// timeout (the decision's obligation) passes, Kill, or the session's
// release, which kills it through the executor's ReleaseSession.
//
// Its output is kept for readers that come and go (Since): every chunk
// the executor's collector keeps, so within the run's output caps
// (MaxOutputBytes per stream, the rest in the spill file), and of that at
// most DetachedBufferMax bytes: past it the oldest chunks are dropped and
// a reader that asks for them starts at the oldest kept.

// DetachedBufferMax bounds the output a detached run keeps for readers.
const DetachedBufferMax = 4 << 20

// DetachedChunk is one piece of a detached run's output.
type DetachedChunk struct {
	Stream output.Stream
	Data   []byte
}

// DetachedRun is a started detached run.
type DetachedRun struct {
	// RequestID names the run in the audit log.
	RequestID string
	// Started is the decision and the executor the run got.
	Started *RunResult

	h executors.Detached

	mu      sync.Mutex
	chunks  []DetachedChunk
	first   int // index of chunks[0] among all chunks
	bytes   int
	done    bool
	res     *RunResult
	err     error
	changed chan struct{}
}

func (d *DetachedRun) tap(c output.Chunk) {
	d.mu.Lock()
	d.chunks = append(d.chunks, DetachedChunk{Stream: c.Stream, Data: append([]byte(nil), c.Data...)})
	d.bytes += len(c.Data)
	for d.bytes > DetachedBufferMax && len(d.chunks) > 1 {
		d.bytes -= len(d.chunks[0].Data)
		d.chunks = d.chunks[1:]
		d.first++
	}
	d.notify()
	d.mu.Unlock()
}

// notify wakes the readers; call with d.mu held.
func (d *DetachedRun) notify() {
	close(d.changed)
	d.changed = make(chan struct{})
}

// Since returns the chunks from the i-th on (from the oldest kept when
// those are gone), the index to ask from next, whether the run has
// ended, and a channel closed at the next change.
func (d *DetachedRun) Since(i int) (chunks []DetachedChunk, next int, done bool, changed <-chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	i = max(i, d.first)
	end := d.first + len(d.chunks)
	return d.chunks[i-d.first:], end, d.done, d.changed
}

// Result is the run's outcome once Since reports it done: the result, or
// the error that ended it.
func (d *DetachedRun) Result() (*RunResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.res, d.err
}

// Kill ends the run now (exit code 137).
func (d *DetachedRun) Kill() { d.h.Kill() }

// Stdin is the program's standard input; Close gives it EOF.
func (d *DetachedRun) Stdin() io.WriteCloser { return d.h.Stdin() }

// StartDetached decides req as Run does and, when it may run, starts it
// detached and returns at once; stdin keeps the program's input open
// (otherwise it reads EOF). The error is Run's for a refused request.
func (m *Manager) StartDetached(ctx context.Context, req RunRequest, stdin bool) (d *DetachedRun, out *RunResult, err error) {
	start := time.Now()
	req.Detached = true
	rec := newRecord(req)
	setDetail(rec, "front_end", frontEndOf(ctx))
	setDetail(rec, "detached", "true")
	handed := false
	defer func() {
		if !handed {
			m.finish(ctx, rec, out, err, start)
		}
	}()
	if err := m.validate(&req); err != nil {
		return nil, nil, err
	}
	if req.ref, err = m.ResolveSession(req.Principal, req.SessionID); err != nil {
		return nil, nil, err
	}
	rec.Tenant, rec.SessionID = req.ref.Tenant, req.ref.ID
	// The run holds its place among the tenant's concurrent runs until it
	// ends (awaitDetached), not only while it starts: a loop of
	// background commands would otherwise hold any number of sandboxes.
	release, err := m.admit(ctx, req.ref, opRun)
	defer func() {
		if !handed {
			release()
		}
	}()
	if err != nil {
		return nil, nil, err
	}
	sess, err := m.local(ctx, req.ref)
	if err != nil {
		return nil, nil, err
	}
	req.sessionSandbox = m.wantsSessionSandbox(sess)
	sess.begin()
	ranOn := ""
	defer func() { sess.end(ranOn) }()
	assessment, err := m.deps.Assessor.Assess(req.Code, req.Language)
	if err != nil {
		return nil, nil, invalidFields(FieldError{Field: "language", Code: "oneof", Message: "unsupported language"})
	}
	rec.RiskLevel, rec.RiskPatterns = assessment.Level.String(), patternIDs(assessment)
	decision := m.decide(ctx, req, assessment)
	recordDecision(rec, decision)
	if req.OnDecision != nil {
		req.OnDecision(assessment, decision)
	}
	out = &RunResult{Risk: assessment, Decision: decision}
	if err := m.gate(ctx, req, out); err != nil {
		rec.Approval = approvalRecord(out.Approval)
		return nil, out, err
	}
	rec.Approval = approvalRecord(out.Approval)
	exec, err := m.route(decision)
	if err != nil {
		return nil, out, err
	}
	spec := specFor(req, decision)
	if err := m.attachEgress(req, out, &spec); err != nil {
		recordDenial(rec, err)
		return nil, out, err
	}
	if err := enforceable(exec, spec, decision); err != nil {
		recordDenial(rec, err)
		return nil, out, err
	}
	host, ok := exec.(executors.DetachedHost)
	if !ok {
		err := capabilityDenied(exec.Kind(), &executors.CapabilityError{Kind: exec.Kind(),
			Missing: []string{executors.CapDetached}, Isolation: exec.Capabilities().Isolation}, decision)
		recordDenial(rec, err)
		return nil, out, err
	}
	if err := m.auditAhead(ctx, rec, exec); err != nil {
		return nil, out, err
	}
	d = &DetachedRun{RequestID: req.RequestID, Started: out, changed: make(chan struct{})}
	h, err := m.startDetached(ctx, sess, host, exec.Kind(), spec, stdin, d, decision)
	if err != nil {
		recordDenial(rec, err)
		return nil, out, err
	}
	d.h, handed, ranOn = h, true, string(exec.Kind())
	out.SandboxType = string(exec.Kind())
	m.emit(ctx, "run.started", req.ref, runEventData(rec, ""))
	go func() {
		defer release()
		m.awaitDetached(context.WithoutCancel(ctx), req.ref, rec, d, start)
	}()
	return d, out, nil
}

// startDetached is execute's part for a detached run: the workspace, the
// session still served, the executor's start and its errors' meaning.
func (m *Manager) startDetached(ctx context.Context, sess *Session, host executors.DetachedHost, kind executors.Kind,
	spec executors.Spec, stdin bool, d *DetachedRun, decision policy.Decision) (executors.Detached, error) {
	dir, err := m.deps.Workspaces.Ensure(ctx, spec.SessionID)
	if err != nil {
		return nil, err
	}
	if err := m.stillServed(sess); err != nil {
		return nil, err
	}
	if spec.Layout, err = m.layoutFor(ctx, sess, spec.SessionID); err != nil {
		return nil, err
	}
	spec.WorkspaceDir, spec.UID, spec.GID = dir.Path, dir.UID, dir.GID
	spec.Output = d.tap
	h, err := host.StartDetached(ctx, spec, stdin)
	switch {
	case err == nil:
		// A session deleted while the run started (a container start
		// takes a while) was released without it: the run must not
		// outlive it, nor leave the executor holding state for it.
		if err := m.stillServed(sess); err != nil {
			h.Kill()
			_, _ = h.Wait()
			if r, ok := host.(executors.SessionReleaser); ok {
				_ = r.ReleaseSession(context.WithoutCancel(ctx), spec.SessionID)
			}
			return nil, err
		}
		return h, nil
	case ctx.Err() != nil: // killed while it started, or the client left
		return nil, fmt.Errorf("%w: %w", ErrCancelled, context.Cause(ctx))
	case errors.Is(err, executors.ErrCapabilityMissing):
		return nil, capabilityDenied(kind, err, decision)
	case errors.Is(err, executors.ErrUnavailable):
		m.avail.RunFailed(kind, err)
		return nil, denied(ErrExecutorUnavailable, decision, policy.Reason{Code: policy.ReasonExecutorUnavailable,
			Message: "executor " + string(kind) + " is not available: " + unavailableReason(err)})
	}
	return nil, err
}

// awaitDetached waits for the run's end and completes its audit record
// and its readers' view.
func (m *Manager) awaitDetached(ctx context.Context, ref SessionRef, rec *audit.Record, d *DetachedRun, start time.Time) {
	res, err := d.h.Wait()
	out := *d.Started
	out.Result = res
	m.finish(ctx, rec, &out, err, start)
	m.emit(ctx, "run.finished", ref, runEventData(rec, rec.Outcome))
	d.mu.Lock()
	d.res, d.err, d.done = &out, err, true
	d.notify()
	d.mu.Unlock()
}
