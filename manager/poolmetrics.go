package manager

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandgate/sandgate/executors"
)

// poolCollector exports the pools of pre-started sandboxes
// (executors.Pooler) as gauges and counters read at scrape time, so a
// pool's size, its claims and its misses need no bookkeeping of their own.
type poolCollector struct {
	execs []executors.Pooler
	kinds []string
	idle, preparing, max,
	claims, misses, made, lost *prometheus.Desc
}

// NewPoolCollector is the collector of the pools of execs (those that
// have one); register it on the gateway's registry.
func NewPoolCollector(execs []executors.Executor) prometheus.Collector {
	c := &poolCollector{}
	for _, e := range execs {
		if p, ok := e.(executors.Pooler); ok {
			c.execs, c.kinds = append(c.execs, p), append(c.kinds, string(e.Kind()))
		}
	}
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("sandgate_pool_"+name, help, []string{"executor"}, nil)
	}
	c.idle = d("idle_sandboxes", "Pre-started sandboxes of no session, ready to claim.")
	c.preparing = d("preparing_sandboxes", "Pooled sandboxes being started.")
	c.max = d("max_sandboxes", "The pool's cap (idle and being started, every shape).")
	c.claims = d("claims_total", "Runs served by a pooled sandbox.")
	c.misses = d("misses_total", "Runs that found no pooled sandbox ready and started their own.")
	c.made = d("started_total", "Pooled sandboxes started.")
	c.lost = d("lost_total", "Pooled sandboxes that died while waiting.")
	return c
}

// Describe implements prometheus.Collector.
func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.idle, c.preparing, c.max, c.claims, c.misses, c.made, c.lost} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	for i, p := range c.execs {
		st, k := p.PoolStatus(), c.kinds[i]
		g := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, k)
		}
		n := func(d *prometheus.Desc, v int64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), k)
		}
		g(c.idle, float64(st.Idle))
		g(c.preparing, float64(st.Preparing))
		g(c.max, float64(max(st.Max, 0)))
		n(c.claims, st.Claims)
		n(c.misses, st.Misses)
		n(c.made, st.Made)
		n(c.lost, st.Lost)
	}
}
