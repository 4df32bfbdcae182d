package confirm

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sandgate/sandgate/confirm/slacktest"
)

// BenchmarkSlackChannel measures, on loopback against the stand-in, a held
// request to its Slack post (post_p50_ms, post_p99_ms) and a signed
// Approve click to the released request (release_p50_ms,
// release_p99_ms): the callback's verification, the decision's database
// write and the waiting Confirm's return.
func BenchmarkSlackChannel(b *testing.B) {
	e := newSlackEnv(b, Route{})
	var post, release []time.Duration
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		a := confirmAsync(context.Background(), e.th.Hub, request("bench-"+strconv.Itoa(i), "import os\nos.system('id')\n"))
		v := waitPending(b, e.th.Hub, 1)[0]
		m := e.posted(b, v.ID)
		post = append(post, time.Since(start))
		click := time.Now()
		if st, err := e.slack.Send(e.cb.URL, slacktest.Click{UserID: "U0ALICE", ActionID: "approve", Message: m}); err != nil || st != 200 {
			b.Fatalf("%d %v", st, err)
		}
		if out := a.wait(b); !out.Approved() {
			b.Fatal(out)
		}
		release = append(release, time.Since(click))
	}
	pct := func(ds []time.Duration, p float64) float64 {
		slices.Sort(ds)
		return float64(ds[int(p*float64(len(ds)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(post, 0.5), "post_p50_ms")
	b.ReportMetric(pct(post, 0.99), "post_p99_ms")
	b.ReportMetric(pct(release, 0.5), "release_p50_ms")
	b.ReportMetric(pct(release, 0.99), "release_p99_ms")
}
