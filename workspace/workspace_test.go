package workspace

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

func TestValidateSessionID(t *testing.T) {
	cases := []struct {
		id string
		ok bool
	}{
		{"s1", true}, {"ci-build_42.x", true}, {strings.Repeat("a", 128), true},
		{"", false}, {".", false}, {"..", false}, {"a/b", false}, {"../x", false},
		{strings.Repeat("a", 129), false}, {"a b", false}, {"a\x00b", false}, {"é", false}, {`a\b`, false},
	}
	for _, c := range cases {
		err := ValidateSessionID(c.id)
		if (err == nil) != c.ok {
			t.Errorf("%q: err=%v, want ok=%v", c.id, err, c.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidSessionID) {
			t.Errorf("%q: %v does not wrap ErrInvalidSessionID", c.id, err)
		}
	}
}

func TestLifecycle(t *testing.T) {
	ctx := context.Background()
	w, err := New(filepath.Join(t.TempDir(), "ws"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Get(ctx, "a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get before Ensure: %v", err)
	}
	dir, err := w.Ensure(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir.Path, "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if again, _ := w.Ensure(ctx, "a"); again != dir {
		t.Fatalf("Ensure is not stable: %+v vs %+v", again, dir)
	}
	if _, err := w.Ensure(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	list, err := w.List(ctx)
	if err != nil || len(list) != 2 || list[0].SessionID != "a" || list[1].SessionID != "b" {
		t.Fatalf("List: %v %+v", err, list)
	}
	for range 2 { // idempotent
		if err := w.Remove(ctx, "a"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Get(ctx, "a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after Remove: %v", err)
	}
	if _, err := w.Ensure(ctx, "../escape"); !errors.Is(err, ErrInvalidSessionID) {
		t.Fatalf("Ensure with a traversal id: %v", err)
	}
}

func TestPerSessionIdentity(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("per-session uids need root")
	}
	ctx := context.Background()
	w, err := New(filepath.Join(t.TempDir(), "ws"), Options{UIDBase: 3_000_000, UIDCount: 3})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]string{}
	for _, id := range []string{"s1", "s2", "s3"} {
		d, err := w.Ensure(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if d.UID < 3_000_000 || d.UID >= 3_000_003 || d.GID != d.UID {
			t.Fatalf("%s: uid %d gid %d outside the range", id, d.UID, d.GID)
		}
		if other, dup := seen[d.UID]; dup {
			t.Fatalf("%s and %s share uid %d", id, other, d.UID)
		}
		seen[d.UID] = id
		fi, err := os.Stat(d.Path)
		if err != nil {
			t.Fatal(err)
		}
		if uid, _ := owner(fi); uid != d.UID || fi.Mode().Perm() != 0o700 {
			t.Fatalf("%s: owner %d mode %v", id, uid, fi.Mode().Perm())
		}
		if again, _ := w.Ensure(ctx, id); again.UID != d.UID {
			t.Fatalf("%s: identity changed from %d to %d", id, d.UID, again.UID)
		}
	}
	if _, err := w.Ensure(ctx, "s4"); err == nil {
		t.Fatal("a fourth session got a uid from a range of three")
	}
	if _, err := w.Get(ctx, "s4"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a failed Ensure left a workspace behind: %v", err)
	}
}

func TestCheckReachable(t *testing.T) {
	base := t.TempDir()
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	w, err := New(filepath.Join(base, "data", "ws"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(base, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := w.CheckReachable(); err != nil {
		t.Fatalf("reachable tree refused: %v", err)
	}
	if err := os.Chmod(filepath.Join(base, "data"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := w.CheckReachable(); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("a 0700 ancestor was accepted: %v", err)
	}
}

func TestKeys(t *testing.T) {
	cases := []struct {
		key          string
		ok           bool
		tenant, name string
	}{
		{"team-a~demo", true, "team-a", "demo"},
		{"demo", true, "", "demo"},
		{"t.1~x_y-z", true, "t.1", "x_y-z"},
		{"~demo", false, "", "demo"},
		{"team-a~", false, "team-a", ""},
		{"team-a~b~c", false, "team-a", "b~c"},
		{"-t~demo", false, "-t", "demo"},
		{"team a~demo", false, "team a", "demo"},
		{"team-a~..", false, "team-a", ".."},
		{"team-a~../x", false, "team-a", "../x"},
		{strings.Repeat("t", 65) + "~demo", false, strings.Repeat("t", 65), "demo"},
	}
	for _, c := range cases {
		err := ValidateKey(c.key)
		if (err == nil) != c.ok {
			t.Errorf("ValidateKey(%q) = %v, want ok=%v", c.key, err, c.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidSessionID) {
			t.Errorf("%q: %v does not wrap ErrInvalidSessionID", c.key, err)
		}
		if tenant, name := SplitKey(c.key); tenant != c.tenant || name != c.name {
			t.Errorf("SplitKey(%q) = %q, %q", c.key, tenant, name)
		}
	}
	if ValidateSessionID("team-a~demo") == nil {
		t.Error("a key is not a session id a client may send as its name")
	}
	if k := Key("team-a", "demo"); k != "team-a~demo" {
		t.Errorf("Key = %q", k)
	}
}

// TestTenantsShareNoWorkspace: the same name under two tenants is two
// directories, and each tenant's listing holds only its own.
func TestTenantsShareNoWorkspace(t *testing.T) {
	ctx := context.Background()
	w, err := New(filepath.Join(t.TempDir(), "ws"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := w.Ensure(ctx, Key("team-a", "demo"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := w.Ensure(ctx, Key("team-b", "demo"))
	if err != nil {
		t.Fatal(err)
	}
	if a.Path == b.Path {
		t.Fatalf("one directory for two tenants: %s", a.Path)
	}
	if _, err := w.Ensure(ctx, Key("team-b", "other")); err != nil {
		t.Fatal(err)
	}
	got, err := w.ListTenant(ctx, "team-b")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "demo" || got[1].Name != "other" || got[0].Tenant != "team-b" {
		t.Fatalf("team-b lists %+v", got)
	}
	if !w.Exists(Key("team-a", "demo")) || w.Exists(Key("team-a", "other")) || w.Exists("../x") {
		t.Fatal("Exists disagrees with the disk")
	}
}

// TestTenantQuotaBytes: the bytes of all of a tenant's sessions count
// against its quota, concurrent writers included; other tenants and
// tenant-less sessions are not limited by it.
func TestTenantQuotaBytes(t *testing.T) {
	ctx := context.Background()
	w, err := New(filepath.Join(t.TempDir(), "ws"), Options{TenantQuotaBytes: func(tenant string) int64 {
		if tenant == "t" {
			return 1000
		}
		return 0
	}})
	if err != nil {
		t.Fatal(err)
	}
	write := func(key string, n int) error {
		_, err := w.Write(ctx, key, "f", WriteOverwrite, strings.NewReader(strings.Repeat("x", n)))
		return err
	}
	if err := write("t~a", 600); err != nil {
		t.Fatal(err)
	}
	if err := write("t~b", 600); !errors.Is(err, ErrTenantQuotaExceeded) {
		t.Fatalf("crossing the tenant's quota: %v", err)
	}
	if err := write("u~a", 5000); err != nil {
		t.Fatalf("another tenant: %v", err)
	}
	if err := write("plain", 5000); err != nil {
		t.Fatalf("a tenant-less session: %v", err)
	}
	if err := write("t~a", 100); err != nil { // a shrink is always allowed
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var ok atomic.Int32
	for i := range 10 {
		wg.Go(func() {
			if write(fmt.Sprintf("t~c%d", i), 200) == nil {
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	if n := ok.Load(); n != 4 {
		t.Errorf("%d concurrent 200-byte writes fit next to 100 bytes under 1000, want 4", n)
	}
	if used, err := w.TenantUsage(ctx, "t"); err != nil || used != 900 {
		t.Errorf("TenantUsage = %d, %v; want 900", used, err)
	}
}
