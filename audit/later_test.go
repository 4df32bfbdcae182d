package audit_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/audit"
)

// TestLaterQueryAfterAnswer: outcomes completed after the answer are what a
// reader of the log sees right after the answers, on every driver, with
// many callers at once; Drain writes what is queued, and a completion
// offered after it is refused so that its caller writes it itself.
func TestLaterQueryAfterAnswer(t *testing.T) {
	for name, open := range databases(t) {
		t.Run(name, func(t *testing.T) {
			var failed atomic.Int64
			l := audit.NewLater(open(t), nil, func() { failed.Add(1) })
			const n = 40
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					rec := audit.Record{RequestID: fmt.Sprintf("r%d", i), Kind: "run_code", Outcome: audit.OutcomeStarted}
					if err := l.Append(t.Context(), &rec); err != nil {
						t.Error(err)
						return
					}
					exit := i
					rec.Outcome, rec.ExitCode = audit.OutcomeFailed, &exit
					if !l.CompleteLater(&rec) {
						t.Error("CompleteLater refused before Drain")
					}
					rec.Outcome = "overwritten by the caller" // the queued copy is not the caller's
				})
			}
			wg.Wait()
			recs := queryAll(t, l, audit.Query{})
			if len(recs) != n {
				t.Fatalf("%d records, want %d", len(recs), n)
			}
			for _, r := range recs {
				if r.Outcome != audit.OutcomeFailed || r.ExitCode == nil || fmt.Sprintf("r%d", *r.ExitCode) != r.RequestID {
					t.Fatalf("record %s: outcome %q exit %v, want failed with its own exit code", r.RequestID, r.Outcome, r.ExitCode)
				}
			}

			again := recs[0]
			again.Outcome = audit.OutcomeOK
			if !l.CompleteLater(&again) { // not started any more: the write fails and is counted
				t.Fatal("CompleteLater refused before Drain")
			}
			l.Drain()
			if failed.Load() != 1 {
				t.Fatalf("%d failed completions counted, want 1", failed.Load())
			}
			if l.CompleteLater(&again) {
				t.Fatal("CompleteLater queued after Drain")
			}
		})
	}
}

// flakyCompletions fails the first n completions, as a full disk would.
type flakyCompletions struct {
	audit.Database
	fail atomic.Int64
}

func (f *flakyCompletions) Complete(ctx context.Context, rec *audit.Record) error {
	if f.fail.Add(-1) >= 0 {
		return errors.New("disk full")
	}
	return f.Database.Complete(ctx, rec)
}

// TestLaterRetriesFailedCompletion: a completion that fails while the
// audit disk is full is written once the disk has room again, not lost
// (the record would otherwise stay started); meanwhile a query does not
// wait for it, and the failure is counted once.
func TestLaterRetriesFailedCompletion(t *testing.T) {
	db := &flakyCompletions{Database: openTemp(t, audit.Options{})}
	db.fail.Store(2)
	var failed atomic.Int64
	l := audit.NewLater(db, nil, func() { failed.Add(1) })
	defer l.Drain()
	rec := audit.Record{RequestID: "r", Kind: "run_code", Outcome: audit.OutcomeStarted}
	if err := l.Append(t.Context(), &rec); err != nil {
		t.Fatal(err)
	}
	rec.Outcome = audit.OutcomeOK
	l.CompleteLater(&rec)
	if recs := queryAll(t, l, audit.Query{}); len(recs) != 1 || recs[0].Outcome != audit.OutcomeStarted {
		t.Fatalf("while the disk is full: %+v, want the record started", recs)
	}
	deadline := time.Now().Add(10 * time.Second)
	for queryAll(t, l, audit.Query{})[0].Outcome != audit.OutcomeOK {
		if time.Now().After(deadline) {
			t.Fatal("the failed completion was never written")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if failed.Load() != 1 {
		t.Fatalf("%d failures counted, want 1", failed.Load())
	}
}
