// Package egress is the gateway's egress proxy (DESIGN.md §9): the only way
// a run granted network reaches anything outside its sandbox.
//
// The executors bridge 127.0.0.1:3128 inside the sandbox to a per-run
// Handle's ServeConn; everything after that is here. Each connection is an
// HTTP proxy request, CONNECT host:port or an absolute-form plain HTTP
// request (SOCKS5 is not offered: every client the issue names speaks the
// HTTP proxy protocol through HTTP_PROXY/HTTPS_PROXY). For each one the
// proxy
//
//  1. resolves the host itself (an injectable Resolver),
//  2. asks the sandgate.egress Rego package, with the addresses it will
//     dial, whether to allow, deny or ask a human (confirm, kind egress;
//     an answer for the session is cached per session, never shared),
//  3. dials exactly the address it checked (the dialer's Control hook
//     refuses any other), so a name that later resolves elsewhere (DNS
//     rebinding) changes nothing,
//  4. checks that the TLS ClientHello's server name (CONNECT) or the Host
//     header (plain HTTP) is the host that was decided,
//  5. for a host the decision marks for inspection (a rule with methods,
//     paths or query) or with a bound credential, terminates TLS with the
//     gateway CA (offering only http/1.1) and handles each HTTP/1.1
//     request on its own: decided by sandgate.egress with input.http
//     (inspected hosts; pipelined requests too, each read after the
//     previous answer), refused with a 403 an agent can read, held for a
//     person, given the credential whose host, methods and path prefix
//     match, and recorded (kind egress_request, linked to its connection);
//     an allowed upgrade (a WebSocket handshake) that the server switches
//     is spliced from then on, uninspected (upgrade.go); every other
//     tunnel stays end-to-end TLS,
//  6. writes one audit record (kind egress) and counts it in metrics.
//
// A policy reload re-decides every open tunnel and closes those the new
// policy denies. Every failure is a refusal: a policy error, an approval
// service that is missing or times out, a resolver error.
package egress
