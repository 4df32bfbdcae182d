package manager_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/events"
	"github.com/sandgate/sandgate/manager"
)

// TestLogSink: the manager's events reach the log in order, with their
// data as JSON; one whose data does not encode is reported and left out,
// and the others of its batch are kept.
func TestLogSink(t *testing.T) {
	ctx := context.Background()
	db, err := audit.Open(ctx, filepath.Join(t.TempDir(), "audit.db"), audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	l, err := events.Open(ctx, db, events.Config{Replica: "r1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	sink := manager.LogSink{Log: l}
	err = sink.Publish(ctx,
		manager.Event{Type: events.RunStarted, Tenant: "t1", SessionID: "s1", Data: map[string]any{"request_id": "r-1"}},
		manager.Event{Type: events.RunFinished, Tenant: "t1", SessionID: "s1", Data: map[string]any{"bad": make(chan int)}},
		manager.Event{Type: events.SessionDeleted, Tenant: "t1", SessionID: "s1"})
	if err == nil {
		t.Error("Publish of data that does not encode: nil error")
	}
	all, err := l.Since(ctx, "t1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ev := range all {
		got = append(got, ev.Type+" "+string(ev.Data))
	}
	want := []string{events.RunStarted + ` {"request_id":"r-1"}`, events.SessionDeleted + " {}"}
	if !slices.Equal(got, want) {
		t.Errorf("log holds %q, want %q", got, want)
	}
}
