package docker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/executortest"
)

// sessionContainers lists the containers of one session of e's instance.
func sessionContainers(t *testing.T, e *Executor, session string) []string {
	t.Helper()
	list, err := e.cli.ContainerList(t.Context(), client.ContainerListOptions{
		All: true, Filters: e.instanceFilter().Add("label", labelSession+"="+session),
	})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range list.Items {
		ids = append(ids, c.ID)
	}
	return ids
}

// settle waits for the executor's background removals and preparations.
func settle(t *testing.T, e *Executor, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sessionSpec is a run of session with its own workspace and uid.
type session struct {
	id  string
	ws  string
	uid int
}

func newSession(t *testing.T, uid int) session {
	return session{id: "sess-" + executortest.Nonce(), ws: newWorkspace(t), uid: uid}
}

func (s session) spec(lang, code string) executors.Spec {
	return executors.Spec{
		RequestID: "req-" + executortest.Nonce(), SessionID: s.id, Language: lang, Code: code,
		Timeout: 30 * time.Second, WorkspaceDir: s.ws, UID: s.uid, GID: s.uid,
	}
}

func TestWarmServesOnlyItsSession(t *testing.T) {
	e := newTestExecutor(t)
	a, b := newSession(t, 3_200_001), newSession(t, 3_200_002)
	if err := os.WriteFile(filepath.Join(b.ws, "b-only.txt"), []byte("b"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := execute(t, e, a.spec(executors.LangPython, "open('a-only.txt', 'w').write('a')"))
	if res.ExitCode != 0 || !e.warm.waitReady(t.Context(), a.id) {
		t.Fatalf("first run %+v; warm container not prepared", res)
	}
	warmA := sessionContainers(t, e, a.id)
	if len(warmA) != 1 {
		t.Fatalf("session a has containers %v, want its one warm container", warmA)
	}

	// Another session never gets a's warm container.
	res = execute(t, e, b.spec(executors.LangBash, "id -u; ls"))
	if res.Stdout != "3200002\nb-only.txt\n" || e.warmHits.Load() != 0 {
		t.Fatalf("session b saw %q (stderr %q), warm hits %d", res.Stdout, res.Stderr, e.warmHits.Load())
	}
	if got := sessionContainers(t, e, a.id); len(got) != 1 || got[0] != warmA[0] {
		t.Fatalf("a's warm container changed to %v", got)
	}

	// a's next run, in any language of the image, uses it.
	res = execute(t, e, a.spec(executors.LangJavaScript, "console.log(require('fs').readdirSync('.').join(','), process.getuid())"))
	if res.Stdout != "a-only.txt 3200001\n" || e.warmHits.Load() != 1 {
		t.Fatalf("warm run: %q (stderr %q), warm hits %d", res.Stdout, res.Stderr, e.warmHits.Load())
	}
	if !e.warm.waitReady(t.Context(), a.id) {
		t.Fatal("no warm container prepared after the warm run")
	}

	// Releasing the session removes its warm container.
	if err := e.ReleaseSession(t.Context(), a.id); err != nil {
		t.Fatal(err)
	}
	settle(t, e, func() bool { return len(sessionContainers(t, e, a.id)) == 0 })
}

func TestWarmShapeMismatchRunsFresh(t *testing.T) {
	e := newTestExecutor(t)
	a := newSession(t, 3_200_003)
	execute(t, e, a.spec(executors.LangPython, "print(1)"))
	if !e.warm.waitReady(t.Context(), a.id) {
		t.Fatal("no warm container")
	}
	s := a.spec(executors.LangBash, "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max")
	s.Limits.MemoryMB = 300
	res := execute(t, e, s)
	if strings.TrimSpace(res.Stdout) != "314572800" || e.warmHits.Load() != 0 {
		t.Fatalf("memory limit %q (stderr %q), warm hits %d: a warm container of another shape served the run",
			res.Stdout, res.Stderr, e.warmHits.Load())
	}
}

func TestWarmIdlesOutAndIsBounded(t *testing.T) {
	e := newTestExecutor(t, func(c *Config) { c.WarmIdle = 500 * time.Millisecond; c.WarmMax = 2 })
	var sessions []session
	for i := range 3 {
		s := newSession(t, 3_200_010+i)
		sessions = append(sessions, s)
		execute(t, e, s.spec(executors.LangBash, "true"))
		if n := e.warm.size(); n > 2 {
			t.Fatalf("%d warm containers, bound is 2", n)
		}
	}
	settle(t, e, func() bool { return e.warm.size() == 0 })
	for _, s := range sessions {
		settle(t, e, func() bool { return len(sessionContainers(t, e, s.id)) == 0 })
	}
}

func TestWarmContainerThatDiedIsNotUsed(t *testing.T) {
	e := newTestExecutor(t)
	a := newSession(t, 3_200_020)
	execute(t, e, a.spec(executors.LangPython, "print(1)"))
	if !e.warm.waitReady(t.Context(), a.id) {
		t.Fatal("no warm container")
	}
	ids := sessionContainers(t, e, a.id)
	if len(ids) != 1 {
		t.Fatalf("containers %v", ids)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := e.cli.ContainerKill(ctx, ids[0], client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		t.Fatal(err)
	}
	settle(t, e, func() bool {
		e.warm.mu.Lock()
		defer e.warm.mu.Unlock()
		s := e.warm.slots[a.id]
		return s == nil || s.box != nil && s.box.exit.exited()
	})
	res := execute(t, e, a.spec(executors.LangPython, "print(2)"))
	if res.Stdout != "2\n" || e.warmHits.Load() != 0 {
		t.Fatalf("result %+v, warm hits %d", res, e.warmHits.Load())
	}
}

// TestWarmContainerThatDiesIsRemoved: a warm container killed from
// outside while it waits is removed at once, with no run of its session
// to find it dead (issue 21: exited warm containers stayed after an
// engine restart until WarmIdle).
func TestWarmContainerThatDiesIsRemoved(t *testing.T) {
	e := newTestExecutor(t, func(c *Config) { c.WarmIdle = time.Hour })
	a := newSession(t, 3_200_021)
	execute(t, e, a.spec(executors.LangPython, "print(1)"))
	if !e.warm.waitReady(t.Context(), a.id) {
		t.Fatal("no warm container")
	}
	ids := sessionContainers(t, e, a.id)
	if len(ids) != 1 {
		t.Fatalf("containers %v", ids)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := e.cli.ContainerKill(ctx, ids[0], client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		t.Fatal(err)
	}
	settle(t, e, func() bool { return e.warm.size() == 0 && len(sessionContainers(t, e, a.id)) == 0 })
}

// TestWarmAfterSecondRun: with the default WarmAfter, a session's first run
// prepares nothing (a one-off session never pays for a second container);
// its second run prepares the container its third run uses.
func TestWarmAfterSecondRun(t *testing.T) {
	e := newTestExecutor(t, func(c *Config) { c.WarmAfter = 0 })
	s := newSession(t, 3_200_011)
	if res := execute(t, e, s.spec(executors.LangBash, "true")); res.ExitCode != 0 {
		t.Fatalf("first run %+v", res)
	}
	if e.warm.waitReady(t.Context(), s.id) || e.warm.size() != 0 {
		t.Fatal("a container was prepared after the session's first run")
	}
	if res := execute(t, e, s.spec(executors.LangBash, "true")); res.ExitCode != 0 {
		t.Fatalf("second run %+v", res)
	}
	if !e.warm.waitReady(t.Context(), s.id) {
		t.Fatal("no container prepared after the session's second run")
	}
	if res := execute(t, e, s.spec(executors.LangBash, "echo third")); res.Stdout != "third\n" || e.warmHits.Load() != 1 {
		t.Fatalf("third run %+v, warm hits %d, want 1", res, e.warmHits.Load())
	}
}
