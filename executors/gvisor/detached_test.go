package gvisor

import (
	"io"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/executors"
)

// TestDetachedUnderGVisor: a detached run under runsc takes its input
// after the program text (the relay boot script), writes more than a
// pipe's worth without losing any (the FIFO relays), and has a loopback
// of its own: a later run of the session does not reach its server,
// since every gVisor sandbox has its own network stack.
func TestDetachedUnderGVisor(t *testing.T) {
	e := newTestExecutor(t)
	s := spec(t, executors.LangBash, "read -r line; echo got:$line; head -c 200000 /dev/zero | tr '\\0' x")
	h, err := e.StartDetached(t.Context(), s, true)
	if err != nil {
		t.Fatalf("StartDetached: %v", err)
	}
	if _, err := io.WriteString(h.Stdin(), "typed\n"); err != nil {
		t.Fatalf("stdin: %v", err)
	}
	res, err := h.Wait()
	if err != nil || res.ExitCode != 0 || !strings.HasPrefix(res.Stdout, "got:typed\n") ||
		strings.Count(res.Stdout, "x") != 200000 {
		t.Fatalf("result: exit %d, %d bytes, err %v: %.80q", res.ExitCode, len(res.Stdout), err, res.Stdout)
	}

	srv := s
	srv.RequestID, srv.Code = s.RequestID+"-srv", "exec python3 -m http.server 8124 --bind 127.0.0.1"
	sh, err := e.StartDetached(t.Context(), srv, false)
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Kill()
	probe := s
	probe.RequestID, probe.Code = s.RequestID+"-probe", "sleep 2; curl -s -m 2 http://127.0.0.1:8124/ >/dev/null; echo rc=$?"
	if r := execute(t, e, probe); !strings.Contains(r.Stdout, "rc=7") {
		t.Errorf("a later gVisor run reached the detached server's loopback: %+v", r)
	}
}
