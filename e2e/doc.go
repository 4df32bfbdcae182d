// Package e2e holds end-to-end tests that drive a real gateway process,
// built from this checkout, with real third-party clients that nobody here
// wrote (npm packages pinned by the lockfiles under e2e/*/), and the test
// suites of the client packages this repository publishes (clients/*: the
// TypeScript one with the real npm deepagents, the Python one with the
// system python3 alone). The package has no code of its own; see the
// _test.go files.
//
// The clients are installed by `make npm-deps` (run by `make test`). Under
// plain `go test` a missing node or node_modules skips these tests;
// SANDGATE_REQUIRE_NPM_CLIENTS=1, which `make test` sets, makes it a
// failure.
package e2e
