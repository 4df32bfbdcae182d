// Package archtest holds the test that keeps imports flowing the one way
// DESIGN.md §1 draws: cmd → api → manager → (risk, policy, confirm,
// executors/*, workspace, browser, audit). It has no non-test code.
package archtest
