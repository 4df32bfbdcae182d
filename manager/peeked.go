package manager

import "context"

// withPeekedSession runs do on ref's session in this process, admitted
// as a read of the tenant's rate. It peeks: naming an unknown session
// creates none and a paused one is not resumed unless do asks, and a
// session the table does not keep is not found.
func (m *Manager) withPeekedSession(ctx context.Context, p Principal, ref SessionRef, do func(*Session) error) error {
	return m.admitted(ctx, m.rateRef(p, ref), opRead, func() error {
		s, err := m.local(WithSessionPeek(ctx), ref)
		if err != nil {
			return err
		}
		if _, kept := m.table.cached(ref.Key); !kept {
			return errSessionNotFound
		}
		return do(s)
	})
}
