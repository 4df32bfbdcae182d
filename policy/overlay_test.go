package policy

import (
	"context"
	"testing"
	"time"
)

// TestEgressOverlayAndReplay: a replay with a candidate rule shows the
// connection it would allow and leaves the others and the live decisions
// alone; the rule set as the overlay then decides live connections, and
// an empty overlay takes it away.
func TestEgressOverlayAndReplay(t *testing.T) {
	ctx := context.Background()
	e, err := New(ctx, Options{EvalTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	conn := func(host, session string) EgressInput {
		return EgressInput{Mode: "STRICT", Host: host, Port: 443, Scheme: "https", SessionID: session, Tenant: "t1",
			Resolved: []string{"198.51.100.7"}}
	}
	rule := map[string]any{"name": "proposal:p1", "action": "allow", "hosts": []any{"pkg.example.org"},
		"sessions": []any{"t1/s1"}}
	ins := []EgressInput{conn("pkg.example.org", "s1"), conn("pkg.example.org", "s2"), conn("other.example.org", "s1")}
	cand, err := e.ReplayEgress(ctx, []map[string]any{rule}, ins)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"allow", "deny", "deny"}
	for i, in := range ins {
		if now := e.DecideEgressQuietly(ctx, in); now.Allowed() || cand[i].Action != want[i] {
			t.Errorf("%d: now %s, candidate %s (%s), want %s", i, now.Action, cand[i].Action, cand[i].Rule, want[i])
		}
	}
	if d := e.DecideEgress(ctx, ins[0]); d.Allowed() {
		t.Fatal("the replay's candidate leaked into live decisions")
	}
	if err := e.SetEgressOverlay(ctx, []map[string]any{rule}); err != nil {
		t.Fatal(err)
	}
	if d := e.DecideEgress(ctx, ins[0]); !d.Allowed() || d.Rule != "proposal:p1" {
		t.Fatalf("with the overlay: %+v", d)
	}
	if d := e.DecideEgress(ctx, ins[1]); d.Allowed() {
		t.Fatal("the overlay allowed another session")
	}
	if err := e.SetEgressOverlay(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if d := e.DecideEgress(ctx, ins[0]); d.Allowed() {
		t.Fatal("the overlay outlived its removal")
	}
}
