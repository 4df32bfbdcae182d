package subprocess

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/executortest"
)

// newPoolExecutor is a zygote executor whose pool keeps size zygotes.
func newPoolExecutor(t *testing.T, size int) *Executor {
	t.Helper()
	e := newZygoteExecutor(t, func(c *Config) { c.ZygotePool = ZygotePoolConfig{Size: size, Max: size} })
	if st := e.PoolStatus(); !st.Enabled {
		t.Fatalf("zygote pool off: %s", st.Reason)
	}
	return e
}

// waitPoolIdle waits until the pool holds n ready zygotes and returns
// them.
func waitPoolIdle(t *testing.T, e *Executor, n int) []*zygote {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var ready []*zygote
		e.idle.mu.Lock()
		for _, sp := range e.idle.shapes {
			for _, z := range sp.idle {
				if closed(z.ready) && !closed(z.gone) {
					ready = append(ready, z)
				}
			}
		}
		e.idle.mu.Unlock()
		if len(ready) >= n {
			return ready
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pool has %d ready zygotes, want %d (%+v)", len(ready), n, e.PoolStatus())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// listPooled is what the pooled zygote z has at /workspace and at the
// program directory, through its root.
func listPooled(t *testing.T, z *zygote) []string {
	t.Helper()
	root := "/proc/" + strconv.Itoa(z.proc.cmd.Process.Pid) + "/root"
	var names []string
	for _, d := range []string{workspaceMount, codeMount} {
		ents, err := os.ReadDir(root + d)
		if err != nil {
			t.Fatalf("read the pooled zygote's %s: %v", d, err)
		}
		for _, en := range ents {
			names = append(names, d+"/"+en.Name())
		}
	}
	return names
}

// TestZygotePoolServesOneSession: a session's first Python run claims a
// pooled zygote, which until then had nothing of any session at
// /workspace or the program directory; the run sees its own workspace
// (and only it) as its cwd, as its sandbox uid, and later runs of the
// session stay in that zygote. Released, the zygote dies and is never
// claimed again: the next session gets another, which never saw the
// first one's files, and the released zygote's slot is gone.
func TestZygotePoolServesOneSession(t *testing.T) {
	e := newPoolExecutor(t, 1)
	// The first session of a shape makes its pool (it misses).
	warmup, wsw := "sess-"+executortest.Nonce(), executortest.NewWorkspace(t)
	mustExecute(t, e, warmRun(warmup, wsw, executors.LangPython, "print(1)"))
	code := "import os\nprint(sorted(os.listdir('.')), os.getcwd(), os.getuid(), open('mine.txt').read())\n"
	var prev *zygote
	for i := range 3 {
		pooled := waitPoolIdle(t, e, 1)[0]
		if left := listPooled(t, pooled); len(left) != 0 {
			t.Fatalf("session %d: an unclaimed zygote sees %v", i, left)
		}
		if pooled == prev {
			t.Fatalf("session %d: the zygote released by session %d is in the pool again", i, i-1)
		}
		sess, ws := "sess-"+executortest.Nonce(), executortest.NewWorkspace(t)
		secret := "secret-" + executortest.Nonce()
		if err := os.WriteFile(filepath.Join(ws, "mine.txt"), []byte(secret), 0o644); err != nil {
			t.Fatal(err)
		}
		claims := e.PoolStatus().Claims
		want := fmt.Sprintf("['mine.txt'] /workspace %d %s\n", zygoteUID, secret)
		for run := range 2 {
			res := mustExecute(t, e, warmRun(sess, ws, executors.LangPython, code))
			if res.Stdout != want || res.ExitCode != 0 {
				t.Fatalf("session %d run %d: %+v, want stdout %q", i, run, res, want)
			}
		}
		if z := zygoteOf(e, sess); z != pooled || e.PoolStatus().Claims != claims+1 {
			t.Fatalf("session %d: its zygote is not the pooled one (claims %d→%d)", i, claims, e.PoolStatus().Claims)
		}
		if err := e.ReleaseSession(t.Context(), sess); err != nil {
			t.Fatal(err)
		}
		select {
		case <-pooled.proc.done:
		case <-time.After(10 * time.Second):
			t.Fatalf("session %d: its zygote still runs after the release", i)
		}
		prev = pooled
	}
	// Slots: one per live pooled zygote, the released ones' removed.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var slots []os.DirEntry
		_ = e.idle.slots.do(func() error {
			var err error
			slots, err = os.ReadDir(e.idle.slots.dir)
			return err
		})
		st := e.PoolStatus()
		if len(slots) == st.Idle+st.Preparing {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d slots for %d pooled zygotes", len(slots), st.Idle+st.Preparing)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
