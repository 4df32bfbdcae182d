package policy

import (
	"context"
	"sync"
	"testing"
)

// TestExecutorsInputCache: the executors part of the input is converted
// once per map, and a new map (the manager's next refresh) is seen at
// once, whatever the previous one said.
func TestExecutorsInputCache(t *testing.T) {
	e := newEngine(t, Options{})
	in := baseInput("STRICT", "LOW", false)
	if d := e.Decide(context.Background(), in); d.Action != ActionAllow {
		t.Fatalf("docker available: %+v", d)
	}
	first, _ := e.executors.get(in.Executors)
	again, _ := e.executors.get(in.Executors)
	if first != again {
		t.Error("the same map was converted twice")
	}
	in.Executors = executorStates("subprocess", "aio") // docker gone
	if d := e.Decide(context.Background(), in); !d.OnlyReason(ReasonExecutorUnavailable) {
		t.Fatalf("a new map without docker: %+v, want executor_unavailable", d)
	}
	in.Executors = executorStates("subprocess", "docker", "aio")
	if d := e.Decide(context.Background(), in); d.Action != ActionAllow {
		t.Fatalf("docker back: %+v", d)
	}
	in.Executors = nil
	if d := e.Decide(context.Background(), in); !d.OnlyReason(ReasonExecutorUnavailable) {
		t.Fatalf("no executors: %+v", d)
	}
}

// TestExecutorsInputShared: concurrent decisions share one converted
// executors value; under -race this shows evaluation only reads it.
func TestExecutorsInputShared(t *testing.T) {
	e := newEngine(t, Options{})
	in := baseInput("STRICT", "LOW", false)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 50 {
				if d := e.Decide(context.Background(), in); d.Action != ActionAllow || d.Executor != "docker" {
					t.Errorf("Decide = %+v", d)
					return
				}
			}
		})
	}
	wg.Wait()
}
