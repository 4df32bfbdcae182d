package deerflow

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/internal/pgtest"
)

// TestRegistrySharedSQLite: two registries on one SQLite database (one
// gateway's, reopened as after a restart) see the same sandboxes.
func TestRegistrySharedSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.db")
	var db *audit.SQLite
	open := func(t *testing.T) Store {
		// SQLite is one process's: both registries share the one store,
		// which a restart closes and opens again.
		if db == nil {
			var err error
			if db, err = audit.Open(context.Background(), path, audit.Options{}); err != nil {
				t.Fatal(err)
			}
		}
		return db
	}
	restart := func(t *testing.T) {
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		db = nil
	}
	t.Cleanup(func() {
		if db != nil {
			_ = db.Close()
		}
	})
	testSharedRegistry(t, open, restart)
}

// TestRegistrySharedPostgres: two replicas' registries, each on its own
// connection to one PostgreSQL database, see the same sandboxes; a delete
// through one ends the capability for the other; and the sandboxes
// outlive both connections.
func TestRegistrySharedPostgres(t *testing.T) {
	dsn := pgtest.Schema(t)
	var open []*audit.Postgres
	t.Cleanup(func() {
		for _, db := range open {
			_ = db.Close()
		}
	})
	testSharedRegistry(t, func(t *testing.T) Store {
		db, err := audit.OpenPostgres(context.Background(), dsn, audit.Options{})
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, db)
		return db
	}, func(t *testing.T) {
		for _, db := range open {
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
		}
		open = nil
	})
}

// testSharedRegistry runs the registry's fleet contract: open returns a
// store on the shared database (a replica's), restart closes every one.
func testSharedRegistry(t *testing.T, open func(*testing.T) Store, restart func(*testing.T)) {
	ctx := context.Background()
	openRegistry := func() *Registry {
		g, err := OpenRegistry(ctx, open(t))
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	a, b := openRegistry(), openRegistry()

	want := sandbox{tenant: "t1", id: "sbx-1", threadID: "th1", userID: "u1", session: "df.u1.th1",
		sessionKey: "t1~df.u1.th1", ownerRole: "agent", ownerName: "deerflow"}
	made, created, err := a.create(ctx, want)
	if err != nil || !created || !strings.HasPrefix(made.cap, capPrefix) {
		t.Fatalf("create through A: %+v created=%v err=%v", made, created, err)
	}

	// B sees A's sandbox by id, in the tenant's list, and by capability,
	// with the capability A minted (B shows the same sandbox_url).
	got, ok, err := b.get(ctx, "t1", "sbx-1")
	if err != nil || !ok || got.cap != made.cap || got.sessionKey != want.sessionKey || got.ownerName != "deerflow" {
		t.Fatalf("get through B: %+v ok=%v err=%v", got, ok, err)
	}
	if l, err := b.list(ctx, "t1"); err != nil || len(l) != 1 || l[0].id != "sbx-1" {
		t.Fatalf("list through B: %v %v", l, err)
	}
	if l, err := b.list(ctx, "t2"); err != nil || len(l) != 0 {
		t.Fatalf("another tenant's list through B: %v %v", l, err)
	}
	if got, ok, err := b.byCapability(ctx, made.cap); err != nil || !ok || got.id != "sbx-1" {
		t.Fatalf("capability through B: %+v ok=%v err=%v", got, ok, err)
	}
	if _, ok, _ := b.byCapability(ctx, made.cap[:len(made.cap)-1]+"x"); ok {
		t.Fatal("a capability one character off was accepted")
	}

	// The create is idempotent through either replica (same capability),
	// and a conflict for another thread through either.
	again, created, err := b.create(ctx, want)
	if err != nil || created || again.cap != made.cap {
		t.Fatalf("repeated create through B: %+v created=%v err=%v", again, created, err)
	}
	other := want
	other.threadID = "th2"
	if _, _, err := b.create(ctx, other); !errors.Is(err, errSandboxConflict) {
		t.Fatalf("create of sbx-1 for another thread through B: %v", err)
	}

	// The registry survives a restart of every replica.
	restart(t)
	a, b = openRegistry(), openRegistry()
	if got, ok, err := b.byCapability(ctx, made.cap); err != nil || !ok || got.id != "sbx-1" || got.session != "df.u1.th1" {
		t.Fatalf("capability after a restart: %+v ok=%v err=%v", got, ok, err)
	}

	// A delete through B ends the capability for A.
	if err := b.remove(ctx, "t1", "sbx-1"); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := a.byCapability(ctx, made.cap); err != nil || ok {
		t.Fatalf("A still accepts the capability after a delete through B: ok=%v err=%v", ok, err)
	}
	if _, ok, err := a.get(ctx, "t1", "sbx-1"); err != nil || ok {
		t.Fatalf("A still finds the sandbox after a delete through B: ok=%v err=%v", ok, err)
	}

	// Release (a session's deletion or expiry, on whichever replica
	// serves it) ends every sandbox of that session and no other.
	s1, _, err := a.create(ctx, want)
	if err != nil {
		t.Fatal(err)
	}
	if s1.cap == made.cap {
		t.Fatal("a sandbox made again got its old capability back")
	}
	same := want
	same.id = "sbx-2"
	s2, _, err := a.create(ctx, same)
	if err != nil {
		t.Fatal(err)
	}
	keep := sandbox{tenant: "t1", id: "sbx-3", threadID: "th3", userID: "u1", session: "df.u1.th3",
		sessionKey: "t1~df.u1.th3", ownerRole: "agent", ownerName: "deerflow"}
	s3, _, err := a.create(ctx, keep)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, want.sessionKey); err != nil {
		t.Fatal(err)
	}
	for _, sb := range []*sandbox{s1, s2} {
		if _, ok, err := a.byCapability(ctx, sb.cap); err != nil || ok {
			t.Fatalf("%s outlived its session's release: ok=%v err=%v", sb.id, ok, err)
		}
	}
	if _, ok, err := a.byCapability(ctx, s3.cap); err != nil || !ok {
		t.Fatalf("another session's sandbox went with the release: ok=%v err=%v", ok, err)
	}
}
