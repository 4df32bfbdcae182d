package manager

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// snapshotQuotaLock is the file, in a tenant's snapshot directory, that
// every gateway sharing the data directory flocks around the tenant's
// quota check: a per-process mutex alone lets a fleet pass the quota.
const snapshotQuotaLock = ".quota.lock"

// lockTenantSnapshots takes the tenant's quota lock: this process's
// mutex, then an exclusive flock(2) on the tenant's lock file, which
// other gateways on the same directory also take (flock also excludes a
// second open file in this process). It blocks without a context: the
// sections it guards only read a directory and make or rename a file.
func (m *Manager) lockTenantSnapshots(tenant string) (unlock func(), err error) {
	mu := m.snaps.tenant(tenant)
	mu.Lock()
	tdir := m.tenantSnapshotDir(tenant)
	if err := os.MkdirAll(tdir, 0o700); err != nil {
		mu.Unlock()
		return nil, fmt.Errorf("manager: snapshot dir: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(tdir, snapshotQuotaLock), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		mu.Unlock()
		return nil, fmt.Errorf("manager: snapshot quota lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		mu.Unlock()
		return nil, fmt.Errorf("manager: snapshot quota lock: %w", err)
	}
	return func() {
		_ = f.Close() // closing the last descriptor releases the flock
		mu.Unlock()
	}, nil
}

// halfWrittenSnapshots counts tenant's snapshot directories without a
// readable meta.json younger than halfWrittenAge: ones being written,
// here or by another gateway, which hold a slot of the count quota until
// they finish or the sweep collects them.
func (m *Manager) halfWrittenSnapshots(tenant string, now time.Time) int {
	tdir := m.tenantSnapshotDir(tenant)
	entries, _ := os.ReadDir(tdir)
	n := 0
	for _, en := range entries {
		if !snapshotIDRe.MatchString(en.Name()) {
			continue
		}
		dir := filepath.Join(tdir, en.Name())
		if _, ok := readSnapshotMeta(dir); ok {
			continue
		}
		if st, err := os.Stat(dir); err == nil && now.Sub(st.ModTime()) < halfWrittenAge {
			n++
		}
	}
	return n
}

// reserveSnapshot checks tenant's quota for one more snapshot named name
// and makes its directory under the fleet-wide lock, so a snapshot being
// written elsewhere counts towards the quota (halfWrittenSnapshots).
func (m *Manager) reserveSnapshot(tenant, name, id string, now time.Time) (dir string, err error) {
	unlock, err := m.lockTenantSnapshots(tenant)
	if err != nil {
		return "", err
	}
	defer unlock()
	q := m.cfg.Quotas.For(tenant)
	have := m.tenantSnapshots(tenant, now)
	used, err := snapshotsUsed(have, name)
	if err != nil {
		return "", err
	}
	if q.MaxSnapshots > 0 && len(have)+m.halfWrittenSnapshots(tenant, now) >= q.MaxSnapshots {
		return "", ErrSnapshotCountQuota
	}
	if q.MaxSnapshotBytes > 0 && used >= q.MaxSnapshotBytes {
		return "", ErrSnapshotByteQuota
	}
	dir = filepath.Join(m.tenantSnapshotDir(tenant), id)
	if err := os.MkdirAll(filepath.Join(dir, "exec"), 0o700); err != nil {
		return "", fmt.Errorf("manager: snapshot dir: %w", err)
	}
	return dir, nil
}

// commitSnapshot writes info's meta.json, which makes it a snapshot,
// under the fleet-wide lock once the name and byte quota still hold
// against the snapshots other writers finished meanwhile.
func (m *Manager) commitSnapshot(dir string, info SnapshotInfo, now time.Time) error {
	unlock, err := m.lockTenantSnapshots(info.Tenant)
	if err != nil {
		return err
	}
	defer unlock()
	used, err := snapshotsUsed(m.tenantSnapshots(info.Tenant, now), info.Name)
	if err != nil {
		return err
	}
	if q := m.cfg.Quotas.For(info.Tenant); q.MaxSnapshotBytes > 0 && used+info.Bytes > q.MaxSnapshotBytes {
		return fmt.Errorf("%w (this one is %d MiB)", ErrSnapshotByteQuota, info.Bytes>>20)
	}
	if err := writeSnapshotMeta(dir, info); err != nil {
		return fmt.Errorf("manager: snapshot meta: %w", err)
	}
	return nil
}

// snapshotsUsed is the bytes of have, or errSnapshotExists when one of
// them is named name.
func snapshotsUsed(have []SnapshotInfo, name string) (int64, error) {
	var used int64
	for _, h := range have {
		if h.Name == name {
			return 0, errSnapshotExists
		}
		used += h.Bytes
	}
	return used, nil
}
