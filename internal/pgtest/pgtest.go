// Package pgtest gives tests a private PostgreSQL schema in the cluster
// make test starts (scripts/postgres.sh), so the store suites run against
// PostgreSQL as well as SQLite.
//
// The cluster's DSN comes from SANDGATE_TEST_POSTGRES_DSN. Without it a test
// that needs PostgreSQL skips, unless SANDGATE_REQUIRE_POSTGRES=1 (set by
// make test), which makes it fail.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvDSN names the environment variable holding the test cluster's DSN.
const EnvDSN = "SANDGATE_TEST_POSTGRES_DSN"

// BaseDSN returns the cluster's DSN, or skips (fails under
// SANDGATE_REQUIRE_POSTGRES=1) when there is none.
func BaseDSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(EnvDSN)
	if dsn == "" {
		const why = "no PostgreSQL: " + EnvDSN + " is unset (make test starts a private cluster)"
		if os.Getenv("SANDGATE_REQUIRE_POSTGRES") == "1" {
			t.Fatal("SANDGATE_REQUIRE_POSTGRES=1: " + why)
		}
		t.Skip(why)
	}
	return dsn
}

// Schema creates a fresh schema, dropped when the test ends, and returns a
// DSN whose connections use it (search_path), so every table the code
// under test creates lands there and tests never see each other's rows.
func Schema(t testing.TB) string {
	t.Helper()
	base := BaseDSN(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "t_" + hex.EncodeToString(b)
	exec(t, base, "CREATE SCHEMA "+name)
	t.Cleanup(func() { exec(t, base, "DROP SCHEMA "+name+" CASCADE") })
	return base + " search_path=" + name
}

// Exec runs one statement on dsn (a test's own schema, say, to tamper with
// a row behind the store's back).
func Exec(t testing.TB, dsn, stmt string, args ...any) {
	t.Helper()
	exec(t, dsn, stmt, args...)
}

func exec(t testing.TB, dsn, stmt string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, stmt, args...); err != nil {
		t.Fatalf("pgtest: %s: %v", stmt, err)
	}
}

// QueryString runs a one-value query on dsn and returns its text ("" for
// no row), for tests that look at a table behind the code's back.
func QueryString(t testing.TB, dsn, query string, args ...any) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	defer conn.Close(ctx)
	var s string
	if err := conn.QueryRow(ctx, query, args...).Scan(&s); err != nil && err != pgx.ErrNoRows {
		t.Fatalf("pgtest: %s: %v", query, err)
	}
	return s
}
