package fleet_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/fleet"
	"github.com/sandgate/sandgate/internal/pgtest"
)

func open(t *testing.T, dsn, replica string) *audit.Postgres {
	t.Helper()
	db, err := audit.OpenPostgres(t.Context(), dsn, audit.Options{Replica: replica})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// TestRegistry: a live replica's name cannot be taken; a replica that stops
// heartbeating is cleaned up once, by a survivor, after its lease; a
// cleanly stopped one is not "expired" at all.
func TestRegistry(t *testing.T) {
	dsn := pgtest.Schema(t)
	// a, which dies, has a lease no heartbeat misses on a loaded machine
	// while it lives; b, the sweeper, a short one (it sweeps every half
	// lease), whose lapses only make a sweep b to no effect.
	const lease, sweeperLease = 2 * time.Second, 400 * time.Millisecond
	a, err := fleet.Register(t.Context(), open(t, dsn, "a"), fleet.Options{Replica: "a", Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	// The duplicate waits twice its own lease for the name before it is
	// refused: a short one, so the test does not wait 4 s.
	if _, err := fleet.Register(t.Context(), open(t, dsn, "a"), fleet.Options{Replica: "a", Lease: 100 * time.Millisecond}); !errors.Is(err, fleet.ErrReplicaAlive) {
		t.Fatalf("a second live 'a': %v, want ErrReplicaAlive", err)
	}
	b, err := fleet.Register(t.Context(), open(t, dsn, "b"), fleet.Options{Replica: "b", Lease: sweeperLease})
	if err != nil {
		t.Fatal(err)
	}
	var expired atomic.Value
	var calls atomic.Int32
	b.Run(func(_ context.Context, replica string) error {
		calls.Add(1)
		expired.Store(replica)
		return nil
	})
	defer b.Stop(context.Background())
	a.Run(func(context.Context, string) error { return nil })
	time.Sleep(time.Second) // b sweeps five times meanwhile
	if calls.Load() != 0 {
		t.Fatalf("a live replica was treated as expired: %v", expired.Load())
	}
	a.Kill() // dies: no heartbeat, row left behind
	deadline := time.Now().Add(4 * lease)
	for calls.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(lease)
	if calls.Load() != 1 || expired.Load() != "a" {
		t.Fatalf("cleanup calls %d for %v, want 1 for a", calls.Load(), expired.Load())
	}
	// The name is free again.
	a2, err := fleet.Register(t.Context(), open(t, dsn, "a"), fleet.Options{Replica: "a", Lease: lease})
	if err != nil {
		t.Fatalf("re-register a: %v", err)
	}
	if err := a2.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestCheckShared: replicas on one workspace root pass; one on another
// directory is refused, whether empty or holding another fleet's marker.
func TestCheckShared(t *testing.T) {
	dsn := pgtest.Schema(t)
	shared, other := t.TempDir(), t.TempDir()
	for i := range 2 {
		if err := fleet.CheckShared(t.Context(), open(t, dsn, "a"), shared); err != nil {
			t.Fatalf("replica %d on the shared root: %v", i, err)
		}
	}
	if err := fleet.CheckShared(t.Context(), open(t, dsn, "b"), other); !errors.Is(err, fleet.ErrNotShared) {
		t.Fatalf("a replica on its own root: %v, want ErrNotShared", err)
	}
	otherFleet := pgtest.Schema(t)
	if err := fleet.CheckShared(t.Context(), open(t, otherFleet, "x"), other); err != nil {
		t.Fatal(err)
	}
	if err := fleet.CheckShared(t.Context(), open(t, dsn, "c"), other); !errors.Is(err, fleet.ErrNotShared) {
		t.Fatalf("a root holding another fleet's marker: %v, want ErrNotShared", err)
	}
}
