package executortest

import (
	"context"
	"errors"
	"testing"

	"github.com/sandgate/sandgate/executors"
)

func TestFakeDefaults(t *testing.T) {
	var f Fake
	if f.Kind() != executors.KindSubprocess || f.Available(t.Context()) != nil {
		t.Errorf("zero Fake: kind %q available %v", f.Kind(), f.Available(t.Context()))
	}
	if res, err := f.Execute(t.Context(), executors.Spec{RequestID: "a"}); err != nil || res.ExitCode != 0 {
		t.Errorf("zero Fake Execute: %+v %v", res, err)
	}
	if calls := f.Calls(); len(calls) != 1 || calls[0].RequestID != "a" {
		t.Errorf("Calls() = %+v", calls)
	}
	if err := f.Capabilities().Check(f.Kind(), executors.Spec{Limits: executors.Limits{MemoryMB: 1, MaxProcs: 1}}); err != nil {
		t.Errorf("zero Fake cannot enforce the default obligations: %v", err)
	}
}

func TestFakeFunctions(t *testing.T) {
	down := &executors.UnavailableError{Kind: executors.KindDocker, Reason: "engine down"}
	f := &Fake{
		KindValue:     executors.KindDocker,
		AvailableFunc: func(context.Context) error { return down },
		ExecuteFunc: func(_ context.Context, s executors.Spec) (executors.Result, error) {
			return executors.Result{Stdout: s.Code, ExitCode: 3}, nil
		},
	}
	if err := f.Available(t.Context()); !errors.Is(err, executors.ErrUnavailable) {
		t.Errorf("Available: %v", err)
	}
	res, _ := f.Execute(t.Context(), executors.Spec{Code: "echo"})
	if res.Stdout != "echo" || res.ExitCode != 3 || f.Kind() != executors.KindDocker {
		t.Errorf("Execute: %+v", res)
	}
	weak := executors.Capabilities{MemoryLimit: true, Isolation: "process-group"}
	f.Caps = &weak
	if got := f.Capabilities(); got != weak {
		t.Errorf("Capabilities() = %+v, want %+v", got, weak)
	}
}
