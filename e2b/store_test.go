package e2b

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/internal/pgtest"
	"github.com/sandgate/sandgate/manager"
)

func TestStoreSQLite(t *testing.T) {
	db, err := audit.Open(context.Background(), filepath.Join(t.TempDir(), "audit.db"), audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	testStore(t, db, db)
}

// TestStorePostgres: two replicas' registries, each on its own
// connection to one PostgreSQL database.
func TestStorePostgres(t *testing.T) {
	dsn := pgtest.Schema(t)
	var stores [2]Store
	for i := range stores {
		db, err := audit.OpenPostgres(context.Background(), dsn, audit.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		stores[i] = db
	}
	testStore(t, stores[0], stores[1])
}

// testStore runs the registry's fleet contract on two replicas' stores
// of one database: a sandbox registered on one is found, with its
// principal, template, SDK and envs, and its tokens accepted, on the
// other, which has no live state of it and cannot show its tokens; the
// tokens are not in the database, only their digests; new tokens minted
// on the other replace the old for both; a kill through one, or the
// release of its session, ends it for both.
func testStore(t *testing.T, dbA, dbB Store) {
	ctx := context.Background()
	a, err := OpenRegistry(ctx, dbA)
	if err != nil {
		t.Fatal(err)
	}
	b, err := OpenRegistry(ctx, dbB)
	if err != nil {
		t.Fatal(err)
	}
	p := manager.Principal{Role: "agent", Name: "ag", Tenant: "t1"}
	sb := newSandbox("sbxstoretest", "base", p, "e2b-js 2.51.0", map[string]string{"A": "1"})
	if err := a.register(ctx, sb); err != nil {
		t.Fatal(err)
	}
	got, ok, err := b.lookup(ctx, sb.id)
	switch {
	case err != nil || !ok:
		t.Fatalf("lookup on B: %v %v", ok, err)
	case got.principal != p || got.template != "base" || got.client != "e2b-js 2.51.0" || got.envs["A"] != "1" ||
		got.sessionKey != sb.sessionKey:
		t.Fatalf("B's record: %+v", got.record)
	case !got.accepts(sb.envdToken, "") || !got.accepts("", sb.trafficToken) || got.accepts("ea_wrong", ""):
		t.Fatal("B does not check the tokens as A minted them")
	case got.envdToken != "":
		t.Fatal("B shows a token it did not mint")
	}
	var n int
	row := dbA.DB().QueryRowContext(ctx, dbA.Rebind(`SELECT COUNT(*) FROM e2b_sandboxes WHERE envs LIKE ? OR envd_sha256 = ? OR traffic_sha256 = ?`),
		"%"+sb.envdToken+"%", sb.envdToken, sb.trafficToken)
	if err := row.Scan(&n); err != nil || n != 0 {
		t.Fatalf("a token is in the database as it is: %d %v", n, err)
	}
	// B mints new tokens (a connect after a failover): the old ones stop
	// working on A too.
	fresh := newSandbox(sb.id, got.template, p, got.client, got.envs)
	if err := b.register(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	onA, ok, err := a.lookup(ctx, sb.id)
	if err != nil || !ok || onA.accepts(sb.envdToken, "") || !onA.accepts(fresh.envdToken, "") {
		t.Fatalf("A after B's new tokens: %v %v", ok, err)
	}
	if strings.HasPrefix(onA.envdToken, "ea_") {
		t.Fatal("A shows B's token")
	}
	// B, serving it, rotates the tokens in place (a connect where they
	// cannot be shown): its live state stays, the new tokens work on A.
	live, ok, err := b.served(ctx, sb.id)
	if err != nil || !ok {
		t.Fatalf("served on B: %v %v", ok, err)
	}
	before, _ := live.tokens()
	if err := b.rotate(ctx, live); err != nil {
		t.Fatal(err)
	}
	envd, _ := live.tokens()
	if again, _, _ := b.served(ctx, sb.id); again != live {
		t.Fatal("B's live state was replaced by the rotation")
	}
	if onA, _, _ := a.lookup(ctx, sb.id); onA == nil || !onA.accepts(envd, "") || onA.accepts(before, "") {
		t.Fatal("A does not take the rotated token alone")
	}
	// A kill through A ends it for B.
	if err := a.forget(ctx, sb.id); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := b.lookup(ctx, sb.id); err != nil || ok {
		t.Fatalf("B after A's kill: %v %v", ok, err)
	}
	// The release of its session (on any replica) ends it for both.
	if err := a.register(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, sb.sessionKey); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := a.lookup(ctx, sb.id); err != nil || ok {
		t.Fatalf("A after the release on B: %v %v", ok, err)
	}
}
