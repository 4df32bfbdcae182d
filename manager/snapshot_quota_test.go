package manager

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// quotaManager is a manager of the snapshot directory dir with room for
// max snapshots per tenant; each has its own process lock, as gateways
// of one fleet do.
func quotaManager(dir string, max int) *Manager {
	return &Manager{cfg: Config{Snapshots: SnapshotConfig{Dir: dir},
		Quotas: QuotaConfig{Default: Quota{MaxSnapshots: max}}}}
}

func keepSnapshot(t *testing.T, m *Manager, tenant, id, name string, now time.Time) {
	t.Helper()
	dir := filepath.Join(m.tenantSnapshotDir(tenant), id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	info := SnapshotInfo{ID: id, Name: name, Tenant: tenant, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
	if err := writeSnapshotMeta(dir, info); err != nil {
		t.Fatal(err)
	}
}

// TestSnapshotQuotaFleetRace: gateways sharing the directory race for a
// tenant's last slot; exactly one reserves it.
func TestSnapshotQuotaFleetRace(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	keepSnapshot(t, quotaManager(dir, 2), "acme", "snap-00000000000000aa", "first", now)
	const gateways = 8
	var wg sync.WaitGroup
	errs := make([]error, gateways)
	for i := range gateways {
		wg.Go(func() {
			m := quotaManager(dir, 2)
			_, errs[i] = m.reserveSnapshot("acme", "second", "snap-"+randomHex(8), now)
		})
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, ErrSnapshotCountQuota):
			t.Errorf("refusal = %v, want ErrSnapshotCountQuota", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d gateways reserved the last slot, want 1", won)
	}
}

// TestSnapshotQuotaHalfWritten: a snapshot another gateway is writing
// (no meta.json yet) holds its slot; one a crash left for longer than
// halfWrittenAge does not.
func TestSnapshotQuotaHalfWritten(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	m := quotaManager(dir, 2)
	keepSnapshot(t, m, "acme", "snap-00000000000000aa", "first", now)
	half := filepath.Join(m.tenantSnapshotDir("acme"), "snap-00000000000000bb")
	if err := os.MkdirAll(filepath.Join(half, "exec"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := m.reserveSnapshot("acme", "second", "snap-00000000000000cc", now); !errors.Is(err, ErrSnapshotCountQuota) {
		t.Fatalf("with one being written: err = %v, want ErrSnapshotCountQuota", err)
	}
	old := now.Add(-2 * halfWrittenAge)
	if err := os.Chtimes(half, old, old); err != nil {
		t.Fatal(err)
	}
	if _, err := m.reserveSnapshot("acme", "second", "snap-00000000000000cc", now); err != nil {
		t.Fatalf("with a stale half-written one: err = %v, want a reservation", err)
	}
	if _, err := m.reserveSnapshot("other", "x", "snap-00000000000000dd", now); err != nil {
		t.Fatalf("another tenant: err = %v", err)
	}
}

// TestSnapshotCommitRechecksName: two writers reserved the same name;
// the second to finish is refused instead of making a duplicate.
func TestSnapshotCommitRechecksName(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	m := quotaManager(dir, 5)
	d1, err := m.reserveSnapshot("acme", "same", "snap-00000000000000a1", now)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := m.reserveSnapshot("acme", "same", "snap-00000000000000a2", now)
	if err != nil {
		t.Fatal(err)
	}
	mk := func(id string) SnapshotInfo {
		return SnapshotInfo{ID: id, Name: "same", Tenant: "acme", CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
	}
	if err := m.commitSnapshot(d1, mk("snap-00000000000000a1"), now); err != nil {
		t.Fatal(err)
	}
	if err := m.commitSnapshot(d2, mk("snap-00000000000000a2"), now); !errors.Is(err, errSnapshotExists) {
		t.Fatalf("second commit: err = %v, want errSnapshotExists", err)
	}
}
