package gvisor

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/executortest"
)

// The helper process: the test binary re-executed as a small "gateway"
// that TestNoContainerLeft kills with SIGKILL in the middle of a run.
const (
	helperEnv          = "SANDGATE_GVISOR_HELPER"
	helperInstanceEnv  = "SANDGATE_GVISOR_HELPER_INSTANCE"
	helperWorkspaceEnv = "SANDGATE_GVISOR_HELPER_WORKSPACE"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "crash" {
		os.Exit(crashHelper())
	}
	os.Exit(m.Run())
}

// crashHelper runs one short run (so its session gets a warm container),
// waits for that container to run, then runs a long one (the first of
// another session, so nothing is prepared alongside it) that writes
// started.txt and sleeps. The parent kills it. No container is being
// created then: one whose create call is still in the engine when its
// client dies appears after the restarted gateway has reaped, and is left
// for the restart after that.
func crashHelper() int {
	ctx := context.Background()
	e, err := New(ctx, Config{Pool: noPool, Instance: os.Getenv(helperInstanceEnv), Logger: slog.New(slog.DiscardHandler), WarmAfter: 1})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	s := executors.Spec{SessionID: "crash-session", Language: executors.LangBash, Code: "true",
		WorkspaceDir: os.Getenv(helperWorkspaceEnv), Timeout: time.Minute}
	if _, err := e.Execute(ctx, s); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	for { // the warm container is prepared after the run
		out, _ := exec.Command("docker", "ps", "-q", "--filter", "status=running",
			"--filter", "label=sandgate.instance="+os.Getenv(helperInstanceEnv),
			"--filter", "label=sandgate.session="+s.SessionID, "--filter", "label=sandgate.warm=true").Output()
		if len(out) > 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.SessionID = "crash-session-2"
	s.Code = "echo started > started.txt; sleep 600"
	_, err = e.Execute(ctx, s)
	fmt.Fprintln(os.Stderr, "long run returned:", err)
	return 3
}

// TestNoContainerLeft: a gateway killed mid-run leaves its gvisor
// containers, which the next executor of the same instance reaps before
// serving; then runs that end normally, at their timeout or by
// cancellation leave none after Close.
func TestNoContainerLeft(t *testing.T) {
	needGVisor(t)
	instance := "leak-" + executortest.Nonce()
	ws := newWorkspace(t)
	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), helperEnv+"=crash", helperInstanceEnv+"="+instance, helperWorkspaceEnv+"="+ws)
	helper.Stderr = os.Stderr
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(ws, "started.txt"))
	if err := helper.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = helper.Wait()
	if left := instanceContainers(t, instance); len(left) == 0 {
		t.Fatal("the killed gateway left no container: the test proves nothing")
	}

	e := newTestExecutor(t, func(c *Config) { c.Instance = instance })
	if left := instanceContainers(t, instance); len(left) != 0 {
		t.Fatalf("after restart: containers %v", left)
	}

	// 24 runs over 4 sessions, a third each normal, timed out, cancelled.
	var wg sync.WaitGroup
	work := make(chan int)
	for range 4 {
		wg.Go(func() {
			for i := range work {
				if err := leakRun(t, e, i); err != nil {
					t.Errorf("run %d: %v", i, err)
				}
			}
		})
	}
	for i := range 24 {
		work <- i
	}
	close(work)
	wg.Wait()

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if left := instanceContainers(t, instance); len(left) != 0 {
		t.Fatalf("containers left after the runs: %v", left)
	}
}

// leakRun performs run i: normal, a timeout or a cancellation, by i % 3.
func leakRun(t *testing.T, e *Executor, i int) error {
	s := spec(t, executors.LangBash, "echo ok")
	s.SessionID = fmt.Sprintf("leak-session-%d", i%4)
	s.UID, s.GID = 3_800_000+i%4, 3_800_000+i%4
	switch i % 3 {
	case 1:
		s.Code, s.Timeout = "echo begin; sleep 30", time.Second
		res, err := e.Execute(t.Context(), s)
		if err != nil || !res.TimedOut || res.ExitCode != executors.ExitCodeTimeout {
			return fmt.Errorf("want a timeout: %+v %v", res, err)
		}
	case 2:
		ctx, cancel := context.WithTimeout(t.Context(), 800*time.Millisecond)
		defer cancel()
		s.Code = "sleep 30"
		if res, err := e.Execute(ctx, s); err == nil {
			return fmt.Errorf("cancelled run returned %+v", res)
		}
	default:
		res, err := e.Execute(t.Context(), s)
		if err != nil || res.Stdout != "ok\n" {
			return fmt.Errorf("%+v %v", res, err)
		}
	}
	return nil
}

func waitFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s never appeared", path)
}
