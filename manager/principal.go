package manager

import "context"

// What a front end hands on with a request's context. api authenticates
// every request and mounts the other front ends (mcp, deerflow) on its
// listener; a front end that api authenticates for reads the caller here,
// since front ends never import one another (DESIGN.md §1).

type principalKey struct{}

// WithPrincipal gives ctx the caller a front end authenticated.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the caller WithPrincipal gave ctx; ok is false
// when there is none, which a handler answers as unauthenticated.
func PrincipalFrom(ctx context.Context) (p Principal, ok bool) {
	p, ok = ctx.Value(principalKey{}).(Principal)
	return p, ok && p.Tenant != ""
}

// RequestIDFrom returns the request id WithRequestID gave ctx ("" when
// none), for a front end's own answers and logs.
func RequestIDFrom(ctx context.Context) string { return requestIDFrom(ctx) }
