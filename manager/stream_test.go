package manager_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/confirm"
	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/output"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/risk"
)

// TestRunStreamingHooks: OnDecision comes once, after the policy and
// before the run, with the decision the response reports; OnOutput is
// the executor's Spec.Output, so what the executor taps reaches the
// caller while it runs.
func TestRunStreamingHooks(t *testing.T) {
	h := newHarness(t, hopts{})
	var order []string
	h.sub.ExecuteFunc = func(_ context.Context, spec executors.Spec) (executors.Result, error) {
		order = append(order, "execute")
		if spec.Output == nil {
			t.Fatal("the executor got no Output")
		}
		spec.Output(output.Chunk{Seq: 1, Stream: output.Stdout, Data: []byte("hi\n")})
		return executors.Result{Stdout: "hi\n"}, nil
	}
	req := request("python", safePython)
	var decided []policy.Decision
	req.OnDecision = func(a risk.Assessment, d policy.Decision) {
		order = append(order, "decision:"+a.Level.String())
		decided = append(decided, d)
	}
	req.OnOutput = func(c output.Chunk) { order = append(order, "output:"+string(c.Data)) }
	res, err := h.m.Run(t.Context(), req)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := strings.Join(order, ","); got != "decision:SAFE,execute,output:hi\n" {
		t.Errorf("order %q", got)
	}
	if len(decided) != 1 || decided[0].Action != res.Decision.Action || decided[0].Executor != res.Decision.Executor {
		t.Errorf("OnDecision got %+v, the result has %+v", decided, res.Decision)
	}
}

// TestRunCancelledWhileHeld: a client that goes away while its request
// waits for an approver is recorded as cancelled (not as a denial), with
// the withdrawn approval, and nothing runs.
func TestRunCancelledWhileHeld(t *testing.T) {
	h := newHarness(t, hopts{})
	gone, cancel := context.WithCancel(t.Context())
	h.confirm.fn = func(ctx context.Context, _ confirm.Request) (confirm.Outcome, error) {
		cancel()
		<-ctx.Done()
		return confirm.Outcome{ApprovalID: "ap-9", Status: confirm.StatusWithdrawn, Reason: "the agent withdrew the request"}, nil
	}
	_, err := h.m.Run(gone, request("python", highPython))
	if !errors.Is(err, manager.ErrCancelled) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v, want ErrCancelled wrapping context.Canceled", err)
	}
	rec := h.oneRecord(t)
	if rec.Outcome != manager.OutcomeCancelled || rec.ErrorCode != "cancelled" || rec.Approval == nil || rec.Approval.Status != confirm.StatusWithdrawn {
		t.Errorf("record outcome %q code %q approval %+v", rec.Outcome, rec.ErrorCode, rec.Approval)
	}
	if n := len(h.docker.Calls()) + len(h.sub.Calls()); n != 0 {
		t.Errorf("executed %d times", n)
	}
}
