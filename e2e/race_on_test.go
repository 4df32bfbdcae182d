//go:build race

package e2e

// raceEnabled: this test binary has the race detector, so the gateway it
// starts is built with it too (and reuses the -race build cache of the
// rest of `go test -race ./...`).
const raceEnabled = true
