package browser

// Manager owns every session's browser Router. It is safe for concurrent
// use.
type Manager struct{}
