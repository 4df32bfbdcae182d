package fleet_test

import (
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/fleet"
	"github.com/sandgate/sandgate/internal/pgtest"
)

// droppingTransport fails its first round trip as a kept-alive connection
// to a dead owner does: it writes some of the body, then EPIPE. The rest
// go through a real transport.
type droppingTransport struct {
	calls atomic.Int32
	sent  int // how many body bytes the dropped attempt reads
	next  http.RoundTripper
}

func (d *droppingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if d.calls.Add(1) > 1 {
		return d.next.RoundTrip(r)
	}
	_, _ = io.CopyN(io.Discard, r.Body, int64(d.sent))
	return nil, &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}
}

// TestForwardOnDroppedConnection: when the connection to the owner breaks
// while the request is being written (EPIPE: a kept-alive connection the
// owner closed as it died), the owner acted on none of it, so the request
// is sent again, its body whole, and the client gets the owner's answer.
// A body too large to keep for a replay is answered 503 instead.
func TestForwardOnDroppedConnection(t *testing.T) {
	dsn := pgtest.Schema(t)
	// No lease is waited out here: a lease no heartbeat misses on a
	// loaded machine, or b would adopt the session.
	const lease = 10 * time.Second
	a, b := startReplica(t, dsn, "a", lease), startReplica(t, dsn, "b", lease)
	if st, _ := post(t, a.srv.URL, "s1", "own"); st != 200 {
		t.Fatalf("on the owner: %d", st)
	}
	cases := []struct {
		name string
		body string
		want int
	}{
		{"small body, partly written", "the whole request body", 200},
		{"body past the replay bound", strings.Repeat("x", fleet.ReplayMax+10), 503},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			drop := &droppingTransport{sent: 7, next: http.DefaultTransport}
			if tc.want == 503 {
				drop.sent = fleet.ReplayMax + 1
			}
			b.router.SetTransport(drop)
			st, out := post(t, b.srv.URL, "s1", tc.body)
			if st != tc.want {
				t.Fatalf("status %d, want %d: %.200q", st, tc.want, out)
			}
			if tc.want == 200 && out != "a Bearer agent-x hop=true req_b "+tc.body+"\ndone\n" {
				t.Fatalf("owner's answer %q: the body did not arrive whole", out)
			}
			if n := drop.calls.Load(); tc.want == 200 && n != 2 {
				t.Fatalf("%d round trips, want the dropped one and its replay", n)
			}
		})
	}
}
