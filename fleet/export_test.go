package fleet

import (
	"context"
	"net/http"
)

// SetTransport replaces the transport the Router forwards with, so that a
// test can make a connection fail the way a dead owner's does.
func (rt *Router) SetTransport(t http.RoundTripper) { rt.transport = t }

// ReplayMax is replayMax, for tests.
const ReplayMax = replayMax

// Expire kills the registry (Kill) and ends its lease now, as if it had
// run out: a test of what survivors do with an expired replica's sessions
// need not wait out a lease short enough that a loaded machine would let
// the survivors' own leases lapse too.
func (r *Registry) Expire(ctx context.Context) error {
	r.Kill()
	_, err := r.db.DB().ExecContext(ctx, `UPDATE replicas SET lease_until = now() - interval '1 millisecond' WHERE name = $1`, r.opts.Replica)
	return err
}
