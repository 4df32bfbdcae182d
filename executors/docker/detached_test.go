package docker

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/output"
)

var _ executors.DetachedHost = (*Executor)(nil)

// tapBuffer collects a run's streamed stdout.
type tapBuffer struct {
	mu  sync.Mutex
	out strings.Builder
}

func (b *tapBuffer) tap(c output.Chunk) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c.Stream == output.Stdout {
		b.out.Write(c.Data)
	}
}

func (b *tapBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.out.String()
}

// TestDetachedServerReachedFromLaterRun: a detached run serves HTTP on
// the session's loopback; a later ordinary run of the same session
// fetches it; stdin reaches a detached program; Kill ends the server
// with 137; the session's release leaves no container behind.
func TestDetachedServerReachedFromLaterRun(t *testing.T) {
	e := newTestExecutor(t)
	srv := spec(t, executors.LangBash, "cd /workspace && echo hello-over-lo > index.html && exec python3 -m http.server 8123 --bind 127.0.0.1")
	var tap tapBuffer
	srv.Output = tap.tap
	h, err := e.StartDetached(t.Context(), srv, false)
	if err != nil {
		t.Fatalf("StartDetached: %v", err)
	}
	fetch := srv
	fetch.RequestID, fetch.Output = "req-"+t.Name()[:8]+"-fetch", nil
	fetch.Code = "for i in $(seq 50); do curl -sf http://127.0.0.1:8123/index.html && exit 0; sleep 0.2; done; exit 7"
	res := execute(t, e, fetch)
	if res.ExitCode != 0 || res.Stdout != "hello-over-lo\n" {
		t.Fatalf("the later run did not reach the server: %+v", res)
	}
	u, err := e.SessionUsage(t.Context(), srv.SessionID)
	if err != nil || u.Sandboxes < 2 || u.MemLimit <= 0 || u.MemUsed <= 0 || u.CPUNanos == 0 {
		t.Errorf("the session's usage (the server, the holder, a warm container): %+v %v", u, err)
	}
	other := spec(t, executors.LangBash, "curl -s -m 2 http://127.0.0.1:8123/ ; echo rc=$?")
	if res := execute(t, e, other); !strings.Contains(res.Stdout, "rc=7") {
		t.Errorf("another session reached the server: %+v", res)
	}

	echo := srv
	echo.RequestID, echo.Output = "req-"+t.Name()[:8]+"-stdin", nil
	echo.Code = "read -r line; echo got:$line"
	eh, err := e.StartDetached(t.Context(), echo, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(eh.Stdin(), "typed\n"); err != nil {
		t.Fatalf("stdin: %v", err)
	}
	if res, err := eh.Wait(); err != nil || res.Stdout != "got:typed\n" || res.ExitCode != 0 {
		t.Errorf("the detached program's input: %+v %v", res, err)
	}

	h.Kill()
	done := make(chan struct{})
	var kres executors.Result
	go func() { kres, err = h.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Kill did not end the run")
	}
	if err != nil || kres.ExitCode != exitSIGKILL {
		t.Errorf("killed server: %+v %v", kres, err)
	}
	// The session's release ends what still runs in it, and its holder.
	sleeper := srv
	sleeper.RequestID, sleeper.Output, sleeper.Code = "req-"+t.Name()[:8]+"-sleep", nil, "sleep 120"
	sh, err := e.StartDetached(t.Context(), sleeper, false)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.ReleaseSession(ctx, srv.SessionID); err != nil {
		t.Fatal(err)
	}
	if res, err := sh.Wait(); err != nil || res.ExitCode != exitSIGKILL {
		t.Errorf("a detached run after its session's release: %+v %v", res, err)
	}
	if id := e.detached.netns(srv.SessionID); id != "" {
		t.Errorf("the session's network holder %s outlived its release", id)
	}
}
