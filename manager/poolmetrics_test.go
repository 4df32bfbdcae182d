package manager

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sandgate/sandgate/executors"
)

// pooled is an executor stand-in with a pool, for the collector.
type pooled struct {
	executors.Executor
	st executors.PoolStatus
}

func (p pooled) Kind() executors.Kind                 { return executors.KindDocker }
func (p pooled) PoolStatus() executors.PoolStatus     { return p.st }
func (p pooled) Available(context.Context) error      { return nil }
func (p pooled) Capabilities() executors.Capabilities { return executors.Capabilities{} }

func TestPoolCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewPoolCollector([]executors.Executor{pooled{st: executors.PoolStatus{Enabled: true, Idle: 3, Max: 8, Claims: 5, Misses: 2}}}))
	want := `
# HELP sandgate_pool_idle_sandboxes Pre-started sandboxes of no session, ready to claim.
# TYPE sandgate_pool_idle_sandboxes gauge
sandgate_pool_idle_sandboxes{executor="docker"} 3
# HELP sandgate_pool_misses_total Runs that found no pooled sandbox ready and started their own.
# TYPE sandgate_pool_misses_total counter
sandgate_pool_misses_total{executor="docker"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sandgate_pool_idle_sandboxes", "sandgate_pool_misses_total"); err != nil {
		t.Error(err)
	}
}
