package manager_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/executortest"
	"github.com/sandgate/sandgate/executors/output"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/policy"
)

// detachedFake is a docker fake that holds detached runs: each writes
// "started" and then lives until Kill.
type detachedFake struct {
	*executortest.Fake
	started chan executors.Spec
}

type fakeDetachedRun struct {
	killed chan struct{}
	pr     *io.PipeReader
	pw     *io.PipeWriter
}

func (f *detachedFake) StartDetached(_ context.Context, spec executors.Spec, stdin bool) (executors.Detached, error) {
	r := &fakeDetachedRun{killed: make(chan struct{})}
	r.pr, r.pw = io.Pipe()
	if !stdin {
		_ = r.pw.Close()
	}
	spec.Output(output.Chunk{Seq: 1, Stream: output.Stdout, Data: []byte("started\n")})
	f.started <- spec
	return r, nil
}

func (r *fakeDetachedRun) Stdin() io.WriteCloser { return r.pw }
func (r *fakeDetachedRun) Kill()                 { close(r.killed) }
func (r *fakeDetachedRun) Wait() (executors.Result, error) {
	<-r.killed
	return executors.Result{Stdout: "started\n", ExitCode: 137}, nil
}

func detachedDecision() *policy.Decision {
	return &policy.Decision{Action: policy.ActionAllow, Executor: "docker",
		Obligations: policy.Obligations{TimeoutS: 30, MemoryMB: 512, MaxProcs: 64}}
}

// TestStartDetachedNeedsAnExecutorThatHoldsIt: an executor that cannot
// hold a detached run is a denial naming the capability, audited, never
// a blocking run instead.
func TestStartDetachedNeedsAnExecutorThatHoldsIt(t *testing.T) {
	h := newHarness(t, hopts{decision: detachedDecision()})
	req := request("bash", "python3 -m http.server 8000")
	req.Kind = manager.KindExecute
	d, _, err := h.m.StartDetached(t.Context(), req, false)
	if d != nil || !errors.Is(err, manager.ErrPolicyDenied) {
		t.Fatalf("StartDetached on a plain executor: %v, %v", d, err)
	}
	var de *manager.DeniedError
	if !errors.As(err, &de) || len(de.Reasons) == 0 || de.Reasons[len(de.Reasons)-1].Code != policy.ReasonCapabilityMissing ||
		!strings.Contains(de.Reasons[len(de.Reasons)-1].Message, executors.CapDetached) {
		t.Errorf("want the capability named: %+v", de)
	}
	if n := len(h.docker.Calls()); n != 0 {
		t.Errorf("the executor ran it anyway (%d calls)", n)
	}
	if rec := h.oneRecord(t); rec.Outcome != audit.OutcomeDenied || rec.Detail["detached"] != "true" {
		t.Errorf("record: %+v", rec)
	}
}

// TestStartDetachedOutlivesItsRequest: the policy sees request.detached;
// the run is audited when it starts and completed when it ends (here by
// Kill, after the starting request's context is gone: failed, 137, as
// a killed blocking run is); its output is
// kept for a reader that comes later; stdin reaches it only when asked.
func TestStartDetachedOutlivesItsRequest(t *testing.T) {
	fake := &detachedFake{Fake: &executortest.Fake{KindValue: executors.KindDocker}, started: make(chan executors.Spec, 1)}
	h := newHarness(t, hopts{decision: detachedDecision(), execs: []executors.Executor{fake}})
	req := request("bash", "python3 -m http.server 8000")
	req.Kind = manager.KindExecute
	ctx, cancel := context.WithCancel(t.Context())
	d, out, err := h.m.StartDetached(ctx, req, false)
	if err != nil {
		t.Fatalf("StartDetached: %v", err)
	}
	cancel() // the request that started it is gone
	if in := h.decider.Inputs(); len(in) != 1 || !in[0].Request.Detached {
		t.Errorf("the policy did not see a detached run: %+v", in)
	}
	if out.SandboxType != "docker" {
		t.Errorf("started on %q", out.SandboxType)
	}
	if spec := <-fake.started; spec.Timeout != 30*time.Second || spec.WorkspaceDir == "" {
		t.Errorf("spec: %+v", spec)
	}
	if recs := h.audit.Records(); len(recs) != 1 || recs[0].Outcome != audit.OutcomeStarted {
		t.Fatalf("want the run audited as started: %+v", recs)
	}
	if _, err := d.Stdin().Write([]byte("x")); err == nil {
		t.Error("a run started without input took input")
	}
	chunks, next, done, _ := d.Since(0)
	if len(chunks) != 1 || string(chunks[0].Data) != "started\n" || next != 1 || done {
		t.Fatalf("output for a later reader: %+v %d %v", chunks, next, done)
	}
	d.Kill()
	for {
		_, _, done, changed := d.Since(next)
		if done {
			break
		}
		select {
		case <-changed:
		case <-time.After(10 * time.Second):
			t.Fatal("the run did not end after Kill")
		}
	}
	res, err := d.Result()
	if err != nil || res.Result.ExitCode != 137 {
		t.Fatalf("result: %+v %v", res, err)
	}
	recs := h.audit.Records()
	if len(recs) != 1 || recs[0].Outcome != audit.OutcomeFailed || recs[0].ExitCode == nil || *recs[0].ExitCode != 137 ||
		recs[0].Detail["detached"] != "true" {
		t.Errorf("want the record completed at the end: %+v", recs)
	}
}

// TestDetachedRunHoldsItsConcurrencySlot: a detached run counts among its
// tenant's concurrent runs for as long as it lives, not only while it
// starts, so background commands cannot hold sandboxes past the quota.
func TestDetachedRunHoldsItsConcurrencySlot(t *testing.T) {
	fake := &detachedFake{Fake: &executortest.Fake{KindValue: executors.KindDocker}, started: make(chan executors.Spec, 2)}
	h := newHarness(t, hopts{decision: detachedDecision(), execs: []executors.Executor{fake},
		cfg: manager.Config{Quotas: manager.QuotaConfig{Tenants: map[string]manager.Quota{"team-a": {MaxConcurrentRuns: 1}}}}})
	req := request("bash", "python3 -m http.server 8000")
	req.Kind, req.Principal = manager.KindExecute, teamA
	d, _, err := h.m.StartDetached(t.Context(), req, false)
	if err != nil {
		t.Fatalf("first: %v", err)
	}
	<-fake.started
	second := req
	second.RequestID = "req-2"
	if _, _, err := h.m.StartDetached(t.Context(), second, false); !errors.Is(err, manager.ErrConcurrencyQuota) {
		t.Fatalf("second while the first lives: %v, want the concurrency quota", err)
	}
	d.Kill()
	deadline := time.Now().Add(10 * time.Second)
	for {
		third := req
		third.RequestID = "req-3"
		_, _, err := h.m.StartDetached(t.Context(), third, false)
		if err == nil {
			break
		}
		if !errors.Is(err, manager.ErrConcurrencyQuota) || time.Now().After(deadline) {
			t.Fatalf("after the first ended: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
