package aio

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/executortest"
)

// TestEgressSharedInstance: runs of one session share the instance's
// loopback, so its egress bridge serves a connection only while the run
// granted network is the instance's only active run. A connection made
// while a concurrent run without network is active is refused (that run
// must not get network through its sibling's grant); once that run is
// over, the same program reaches the server.
func TestEgressSharedInstance(t *testing.T) {
	e := newTestExecutor(t)
	ws := executortest.NewWorkspace(t)
	proxy := executortest.NewTestProxy()
	target := executortest.NewEgressTarget(t, nil)
	proxy.Route("plain.egress.test:80", target.Addr())
	session := "sess-" + executortest.Nonce()
	spec := func(id, code string) executors.Spec {
		return executors.Spec{RequestID: id, SessionID: session, Language: executors.LangBash, Code: code,
			Timeout: 90 * time.Second, WorkspaceDir: ws}
	}
	granted := spec("req-a-"+executortest.Nonce(), `until [ -f /workspace/b-started ]; do sleep 0.05; done
curl -sS --max-time 20 http://plain.egress.test/while-b || echo refused-while-b
touch /workspace/a-tried
until [ -f /workspace/b-gone ]; do sleep 0.05; done
curl -sS --max-time 20 http://plain.egress.test/alone || echo refused-alone
`)
	granted.Network, granted.Egress = true, proxy
	type outcome struct {
		res executors.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := e.Execute(t.Context(), granted)
		done <- outcome{res, err}
	}()
	res, err := e.Execute(t.Context(), spec("req-b-"+executortest.Nonce(),
		"touch /workspace/b-started\nuntil [ -f /workspace/a-tried ]; do sleep 0.05; done\n"))
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("the run without network: %+v %v", res, err)
	}
	if err := os.WriteFile(filepath.Join(ws, "b-gone"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if a.err != nil {
		t.Fatalf("the run granted network: %v", a.err)
	}
	out := a.res.Stdout
	if !strings.Contains(out, "refused-while-b") || !strings.Contains(out, "egress-ok /alone") {
		t.Errorf("stdout %q (stderr %q), want the first request refused and the second served", out, a.res.Stderr)
	}
	if target.Asked("/while-b") {
		t.Error("the server was reached while a run without network was active on the instance")
	}
}
