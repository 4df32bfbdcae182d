package confirm

import (
	"context"
	"slices"
	"testing"
	"time"
)

// BenchmarkCrossReplicaRelease is the cross-replica approval path: a
// request held on replica A, approved through replica B's hub, timed from
// the start of B's decision to A's Confirm returning (the conditional
// update and NOTIFY on B, the notification and the row read on A).
// Reports p50 and p99. Needs the test cluster (SANDGATE_TEST_POSTGRES_DSN).
//
// Run: go test -run '^$' -bench BenchmarkCrossReplicaRelease -benchtime 300x ./confirm/
func BenchmarkCrossReplicaRelease(b *testing.B) {
	hubs := fleetB(b, 2)
	a, bh := hubs[0], hubs[1]
	lat := make([]time.Duration, 0, b.N)
	for b.Loop() {
		wait := confirmAsync(context.Background(), a, request("s1", "import subprocess"))
		v := waitPending(b, a, 1)[0]
		t0 := time.Now()
		if _, err := bh.Decide(context.Background(), v.ID, Approver{Name: "bob"}, Decision{Decision: "approve"}); err != nil {
			b.Fatal(err)
		}
		<-wait.done
		lat = append(lat, time.Since(t0))
		if wait.out.Status != StatusApproved {
			b.Fatalf("outcome %+v", wait.out)
		}
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50_ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99_ms")
}
