package confirm

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestFleet_PeerMirrors: a request held on A shows on B, code included
// (fetched from A through the Peer), is decided there, and leaves B's
// list; a peer whose code does not match the hash in the database is not
// believed, and the request does not show on B.
func TestFleet_PeerMirrors(t *testing.T) {
	var holder atomic.Pointer[Hub]
	var lie atomic.Bool
	var calls atomic.Int32
	peer := func(_ context.Context, replica, id string) (View, error) {
		calls.Add(1)
		h := holder.Load()
		if replica != "a" || h == nil {
			return View{}, errors.New("no such replica")
		}
		v, ok := h.PeerView(id)
		if !ok {
			return View{}, ErrNotFound
		}
		if lie.Load() {
			v.Code = "print('harmless')"
		}
		return v, nil
	}
	hubs := fleetB(t, 2, HubOptions{Peer: peer})
	a, b := hubs[0], hubs[1]
	holder.Store(a)

	wait := confirmAsync(t.Context(), a, request("s1", "import subprocess"))
	v := waitPending(t, b, 1)[0]
	if v.Code != "import subprocess" || v.Principal != "agent-1" || v.SessionID != "s1" {
		t.Fatalf("A's request as B shows it: %+v", v)
	}
	if _, err := b.Decide(t.Context(), v.ID, Approver{Name: "bob"}, Decision{Decision: "approve", Digest: v.Digest}); err != nil {
		t.Fatal(err)
	}
	if out := wait.wait(t); out.Status != StatusApproved || out.DecidedBy != "bob" {
		t.Fatalf("A's outcome: %+v", out)
	}
	waitPending(t, b, 0)

	lie.Store(true)
	before := calls.Load()
	wait = confirmAsync(t.Context(), a, request("s2", "import subprocess"))
	waitPending(t, a, 1)
	for deadline := time.Now().Add(10 * time.Second); calls.Load() == before; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("B never asked A")
		}
	}
	time.Sleep(100 * time.Millisecond) // B's check runs right after the answer
	if p := b.Pending(); len(p) != 0 {
		t.Fatalf("B shows a peer's approval whose code does not match the database: %+v", p)
	}
	if _, err := a.Decide(t.Context(), waitPending(t, a, 1)[0].ID, Approver{Name: "ann"}, Decision{Decision: "deny"}); err != nil {
		t.Fatal(err)
	}
	wait.wait(t)
}
