package confirm

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/internal/pgtest"
)

// fleet opens n hubs as replicas on one PostgreSQL schema, each with its
// own store connection pool and LISTEN connection.
func fleet(t *testing.T, n int, opts HubOptions) []*Hub { return fleetB(t, n, opts) }

func fleetB(t testing.TB, n int, opts ...HubOptions) []*Hub {
	t.Helper()
	dsn := pgtest.Schema(t)
	hubs := make([]*Hub, n)
	for i := range n {
		db, err := audit.OpenPostgres(t.Context(), dsn, audit.Options{Replica: string(rune('a' + i))})
		if err != nil {
			t.Fatal(err)
		}
		var o HubOptions
		if len(opts) > 0 {
			o = opts[0]
		}
		o.Store, o.Replica, o.ListenDSN = db, string(rune('a'+i)), dsn
		h, err := NewHub(t.Context(), o)
		if err != nil {
			t.Fatal(err)
		}
		hubs[i] = h
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = h.Close(ctx)
			_ = db.Close()
		})
	}
	return hubs
}

// TestFleet_DecisionOnOtherReplicaReleases: a request held on A is approved
// through B; A's waiting call returns the approval; a second decision, on
// B or C, is a conflict naming the first.
func TestFleet_DecisionOnOtherReplicaReleases(t *testing.T) {
	hubs := fleet(t, 3, HubOptions{})
	a, b, c := hubs[0], hubs[1], hubs[2]
	wait := confirmAsync(t.Context(), a, request("s1", "import subprocess"))
	v := waitPending(t, a, 1)[0]
	if _, err := b.Decide(t.Context(), v.ID, Approver{Name: "bob"}, Decision{Decision: "approve", Digest: "sha256:wrong"}); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("wrong digest on B: %v", err)
	}
	fin, err := b.Decide(t.Context(), v.ID, Approver{Name: "bob"}, Decision{Decision: "approve", Digest: v.Digest})
	if err != nil || fin.Status != StatusApproved {
		t.Fatalf("decide on B: %+v %v", fin, err)
	}
	out := wait.wait(t)
	if out.Status != StatusApproved || out.DecidedBy != "bob" {
		t.Fatalf("A's outcome: %+v", out)
	}
	for name, h := range map[string]*Hub{"B": b, "C": c, "A": a} {
		var ce *ConflictError
		if _, err := h.Decide(t.Context(), v.ID, Approver{Name: "carol"}, Decision{Decision: "deny"}); !errors.As(err, &ce) || ce.Approval.DecidedBy != "bob" {
			t.Errorf("second decision on %s: %v, want a conflict naming bob", name, err)
		}
	}
}

// TestFleet_RaceFirstWins: replicas deciding one approval at once: one
// wins, the others get conflicts, and the holder's outcome is the winner's.
func TestFleet_RaceFirstWins(t *testing.T) {
	hubs := fleet(t, 3, HubOptions{})
	wait := confirmAsync(t.Context(), hubs[0], request("s1", "import subprocess"))
	v := waitPending(t, hubs[0], 1)[0]
	type res struct {
		who string
		err error
	}
	results := make(chan res, 3)
	for i, h := range hubs {
		who := []string{"ann", "bob", "cat"}[i]
		go func() {
			_, err := h.Decide(context.Background(), v.ID, Approver{Name: who}, Decision{Decision: []string{"approve", "deny", "approve"}[i]})
			results <- res{who, err}
		}()
	}
	winner := ""
	for range 3 {
		r := <-results
		var ce *ConflictError
		switch {
		case r.err == nil && winner == "":
			winner = r.who
		case errors.As(r.err, &ce):
		default:
			t.Fatalf("%s: %v", r.who, r.err)
		}
	}
	if out := wait.wait(t); winner == "" || out.DecidedBy != winner {
		t.Fatalf("winner %q, A's outcome %+v", winner, out)
	}
}

// TestFleet_StartSweepKeepsOtherReplicasPending: a replica starting up
// interrupts its own leftovers only.
func TestFleet_StartSweepKeepsOtherReplicasPending(t *testing.T) {
	dsn := pgtest.Schema(t)
	open := func(replica string) *Hub {
		db, err := audit.OpenPostgres(t.Context(), dsn, audit.Options{Replica: replica})
		if err != nil {
			t.Fatal(err)
		}
		h, err := NewHub(t.Context(), HubOptions{Store: db, Replica: replica, ListenDSN: dsn})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.Close(context.Background()); _ = db.Close() })
		return h
	}
	a := open("a")
	wait := confirmAsync(t.Context(), a, request("s1", "import subprocess"))
	v := waitPending(t, a, 1)[0]
	open("b") // B starts: A's approval stays pending
	got, err := a.Get(t.Context(), v.ID)
	if err != nil || got.Status != StatusPending {
		t.Fatalf("A's approval after B started: %+v %v", got, err)
	}
	if _, err := a.Decide(t.Context(), v.ID, Approver{Name: "ann"}, Decision{Decision: "deny"}); err != nil {
		t.Fatal(err)
	}
	if out := wait.wait(t); out.Status != StatusDenied {
		t.Fatalf("outcome %+v", out)
	}
}
