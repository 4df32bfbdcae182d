package workspace

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sandgate/sandgate/errcode"
)

// ErrTenantQuotaExceeded is a write that would take a tenant's sessions,
// together, over Options.TenantQuotaBytes.
var ErrTenantQuotaExceeded = errcode.New(errcode.QuotaExceeded, "the write would exceed the tenant's workspace quota")

// tenantUsages holds the measured size of each tenant's workspaces: the
// sum of a walk of each, reused for UsageMaxAge with the API's own writes
// added in between, like a session's usage. The zero value is ready.
//
// Lock order: a session's usage lock, then a tenant's; never the other way
// round. A tenant's measure walks its sessions' trees itself and takes no
// session lock, so a write holding its session's lock can wait for it.
type tenantUsages struct {
	mu sync.Mutex
	m  map[string]*tenantUsage
}

type tenantUsage struct {
	mu         sync.Mutex // held across a measure and a check
	bytes      int64
	measured   time.Time
	refreshing bool // a background measure is running
}

func (c *tenantUsages) get(tenant string) *tenantUsage {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[string]*tenantUsage)
	}
	u, ok := c.m[tenant]
	if !ok {
		u = &tenantUsage{}
		c.m[tenant] = u
	}
	return u
}

// invalidate makes the next check of key's tenant measure again.
func (c *tenantUsages) invalidate(key string) {
	tenant, _ := SplitKey(key)
	if tenant == "" {
		return
	}
	u := c.get(tenant)
	u.mu.Lock()
	u.measured = time.Time{}
	u.mu.Unlock()
}

// TenantUsage returns the regular-file bytes of all of tenant's sessions:
// the figure the tenant's workspace quota is checked against before a run.
// The first call measures; later ones return the last measure plus the
// API's writes since, and start a new measure in the background once it
// is older than UsageMaxAge, so a run never waits for a walk of a large
// tenant's trees.
func (w *Workspaces) TenantUsage(ctx context.Context, tenant string) (int64, error) {
	u := w.tenants.get(tenant)
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.measured.IsZero() {
		if err := w.measureTenantLocked(ctx, tenant, u); err != nil {
			return 0, err
		}
	} else if time.Since(u.measured) > w.opts.UsageMaxAge && !u.refreshing {
		u.refreshing = true
		go w.refreshTenant(tenant, u)
	}
	return u.bytes, nil
}

func (w *Workspaces) refreshTenant(tenant string, u *tenantUsage) {
	total, err := w.sumTenant(context.Background(), tenant)
	u.mu.Lock()
	defer u.mu.Unlock()
	u.refreshing = false
	if err == nil {
		u.bytes, u.measured = total, time.Now()
	}
}

func (w *Workspaces) measureTenantLocked(ctx context.Context, tenant string, u *tenantUsage) error {
	if !u.measured.IsZero() && time.Since(u.measured) <= w.opts.UsageMaxAge {
		return nil
	}
	total, err := w.sumTenant(ctx, tenant)
	if err != nil {
		return err
	}
	u.bytes, u.measured = total, time.Now()
	return nil
}

// sumTenant walks every workspace of tenant and sums its regular files.
func (w *Workspaces) sumTenant(ctx context.Context, tenant string) (int64, error) {
	infos, err := w.ListTenant(ctx, tenant)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, in := range infos {
		s, err := w.open(ctx, in.SessionID, false)
		if err != nil {
			continue // removed meanwhile
		}
		b, _, err := measure(ctx, s.root, w.opts.QuotaFiles+1)
		s.close()
		if err != nil {
			return 0, err
		}
		total += b
	}
	return total, nil
}

// reserveTenant checks that growing key's session by dBytes keeps its
// tenant within Options.TenantQuotaBytes, and counts the growth.
func (w *Workspaces) reserveTenant(ctx context.Context, key string, dBytes int64) error {
	tenant, _ := SplitKey(key)
	if tenant == "" || w.opts.TenantQuotaBytes == nil {
		return nil
	}
	limit := w.opts.TenantQuotaBytes(tenant)
	if limit <= 0 {
		return nil
	}
	u := w.tenants.get(tenant)
	u.mu.Lock()
	defer u.mu.Unlock()
	if dBytes > 0 {
		if err := w.measureTenantLocked(ctx, tenant, u); err != nil {
			return err
		}
		if u.bytes+dBytes > limit {
			return fmt.Errorf("%w: tenant %s holds %d bytes, growing by %d", ErrTenantQuotaExceeded, tenant, u.bytes, dBytes)
		}
	}
	u.bytes += dBytes
	return nil
}

func (w *Workspaces) releaseTenant(key string, dBytes int64) {
	tenant, _ := SplitKey(key)
	if tenant == "" || w.opts.TenantQuotaBytes == nil {
		return
	}
	u := w.tenants.get(tenant)
	u.mu.Lock()
	u.bytes -= dBytes
	u.mu.Unlock()
}
