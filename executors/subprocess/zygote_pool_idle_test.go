package subprocess

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
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

// TestZygotePoolGoneWithGateway: a gateway killed with SIGKILL while its
// pool is full leaves nothing: every process of its pooled zygotes (the
// zygote, its init, its spare) dies with it, the host's mount table never
// had a slot or a workspace on one, and the next executor's start removes
// the dead one's run directory (the empty directory the slots' tmpfs
// covered in its own namespace).
func TestZygotePoolGoneWithGateway(t *testing.T) {
	if os.Getenv("SANDGATE_ZYGOTE_POOL_CHILD") != "" {
		poolChild(t)
		return
	}
	requireRoot(t)
	warmDir := t.TempDir()
	if err := os.Chmod(warmDir, 0o711); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestZygotePoolGoneWithGateway$", "-test.v")
	cmd.Env = append(os.Environ(), "SANDGATE_ZYGOTE_POOL_CHILD="+warmDir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var runDir string
	var procs []procID
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || f[0] != "POOL" {
			t.Log("child: " + sc.Text())
			continue
		}
		runDir = f[1]
		for _, p := range f[2:] {
			pid, start, _ := strings.Cut(p, ":")
			n, _ := strconv.Atoi(pid)
			procs = append(procs, procID{n, start})
		}
		break
	}
	if runDir == "" || len(procs) < 4 {
		t.Fatalf("the child reported no full pool (run dir %q, %d processes)", runDir, len(procs))
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for left := alive(procs); len(left) > 0; left = alive(procs) {
		if time.Now().After(deadline) {
			t.Fatalf("processes of the killed gateway's pool remain: %v", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mi), runDir) {
		t.Fatalf("the host has a mount under the dead gateway's run directory %s", runDir)
	}
	newZygoteExecutor(t, func(c *Config) { c.WarmDir = warmDir })
	if _, err := os.Lstat(runDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the dead gateway's run directory is still there after a start: %v", err)
	}
}

// poolChild fills a pool of two and reports its run directory and the
// processes of its pooled zygotes, then waits to be killed.
func poolChild(t *testing.T) {
	e := newZygoteExecutor(t, func(c *Config) {
		c.WarmDir = os.Getenv("SANDGATE_ZYGOTE_POOL_CHILD")
		c.ZygotePool = ZygotePoolConfig{Size: 2, Max: 2}
	})
	mustExecute(t, e, warmRun("sess-"+executortest.Nonce(), executortest.NewWorkspace(t), executors.LangPython, "print(1)"))
	var line strings.Builder
	line.WriteString("POOL " + e.runDir)
	for _, z := range waitPoolIdle(t, e, 2) {
		init := z.proc.cmd.Process.Pid
		// The zygote and its spare (C, P1 and R), forked before any claim.
		procs := append(waitDescendants(t, init, 4), procID{init, procStartOf(init)})
		for _, p := range procs {
			fmt.Fprintf(&line, " %d:%s", p.pid, p.start)
		}
	}
	fmt.Println(line.String())
	time.Sleep(time.Minute)
}

// procStartOf is pid's start time field, as procID keeps it.
func procStartOf(pid int) string {
	for _, p := range alive([]procID{{pid, ""}}) {
		return p.start
	}
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// TestZygotePoolBurst: 50 sessions whose first runs arrive at once, with a
// pool of two, all get their own output: the claims take what is ready,
// the rest start their own zygote (or run warm when the zygotes are at
// their cap), and none is lost or served another session's zygote.
func TestZygotePoolBurst(t *testing.T) {
	e := newPoolExecutor(t, 2)
	mustExecute(t, e, warmRun("sess-"+executortest.Nonce(), executortest.NewWorkspace(t), executors.LangPython, "print(1)"))
	waitPoolIdle(t, e, 2)
	const n = 50
	errs := make(chan error, n)
	for i := range n {
		go func() {
			sess, ws := "sess-"+executortest.Nonce(), executortest.NewWorkspace(t)
			res, err := e.Execute(t.Context(), warmRun(sess, ws, executors.LangPython,
				"import os\nprint(len(os.listdir('.')), "+strconv.Itoa(i)+")"))
			switch want := fmt.Sprintf("0 %d\n", i); {
			case err != nil:
				errs <- fmt.Errorf("session %d: %w", i, err)
			case res.Stdout != want || res.ExitCode != 0:
				errs <- fmt.Errorf("session %d: %+v, want stdout %q", i, res, want)
			default:
				errs <- nil
			}
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if st := e.PoolStatus(); st.Claims < 2 {
		t.Errorf("the burst claimed %d pooled zygotes, want the 2 ready ones (%+v)", st.Claims, st)
	}
}
