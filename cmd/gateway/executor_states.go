package main

import (
	"context"

	"github.com/sandgate/sandgate/policy"
)

// executorStates are the configured executors as the policy sees them,
// for executor proposals. The proposals are opened before the manager
// (the hub they belong to is one of its dependencies), so this reads the
// manager when asked, which is after build has made it: a request before
// that has no executors to name.
func (gw *gateway) executorStates(ctx context.Context) map[string]policy.ExecutorState {
	if gw.manager == nil {
		return nil
	}
	return gw.manager.ExecutorStates(ctx)
}
