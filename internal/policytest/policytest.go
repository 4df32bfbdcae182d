// Package policytest holds what the tests of several packages share about
// the policy engine.
package policytest

import "time"

// EvalTimeout is the policy engine's evaluation bound in tests that run
// whole requests. The shipped 500 ms (policy.DefaultEvalTimeout) bounds a
// decision that takes about half a millisecond; under -race, with every
// package's tests and the fault soak on 2 cores, an evaluation now and
// then waited longer than that for a CPU and the run was denied
// policy.timeout (api TestKernelsEndToEnd, manager
// TestRunApprovalPendingHook in CI). What a timeout does is the policy
// package's own test (failclosed_test.go).
const EvalTimeout = 10 * time.Second
