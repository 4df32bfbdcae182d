package k8s

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/executortest"
)

// The cluster's run directory (scripts/k8s.sh): each component's pid.
const clusterRunDir = "/run/sandgate-k8s"

func componentPid(t *testing.T, name string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(clusterRunDir, name+".pid"))
	if err == nil {
		var pid int
		if pid, err = strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			return pid
		}
	}
	t.Fatalf("%s's pid (scripts/k8s.sh start): %v", name, err)
	return 0
}

// runUntilOK retries spec until it succeeds (a minute at most): the
// first requests after a fault may still meet it.
func runUntilOK(t *testing.T, e *Executor, spec executors.Spec) executors.Result {
	t.Helper()
	var err error
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		var res executors.Result
		if res, err = e.Execute(t.Context(), spec); err == nil {
			return res
		}
		if !errors.Is(err, executors.ErrUnavailable) || errors.Is(err, ErrSandboxLost) {
			t.Fatalf("run after the fault: %v, want success or a retryable 503", err)
		}
	}
	t.Fatalf("no run succeeded within a minute of the fault: %v", err)
	return executors.Result{}
}

// TestNodeStopped: the kubelet, containerd or the apiserver stopped (SIGSTOP) for
// 10 s under a session: a request in that time fails with a clear
// "unavailable" (a 503), not a hang and not a lost sandbox; once it runs
// again, the session goes on, on the same pod with its state.
func TestNodeStopped(t *testing.T) {
	ownCluster(t)
	for _, component := range []string{"kubelet", "containerd", "kube-apiserver"} {
		t.Run(component, func(t *testing.T) {
			e := newTestExecutor(t)
			session := "sess-" + executortest.Nonce()
			spec := bashSpec(t, session, "echo kept > state.txt")
			if _, err := e.Execute(t.Context(), spec); err != nil {
				t.Fatal(err)
			}
			uid := mustSessionPod(t, e, session).UID
			pid := componentPid(t, component)
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			stopped := time.Now()
			resumed := false
			resume := func() {
				if !resumed {
					resumed = true
					_ = syscall.Kill(pid, syscall.SIGCONT)
				}
			}
			defer resume()
			spec.Code = "cat state.txt"
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			_, err := e.Execute(ctx, spec)
			hung := ctx.Err() != nil
			cancel()
			if !errors.Is(err, executors.ErrUnavailable) || errors.Is(err, ErrSandboxLost) || hung || errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("run with %s stopped: %v, want unavailable (not lost, not a hang)", component, err)
			}
			t.Logf("with %s stopped: %v after %v", component, err, time.Since(stopped).Round(time.Millisecond))
			time.Sleep(time.Until(stopped.Add(10 * time.Second)))
			resume()
			res := runUntilOK(t, e, spec)
			if res.Stdout != "kept\n" {
				t.Fatalf("run after %s came back: %+v, want the session's state", component, res)
			}
			if got := mustSessionPod(t, e, session).UID; got != uid {
				t.Fatalf("the session's pod changed from %s to %s", uid, got)
			}
			t.Logf("recovered %v after %s was resumed", time.Since(stopped.Add(10*time.Second)).Round(time.Millisecond), component)
		})
	}
}

// TestAPIServerRestart: the apiserver restarts under a session (stopped,
// then started with the same command line). Afterwards the session goes
// on with its state (a new tunnel to the same pod), and the pod watch has
// resumed: a pod
// deleted behind the gateway's back after the restart is noticed, and
// the next request says the sandbox was lost.
func TestAPIServerRestart(t *testing.T) {
	ownCluster(t)
	e := newTestExecutor(t)
	session := "sess-" + executortest.Nonce()
	spec := bashSpec(t, session, "echo kept > state.txt")
	if _, err := e.Execute(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs("../../scripts/k8s.sh")
	if err != nil {
		t.Fatal(err)
	}
	restart := exec.Command(script, "restart", "kube-apiserver")
	out, err := restart.CombinedOutput()
	if err != nil {
		t.Fatalf("restart the apiserver: %v: %s", err, out)
	}
	spec.Code = "cat state.txt"
	if res := runUntilOK(t, e, spec); res.Stdout != "kept\n" {
		t.Fatalf("run after the restart: %+v, want the session's state", res)
	}
	p := mustSessionPod(t, e, session)
	grace := int64(0)
	if err := e.cs.CoreV1().Pods(e.cfg.Namespace).Delete(t.Context(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	// The watch's report, not a failed run: wait for it before the run.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		e.mu.Lock()
		_, told := e.lost[session]
		e.mu.Unlock()
		if told {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the watch did not report the deleted pod within 30 s of the apiserver's restart")
		}
	}
	if _, err := e.Execute(t.Context(), spec); !errors.Is(err, ErrSandboxLost) {
		t.Fatalf("run after the pod was deleted: %v, want the sandbox lost", err)
	}
}
