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
	e.bg.Wait() // the first run's own container is removed
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

// killWarm runs a's first run, waits for the warm container it leaves
// (the run's own container removed), and kills that container from
// outside, as `docker kill` would.
func killWarm(t *testing.T, e *Executor, a session) {
	t.Helper()
	execute(t, e, a.spec(executors.LangPython, "print(1)"))
	if !e.warm.waitReady(t.Context(), a.id) {
		t.Fatal("no warm container")
	}
	e.bg.Wait() // the first run's own container is removed
	ids := sessionContainers(t, e, a.id)
	if len(ids) != 1 {
		t.Fatalf("containers %v", ids)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := e.cli.ContainerKill(ctx, ids[0], client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		t.Fatal(err)
	}
}

func TestWarmContainerThatDiedIsNotUsed(t *testing.T) {
	e := newTestExecutor(t)
	a := newSession(t, 3_200_020)
	killWarm(t, e, a)
	settle(t, e, func() bool {
		e.warm.mu.Lock()
		defer e.warm.mu.Unlock()
		list := e.warm.slots[a.id]
		return len(list) == 0 || len(list) == 1 && list[0].box != nil && list[0].box.exit.exited()
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
	killWarm(t, e, a)
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

// backToBack sends n runs of s one after the other, with no pause, and
// returns how many of them a warm container served.
func backToBack(t *testing.T, e *Executor, s session, n int) int64 {
	t.Helper()
	hits := e.warmHits.Load()
	for i := range n {
		if res := execute(t, e, s.spec(executors.LangBash, "echo run")); res.Stdout != "run\n" {
			t.Fatalf("run %d: %+v", i, res)
		}
	}
	return e.warmHits.Load() - hits
}

// TestWarmBackToBackHoldsSeveral: a session whose runs come back to back
// holds WarmPerSession containers, every run after the first is served
// warm, and however the session ends (released, idle, executor closed)
// no container of it, and none of the executor's, remains.
func TestWarmBackToBackHoldsSeveral(t *testing.T) {
	for i, end := range []string{"release", "idle", "close"} {
		t.Run(end, func(t *testing.T) {
			t.Parallel()
			idle := time.Minute
			if end == "idle" {
				// Not shorter: the idle timer must not fire before
				// the check below, after the runs' containers are
				// removed, which is slow on a loaded engine.
				idle = 5 * time.Second
			}
			e := newTestExecutor(t, func(c *Config) { c.WarmPerSession = 2; c.WarmIdle = idle })
			s := newSession(t, 3_200_030+i)
			if hits := backToBack(t, e, s, 6); hits != 5 {
				t.Fatalf("%d of the 5 runs after the first were served warm", hits)
			}
			e.warm.waitReady(t.Context(), s.id)
			e.bg.Wait() // the runs' own containers are removed
			if n, left := e.warm.sessionSize(s.id), sessionContainers(t, e, s.id); n != 2 || len(left) != 2 {
				t.Fatalf("back to back: %d warm containers, %d on the engine; want 2 and 2", n, len(left))
			}
			switch end {
			case "release":
				if err := e.ReleaseSession(t.Context(), s.id); err != nil {
					t.Fatal(err)
				}
			case "close":
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				if err := e.Close(ctx); err != nil {
					t.Fatal(err)
				}
			}
			settle(t, e, func() bool { return len(instanceContainers(t, e.cfg.Instance)) == 0 })
			if n := e.warm.size(); n != 0 {
				t.Fatalf("%d warm containers still counted", n)
			}
		})
	}
}

// TestWarmPaceSizesTheSession: a session that pauses between runs longer
// than a container takes to start holds one warm container, not
// WarmPerSession.
func TestWarmPaceSizesTheSession(t *testing.T) {
	e := newTestExecutor(t, func(c *Config) { c.WarmPerSession = 3 })
	s := newSession(t, 3_200_040)
	for range 3 {
		execute(t, e, s.spec(executors.LangBash, "true"))
		e.warm.waitReady(t.Context(), s.id)
		time.Sleep(2 * e.warm.prepTime())
	}
	if n := e.warm.sessionSize(s.id); n != 1 {
		t.Fatalf("a paced session holds %d warm containers, want 1", n)
	}
}

// TestWarmGlobalCapShared: at the global cap, a session without a warm
// container takes one from a session holding several, and the cap holds.
func TestWarmGlobalCapShared(t *testing.T) {
	e := newTestExecutor(t, func(c *Config) { c.WarmMax = 2; c.WarmPerSession = 2 })
	a, b := newSession(t, 3_200_050), newSession(t, 3_200_051)
	backToBack(t, e, a, 4)
	e.warm.waitReady(t.Context(), a.id)
	if n := e.warm.sessionSize(a.id); n != 2 {
		t.Fatalf("session a holds %d, want 2", n)
	}
	execute(t, e, b.spec(executors.LangBash, "true"))
	if na, nb, total := e.warm.sessionSize(a.id), e.warm.sessionSize(b.id), e.warm.size(); na != 1 || nb != 1 || total != 2 {
		t.Fatalf("after b's run: a holds %d, b %d, %d in all; want 1, 1, 2", na, nb, total)
	}
	e.warm.waitReady(t.Context(), a.id)
	e.warm.waitReady(t.Context(), b.id)
	e.bg.Wait()
	if n := len(instanceContainers(t, e.cfg.Instance)); n != 2 {
		t.Fatalf("%d containers on the engine, cap 2", n)
	}
}

// TestWarmBurstTopsUpDuringTheRun: once a session sends runs back to back,
// the container replacing the one a run took is started while that run is
// still in flight, so it is ready when the run ends.
func TestWarmBurstTopsUpDuringTheRun(t *testing.T) {
	e := newTestExecutor(t, func(c *Config) { c.WarmPerSession = 2 })
	s := newSession(t, 3_200_060)
	backToBack(t, e, s, 4)
	done := make(chan executors.Result, 1)
	go func() {
		res, _ := e.Execute(t.Context(), s.spec(executors.LangBash, "sleep 3; echo slept"))
		done <- res
	}()
	ready := false
	for !ready {
		select {
		case res := <-done:
			t.Fatalf("the run ended (%+v) before the session held 2 ready containers (it holds %d)", res, e.warm.sessionSize(s.id))
		case <-time.After(20 * time.Millisecond):
		}
		ready = e.warm.sessionSize(s.id) == 2 && readyNow(t, e, s.id)
	}
	if res := <-done; res.Stdout != "slept\n" {
		t.Fatalf("run %+v", res)
	}
}

// readyNow reports whether every warm container of session is prepared,
// without waiting.
func readyNow(t *testing.T, e *Executor, session string) bool {
	ctx, cancel := context.WithTimeout(t.Context(), time.Millisecond)
	defer cancel()
	return e.warm.waitReady(ctx, session)
}
