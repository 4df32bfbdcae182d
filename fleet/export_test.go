package fleet

import "net/http"

// SetTransport replaces the transport the Router forwards with, so that a
// test can make a connection fail the way a dead owner's does.
func (rt *Router) SetTransport(t http.RoundTripper) { rt.transport = t }

// ReplayMax is replayMax, for tests.
const ReplayMax = replayMax
