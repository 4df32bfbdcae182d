package manager_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/executortest"
)

// stagingFake is a Stager: it stages (entering closes staged), then runs
// only if spec.Release lets it, noting what the audit store held then.
type stagingFake struct {
	*executortest.Fake
	store    *audit.Memory
	staged   chan struct{}
	released error
	atStart  []audit.Record // the store's records when the run started
	ran      bool
}

func (f *stagingFake) Stages(executors.Spec) bool { return true }

func (f *stagingFake) Execute(ctx context.Context, spec executors.Spec) (executors.Result, error) {
	close(f.staged)
	if spec.Release == nil {
		return executors.Result{}, errors.New("a Stager's run came without its Release")
	}
	if f.released = spec.Release(ctx); f.released != nil {
		return executors.Result{}, f.released
	}
	f.atStart, f.ran = f.store.Records(), true
	return f.Fake.Execute(ctx, spec)
}

// gatedMemory is aheadMemory whose write-ahead Append waits for open (at
// most 5 s, then fails): the test opens it once the executor is staging.
type gatedMemory struct {
	aheadMemory
	open chan struct{}
}

func (s gatedMemory) Append(ctx context.Context, rec *audit.Record) error {
	if rec.Outcome == audit.OutcomeStarted {
		select {
		case <-s.open:
		case <-time.After(5 * time.Second):
			return errors.New("the write-ahead record was written before the run was staged")
		}
	}
	return s.aheadMemory.Append(ctx, rec)
}

// TestStagedRun: for a Stager the write-ahead record is committed while
// the executor stages the run, and the run starts only once it is durable;
// a record that cannot be written refuses the run, which never started.
func TestStagedRun(t *testing.T) {
	cases := []struct {
		name      string
		appendErr error
	}{
		{name: "committed while staging, then run"},
		{name: "the record fails: never run", appendErr: errors.New("database or disk is full")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mem := audit.NewMemory()
			mem.AppendErr = tc.appendErr
			fake := &stagingFake{Fake: &executortest.Fake{KindValue: executors.KindSubprocess}, store: mem, staged: make(chan struct{})}
			store := gatedMemory{aheadMemory{mem}, fake.staged}
			h := newHarness(t, hopts{store: store, execs: []executors.Executor{fake}})
			_, err := h.m.Run(t.Context(), request("python", safePython))
			if tc.appendErr != nil {
				if code, _, _ := errcode.Of(err); code != errcode.Internal {
					t.Fatalf("run: %v (code %s), want %s", err, code, errcode.Internal)
				}
				if fake.ran || fake.released == nil {
					t.Errorf("ran %v, release error %v: a run without its record was let go", fake.ran, fake.released)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !fake.ran || len(fake.atStart) != 1 || fake.atStart[0].Outcome != audit.OutcomeStarted {
				t.Fatalf("ran %v with records %+v at its start, want the started record", fake.ran, fake.atStart)
			}
		})
	}
}
