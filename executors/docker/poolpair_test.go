package docker

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
)

// TestPoolPairServesFirstDetachedRun: a session's first detached run
// (E2B's commands.run) takes a pooled holder and a pooled sandbox in its
// namespace: it runs as the session, in its workspace, and a server it
// starts on loopback is reached from the session's later run, through
// the holder the claim made the session's.
func TestPoolPairServesFirstDetachedRun(t *testing.T) {
	needRoot(t)
	e := newTestExecutor(t, withPool(t, 1, 4))
	first := spec(t, executors.LangBash, "echo warmup")
	h, err := e.StartDetached(t.Context(), first, false) // makes the shape's pair pool
	if err != nil {
		t.Fatal(err)
	}
	if res, err := h.Wait(); err != nil || res.ExitCode != 0 {
		t.Fatalf("first: %+v %v", res, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	for e.PoolStatus().Idle < 3 && ctx.Err() == nil { // one sandbox, one pair
		time.Sleep(50 * time.Millisecond)
	}
	before := e.PoolStatus().Claims
	srv := spec(t, executors.LangBash, `id -u; cat b.txt; echo hello-over-lo > index.html; exec python3 -m http.server 8124 --bind 127.0.0.1 >/dev/null 2>&1`)
	srv.UID, srv.GID = 61003, 61003
	if err := os.Chown(srv.WorkspaceDir, 61003, 61003); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(srv.WorkspaceDir, "b.txt"), []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var tap tapBuffer
	srv.Output = tap.tap
	hs, err := e.StartDetached(t.Context(), srv, false)
	if err != nil {
		t.Fatal(err)
	}
	defer hs.Kill()
	if got := e.PoolStatus().Claims; got != before+1 {
		t.Fatalf("the first detached run was not served from a pooled pair: %+v", e.PoolStatus())
	}
	fetch := srv
	fetch.RequestID, fetch.Output = "req-pair-fetch-"+srv.RequestID[4:12], nil
	fetch.Code = "for i in $(seq 50); do curl -sf http://127.0.0.1:8124/index.html && exit 0; sleep 0.2; done; exit 7"
	res := execute(t, e, fetch)
	if res.ExitCode != 0 || res.Stdout != "hello-over-lo\n" {
		t.Fatalf("the later run did not reach the server through the adopted holder: %+v", res)
	}
	if out := tap.String(); out != "61003\nmine\n" {
		t.Errorf("the detached run's output %q, want its uid and its workspace's file", out)
	}
}
