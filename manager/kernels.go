package manager

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/executors"
)

// KindKernelRestart is the audit kind of POST /v1/sessions/{id}/kernel/restart.
const KindKernelRestart = "kernel.restart"

// RestartKernel replaces the session's kernel (DESIGN.md §11) with a fresh
// one in every executor that hosts one for it, and reports whether any
// did. It runs no code, so it takes no policy decision; it is audited
// like a session's deletion, and rate-limited like a read. Another
// tenant's session is not_found.
func (m *Manager) RestartKernel(ctx context.Context, p Principal, id string) (restarted bool, err error) {
	start := time.Now()
	rec := &audit.Record{RequestID: requestIDFrom(ctx), Kind: KindKernelRestart, Tenant: p.Tenant, SessionID: id,
		Principal: p.Role + ":" + p.Name}
	defer func() {
		setDetail(rec, "restarted", strconv.FormatBool(restarted))
		m.record(ctx, rec, fileOutcome(err), err, start)
	}()
	ref, err := m.ResolveSession(p, id)
	if err != nil {
		return false, err
	}
	rec.Tenant, rec.SessionID = ref.Tenant, ref.ID
	err = m.admitted(ctx, m.rateRef(p, ref), opRead, func() error {
		var errs []error
		for _, e := range m.deps.Executors {
			h, ok := e.(executors.KernelHost)
			if !ok {
				continue
			}
			did, err := h.RestartKernel(ctx, ref.Key)
			restarted = restarted || did
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	})
	return restarted, err
}
