package events_test

import (
	"os"
	"testing"
	"time"

	"github.com/sandgate/sandgate/events"
	"github.com/sandgate/sandgate/internal/pgtest"
)

// BenchmarkPublishToWebhook measures what issue 27's benchmark names:
// from Publish (a run's end) to the signed request's arrival at a healthy
// loopback receiver, one event at a time. It reports p50 and p99 in ms.
func BenchmarkPublishToWebhook(b *testing.B) {
	drivers := map[string]func(testing.TB) opener{"sqlite": sqliteOpener}
	if os.Getenv(pgtest.EnvDSN) != "" {
		drivers["postgres"] = postgresOpener
	}
	for name, mk := range drivers {
		b.Run(name, func(b *testing.B) {
			rcv := newReceiver(b)
			l := openLog(b, mk(b)(b, "r1"), events.Config{Webhooks: []events.Webhook{rcv.webhook("acme")}}, nil)
			lat := make([]time.Duration, 0, b.N)
			var id int64
			for b.Loop() {
				start := time.Now()
				publish(b, l, "acme", events.RunFinished, 1)
				id++
				rcv.waitAccepted(b, []int64{id}, 10*time.Second)
				lat = append(lat, rcv.acceptedAt(id).Sub(start))
			}
			b.ReportMetric(float64(percentile(lat, 50).Microseconds())/1e3, "p50-ms")
			b.ReportMetric(float64(percentile(lat, 99).Microseconds())/1e3, "p99-ms")
		})
	}
}
