package policy

import (
	"context"
	"testing"
	"time"
)

// TestExecutorOverlay: a replayed candidate routes the session's run to
// its executor without any other decision seeing it; set, the overlay
// routes that session's runs (not another's) until it is emptied.
func TestExecutorOverlay(t *testing.T) {
	ctx := context.Background()
	eng, err := New(ctx, Options{EvalTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	in := baseInput("PERMISSIVE", "LOW", false)
	in.Executors = executorStates("subprocess", "docker", "gvisor")
	in.Principal.Tenant = "team"
	other := in
	other.Request.SessionID = "another"
	key := "team/" + in.Request.SessionID
	executor := func(in Input) string { return eng.Decide(ctx, in).Executor }
	if got := executor(in); got != "subprocess" {
		t.Fatalf("without an overlay: %s", got)
	}
	ds, err := eng.ReplayExec(ctx, map[string]string{key: "gvisor"}, []Input{in, other})
	if err != nil || ds[0].Executor != "gvisor" || ds[0].Action != ActionAllow || ds[1].Executor != "subprocess" {
		t.Fatalf("replay: %+v %v", ds, err)
	}
	if got := executor(in); got != "subprocess" {
		t.Fatalf("the replay's candidate leaked into a decision: %s", got)
	}
	if err := eng.SetExecutorOverlay(ctx, map[string]string{key: "gvisor"}); err != nil {
		t.Fatal(err)
	}
	if executor(in) != "gvisor" || executor(other) != "subprocess" {
		t.Fatalf("with the overlay: %s, another session %s", executor(in), executor(other))
	}
	if err := eng.SetExecutorOverlay(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got := executor(in); got != "subprocess" {
		t.Fatalf("after the overlay was emptied: %s", got)
	}
}
