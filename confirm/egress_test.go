package confirm

import (
	"context"
	"errors"
	"testing"
	"time"
)

// waitPending returns the pending approval of requestID.
func pendingOf(t *testing.T, h *testHub, requestID string) View {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for _, v := range h.Pending() {
			if v.RequestID == requestID {
				return v
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no pending approval for %s", requestID)
	return View{}
}

// TestEgressApprovalScope: an egress approval can be given for the
// session, which the outcome and the stored row both say; a run approval
// cannot; and the digest binds the target.
func TestEgressApprovalScope(t *testing.T) {
	h := newTestHub(t, HubOptions{})
	ctx := context.Background()
	who := Approver{Name: "alice", Role: "approver"}

	egress := Request{Kind: KindEgress, Target: "pypi.org:443", RequestID: "r-egress", Tenant: "t", SessionID: "s",
		Deadline: time.Now().Add(10 * time.Second)}
	done := make(chan Outcome, 1)
	go func() { o, _ := h.Confirm(ctx, egress); done <- o }()
	v := pendingOf(t, h, "r-egress")
	if v.Kind != KindEgress || v.Target != "pypi.org:443" {
		t.Fatalf("view kind %q target %q", v.Kind, v.Target)
	}
	other := egress
	other.Target = "evil.example:443"
	if v.Digest == other.Digest() {
		t.Fatal("the digest does not bind the target")
	}
	if _, err := h.Decide(ctx, v.ID, who, Decision{Decision: "approve", Scope: "forever"}); !errors.Is(err, ErrInvalidScope) {
		t.Fatalf("scope forever: %v", err)
	}
	if _, err := h.Decide(ctx, v.ID, who, Decision{Decision: "approve", Scope: ScopeSession}); err != nil {
		t.Fatal(err)
	}
	if o := <-done; !o.Approved() || o.Scope != ScopeSession {
		t.Fatalf("outcome %+v", o)
	}
	stored, err := h.Get(ctx, v.ID)
	if err != nil || stored.Scope != ScopeSession || stored.Kind != KindEgress || stored.Target != "pypi.org:443" {
		t.Fatalf("stored %+v %v", stored, err)
	}

	run := request("s", "print(1)")
	run.RequestID, run.Tenant = "r-run", "t"
	go func() { o, _ := h.Confirm(ctx, run); done <- o }()
	rv := pendingOf(t, h, "r-run")
	if rv.Kind != KindRun || rv.Digest != run.Digest() {
		t.Fatalf("run view kind %q", rv.Kind)
	}
	if _, err := h.Decide(ctx, rv.ID, who, Decision{Decision: "approve", Scope: ScopeSession}); !errors.Is(err, ErrInvalidScope) {
		t.Fatalf("a run approval for the session: %v", err)
	}
	if _, err := h.Decide(ctx, rv.ID, who, Decision{Decision: "approve"}); err != nil {
		t.Fatal(err)
	}
	if o := <-done; !o.Approved() || o.Scope != ScopeOnce {
		t.Fatalf("run outcome %+v", o)
	}
}
