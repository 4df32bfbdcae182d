package manager

import (
	"context"

	"github.com/sandgate/sandgate/policy"
)

// ExecutorStates are the configured executors with their availability
// and capabilities, as the policy input has them (the same cached map a
// run's decision gets): an executor proposal must name one of them, and
// its replay decides with them.
func (m *Manager) ExecutorStates(ctx context.Context) map[string]policy.ExecutorState {
	return m.avail.PolicyInput(ctx)
}
