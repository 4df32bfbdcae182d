package egress

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the proxy's Prometheus series. A nil *Metrics records
// nothing.
type Metrics struct {
	conns     *prometheus.CounterVec
	bytes     *prometheus.CounterVec
	tunnels   prometheus.Gauge
	approvals *prometheus.CounterVec
	requests  *prometheus.CounterVec
	reqTime   prometheus.Histogram
}

// NewMetrics registers the series on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		conns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandgate_egress_connections_total",
			Help: "Egress proxy connections by final action (allow, deny) and outcome (ok, denied, error).",
		}, []string{"action", "outcome"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandgate_egress_bytes_total",
			Help: "Bytes through the egress proxy, up (sandbox to server) and down.",
		}, []string{"direction"}),
		tunnels: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sandgate_egress_open_tunnels",
			Help: "Egress connections open now.",
		}),
		approvals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandgate_egress_approvals_total",
			Help: "Egress approvals asked, by status (approved, denied, timeout, withdrawn, interrupted).",
		}, []string{"status"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandgate_egress_requests_total",
			Help: "HTTP requests on intercepted egress connections by final action (allow, deny) and outcome (ok, denied, error).",
		}, []string{"action", "outcome"}),
		reqTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sandgate_egress_request_duration_seconds",
			Help:    "Time of one HTTP request on an intercepted egress connection, decision, approval wait and response included.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}),
	}
	reg.MustRegister(m.conns, m.bytes, m.tunnels, m.approvals, m.requests, m.reqTime)
	return m
}

func (m *Metrics) connection(action, outcome string, up, down int64) {
	if m == nil {
		return
	}
	if action == "" {
		action = "deny"
	}
	m.conns.WithLabelValues(action, outcome).Inc()
	m.bytes.WithLabelValues("up").Add(float64(up))
	m.bytes.WithLabelValues("down").Add(float64(down))
}

func (m *Metrics) request(action, outcome string, d time.Duration) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(action, outcome).Inc()
	m.reqTime.Observe(d.Seconds())
}

func (m *Metrics) tunnel(delta float64) {
	if m != nil {
		m.tunnels.Add(delta)
	}
}

func (m *Metrics) approval(status string) {
	if m != nil {
		m.approvals.WithLabelValues(status).Inc()
	}
}
