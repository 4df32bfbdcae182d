package executors

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestEgressEnv: a run granted network gets the proxy variables in both
// spellings and NO_PROXY for loopback; the CA variables only with a CA,
// all pointing at the one bundle path.
func TestEgressEnv(t *testing.T) {
	for _, withCA := range []bool{false, true} {
		env := EgressEnv(withCA)
		got := map[string]string{}
		for _, kv := range env {
			k, v, _ := strings.Cut(kv, "=")
			got[k] = v
		}
		for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"} {
			if got[k] != "http://127.0.0.1:3128" {
				t.Errorf("withCA=%v: %s=%q", withCA, k, got[k])
			}
		}
		if got["NO_PROXY"] != "localhost,127.0.0.1,::1" || got["no_proxy"] != got["NO_PROXY"] {
			t.Errorf("withCA=%v: NO_PROXY=%q no_proxy=%q", withCA, got["NO_PROXY"], got["no_proxy"])
		}
		for _, k := range caVariables {
			if want := map[bool]string{true: "/run/sandgate/egress/ca.pem"}[withCA]; got[k] != want {
				t.Errorf("withCA=%v: %s=%q, want %q", withCA, k, got[k], want)
			}
		}
	}
}

// TestEgressBundle: the system roots come first and are kept; the CA is
// appended on a line of its own.
func TestEgressBundle(t *testing.T) {
	for _, tc := range []struct{ system, ca, want string }{
		{"SYS\n", "CA\n", "SYS\nCA\n"},
		{"SYS", "CA", "SYS\nCA\n"},
		{"", "CA\n", "CA\n"},
	} {
		if got := string(EgressBundle([]byte(tc.system), []byte(tc.ca))); got != tc.want {
			t.Errorf("EgressBundle(%q, %q) = %q, want %q", tc.system, tc.ca, got, tc.want)
		}
	}
}

type countingEgress struct{ served atomic.Int32 }

func (c *countingEgress) ServeConn(ctx context.Context, conn net.Conn) {
	c.served.Add(1)
	<-ctx.Done() // a tunnel that stays open until the run ends
	conn.Close()
}

func (c *countingEgress) CACertPEM() []byte { return nil }

// TestCheckEgress: network needs the capability and an Egress; both
// refusals are ErrCapabilityMissing; no network needs neither.
func TestCheckEgress(t *testing.T) {
	eg := &countingEgress{}
	for _, tc := range []struct {
		name string
		caps Capabilities
		spec Spec
		ok   bool
	}{
		{"no network", Capabilities{}, Spec{}, true},
		{"granted", Capabilities{NetworkGrant: true}, Spec{Network: true, Egress: eg}, true},
		{"no capability", Capabilities{}, Spec{Network: true, Egress: eg}, false},
		{"no egress", Capabilities{NetworkGrant: true}, Spec{Network: true}, false},
	} {
		err := CheckEgress(KindDocker, tc.caps, tc.spec)
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrCapabilityMissing)) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

// TestServeEgress: every accepted connection reaches ServeConn, and stop
// ends the open ones (their context) and returns only once they did.
func TestServeEgress(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	eg := &countingEgress{}
	stop := ServeEgress(t.Context(), ln, eg)
	var conns []net.Conn
	for range 3 {
		c, err := net.Dial("tcp4", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	deadline := time.Now().Add(10 * time.Second)
	for eg.served.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	if n := eg.served.Load(); n != 3 {
		t.Fatalf("served %d connections, want 3", n)
	}
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
			t.Errorf("a connection is still open after stop: %v", err)
		}
		c.Close()
	}
	if _, err := net.Dial("tcp4", ln.Addr().String()); err == nil {
		t.Error("the listener still accepts after stop")
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
