// Package archtest holds the test that keeps imports flowing the one way
// DESIGN.md §1 draws: cmd → front ends (api, mcp, deerflow, e2b, daytona;
// none imports another) → manager → (risk, policy, confirm, executors/*,
// workspace, browser, audit). It has no non-test code.
package archtest
