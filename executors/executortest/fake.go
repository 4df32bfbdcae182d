package executortest

import (
	"context"
	"sync"

	"github.com/sandgate/sandgate/executors"
)

// Fake is an Executor built from function fields, for testing callers
// (the manager) without running anything. Nil functions behave as a
// healthy backend whose programs print nothing and exit 0. It records
// every Spec it was asked to execute and is safe for concurrent use.
type Fake struct {
	KindValue     executors.Kind
	AvailableFunc func(ctx context.Context) error
	ExecuteFunc   func(ctx context.Context, spec executors.Spec) (executors.Result, error)
	// Caps is what Capabilities reports; nil reports FullCapabilities, as
	// a healthy production backend would.
	Caps *executors.Capabilities

	mu    sync.Mutex
	calls []executors.Spec
}

var _ executors.Executor = (*Fake)(nil)

// Kind returns KindValue, or KindSubprocess when it is empty.
func (f *Fake) Kind() executors.Kind {
	if f.KindValue == "" {
		return executors.KindSubprocess
	}
	return f.KindValue
}

// Available calls AvailableFunc.
func (f *Fake) Available(ctx context.Context) error {
	if f.AvailableFunc == nil {
		return nil
	}
	return f.AvailableFunc(ctx)
}

// Capabilities returns *Caps, or FullCapabilities when Caps is nil.
func (f *Fake) Capabilities() executors.Capabilities {
	if f.Caps == nil {
		return FullCapabilities()
	}
	return *f.Caps
}

// FullCapabilities can enforce every obligation the default policy
// attaches (network off, the timeout on detached processes, memory and
// process limits), as a production backend can.
func FullCapabilities() executors.Capabilities {
	return executors.Capabilities{
		NetworkIsolation: true, MemoryLimit: true, ProcessLimit: true, KillDetached: true,
		FilesystemIsolation: true, RootFS: "host", Isolation: "fake",
	}
}

// Execute records spec and calls ExecuteFunc.
func (f *Fake) Execute(ctx context.Context, spec executors.Spec) (executors.Result, error) {
	f.mu.Lock()
	f.calls = append(f.calls, spec)
	f.mu.Unlock()
	if f.ExecuteFunc == nil {
		return executors.Result{}, nil
	}
	return f.ExecuteFunc(ctx, spec)
}

// Calls returns a copy of the Specs Execute received, in order.
func (f *Fake) Calls() []executors.Spec {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]executors.Spec(nil), f.calls...)
}
