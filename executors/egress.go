package executors

import (
	"context"
	"net"
)

// EgressPort is the loopback port on which a run granted network finds
// the gateway's egress proxy inside its sandbox (DESIGN.md §9). The
// sandbox itself has no interface but lo: the executor bridges this port
// to Egress.ServeConn.
const EgressPort = 3128

// Egress connects one run to the gateway's egress proxy. The manager sets
// Spec.Egress when, and only when, the run's decision grants network
// (Spec.Network); it is bound to that run (session, principal, request id,
// risk, mode), so every connection the run opens is decided and audited
// as that run's.
//
// The split keeps executors ignorant of policy: an executor only moves
// bytes. It accepts the run's connections to 127.0.0.1:EgressPort in
// whatever way its isolation allows (a listener the gateway creates in
// the run's network namespace, a Unix socket bind-mounted into a
// container and a forwarder there, sandboxd relaying) and hands each one
// to ServeConn.
type Egress interface {
	// ServeConn serves one connection the run opened to the proxy port:
	// the HTTP proxy protocol (CONNECT host:port, or an absolute-form
	// plain HTTP request). It returns when the connection is finished and
	// always closes conn. ctx is the run's: when it ends, open tunnels
	// close.
	ServeConn(ctx context.Context, conn net.Conn)
	// CACertPEM is the certificate of the gateway CA that the sandbox
	// must trust in addition to the system roots, because the proxy
	// intercepts TLS for hosts with a bound credential. Nil when nothing
	// is intercepted.
	CACertPEM() []byte
}
