package docker

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors/executortest"
)

// poolHelperEnv makes the test binary the crashing gateway of
// TestPoolCrashLeavesNothing: "instance:dir:workspace".
const poolHelperEnv = "SANDGATE_POOL_CRASH_HELPER"

// TestPoolCrashHelper is the process that is killed: it fills a pool,
// says so, and waits for its SIGKILL.
func TestPoolCrashHelper(t *testing.T) {
	arg := os.Getenv(poolHelperEnv)
	if arg == "" {
		t.Skip("helper process of TestPoolCrashLeavesNothing")
	}
	instance, rest, _ := strings.Cut(arg, ":")
	dir, ws, _ := strings.Cut(rest, ":")
	e, err := New(context.Background(), Config{Instance: instance, Logger: testLogger(t), Pool: PoolConfig{Size: 3, Max: 3, Dir: dir}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if !e.waitPoolReady(ctx, 3) {
		t.Fatalf("pool not ready: %+v", e.PoolStatus())
	}
	// One sandbox serves a run that is still going at the kill: its
	// slot has the session's workspace mounted.
	s := spec(t, "bash", "echo started; sleep 300")
	s.WorkspaceDir = ws // the parent's, which it removes
	go func() { _, _ = e.Execute(context.Background(), s) }()
	for e.PoolStatus().Claims == 0 {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	os.Stdout.WriteString("pool-ready\n")
	time.Sleep(5 * time.Minute)
}

// TestPoolCrashLeavesNothing: a gateway killed with SIGKILL while its pool
// is full leaves containers and mounted slots; the next start with the
// same instance removes all of them before New returns.
func TestPoolCrashLeavesNothing(t *testing.T) {
	needRoot(t)
	needEngine(t)
	instance := "test-crash-" + executortest.Nonce()
	dir := filepath.Join(DefaultPoolDir, "test-crash")
	cmd := exec.Command(os.Args[0], "-test.run=^TestPoolCrashHelper$", "-test.v")
	cmd.Env = append(os.Environ(), poolHelperEnv+"="+instance+":"+dir+":"+newWorkspace(t))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // what a failure before the restart's reap leaves
		_ = cmd.Process.Kill()
		if ids := instanceContainers(t, instance); len(ids) > 0 {
			_ = exec.Command("docker", append([]string{"rm", "-f"}, ids...)...).Run()
		}
		reapSlots(filepath.Join(dir, "docker-"+instance), "")
		_ = os.Remove(filepath.Join(dir, "docker-"+instance))
	})
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "pool-ready" {
				ready <- true
				break
			}
		}
		close(ready)
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatal("the helper ended before its pool was ready")
		}
	case <-time.After(3 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatal("the helper's pool was never ready")
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	root := filepath.Join(dir, "docker-"+instance)
	if n := len(instanceContainers(t, instance)); n < 3 {
		t.Fatalf("want the killed process's 3 pooled containers, found %d", n)
	}
	if n := slotMounts(t, root); n < 1 {
		t.Fatalf("want the killed process's claimed slot mounted, found %d mounts under %s", n, root)
	}
	if entries, _ := os.ReadDir(root); len(entries) < 3 {
		t.Fatalf("want the killed process's slots, found %d under %s", len(entries), root)
	}

	// The restart, its pool off so that only leftovers could be found
	// (the slots are reaped whether or not the pool is on).
	e := newTestExecutor(t, func(c *Config) { c.Instance = instance; c.Pool = PoolConfig{Max: -1, Dir: dir} })
	if left := instanceContainers(t, instance); len(left) > 0 {
		t.Errorf("containers left after the restart's reap: %v", left)
	}
	if n := slotMounts(t, root); n > 0 {
		t.Errorf("%d slot mounts left under %s", n, root)
	}
	if entries, _ := os.ReadDir(root); len(entries) > 0 {
		t.Errorf("slots left under %s: %d", root, len(entries))
	}
	_ = e
}

// slotMounts counts the mounts under root in this mount namespace.
func slotMounts(t *testing.T, root string) int {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], root+"/") {
			n++
		}
	}
	return n
}
