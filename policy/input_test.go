package policy

import (
	"context"
	"sync"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
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

// TestInputValueIsMapValue: the input value built as terms is the value
// OPA makes of Input.Map, for inputs with and without patterns,
// executors, a tenant and large numbers.
func TestInputValueIsMapValue(t *testing.T) {
	big := benchInput()
	big.Request.CodeBytes, big.Request.TimeoutS = 1<<20, 3600
	big.Principal.Tenant = "acme"
	big.Request.Stateful, big.Request.Context.NeedsBrowser = true, true
	none := baseInput("PERMISSIVE", "SAFE", true)
	none.Executors, none.Risk.Patterns = nil, nil
	for i, in := range []Input{benchInput(), big, none, {}} {
		var cache executorsValue
		got, err := in.value(&cache)
		if err != nil {
			t.Fatal(err)
		}
		want, err := ast.InterfaceToValue(in.Map())
		if err != nil {
			t.Fatal(err)
		}
		if got.Compare(want) != 0 || got.String() != want.String() {
			t.Errorf("input %d:\n got  %v\n want %v", i, got, want)
		}
	}
}
