package k8s

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/executortest"
	"github.com/sandgate/sandgate/executors/output"
)

// TestPodsCannotReachEachOther: a sandbox listening on all its addresses
// is unreachable from another session's sandbox, even though both pods
// are on the same pod network (the test cluster's plugin enforces no
// NetworkPolicy: the isolation is the network's own).
func TestPodsCannotReachEachOther(t *testing.T) {
	e := newTestExecutor(t)
	listener, prober := "sess-"+executortest.Nonce(), "sess-"+executortest.Nonce()
	// Both pods exist before the listener starts.
	for _, s := range []string{listener, prober} {
		if _, err := e.Execute(t.Context(), bashSpec(t, s, "true")); err != nil {
			t.Fatal(err)
		}
	}
	p, err := sessionPod(t, e, listener)
	if err != nil || p.Status.PodIP == "" {
		t.Fatalf("the listener's pod IP: %q %v", p.Status.PodIP, err)
	}
	serve := executors.Spec{SessionID: listener, Language: executors.LangPython, Timeout: 30 * time.Second,
		WorkspaceDir: executortest.NewWorkspace(t), Code: `
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 9000)); s.listen(); s.settimeout(12)
print("listening", flush=True)
try:
    s.accept(); print("accepted")
except socket.timeout:
    print("none")
`}
	started := make(chan struct{})
	serve.Output = func(c output.Chunk) {
		if strings.Contains(string(c.Data), "listening") {
			select {
			case <-started:
			default:
				close(started)
			}
		}
	}
	done := make(chan executors.Result, 1)
	go func() {
		res, err := e.Execute(context.WithoutCancel(t.Context()), serve)
		if err != nil {
			t.Errorf("listener run: %v", err)
		}
		done <- res
	}()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the listener never started")
	}
	probe := bashSpec(t, prober, fmt.Sprintf(
		`python3 -c 'import socket; s=socket.socket(); s.settimeout(3); s.connect(("%s", 9000)); print("reached")' 2>/dev/null || echo unreachable`,
		p.Status.PodIP))
	res, err := e.Execute(t.Context(), probe)
	if err != nil || res.Stdout != "unreachable\n" {
		t.Errorf("another session's pod connecting to %s:9000: %v stdout %q", p.Status.PodIP, err, res.Stdout)
	}
	if got := <-done; strings.Contains(got.Stdout, "accepted") {
		t.Errorf("the listener accepted a connection from another pod: %q", got.Stdout)
	}
}
