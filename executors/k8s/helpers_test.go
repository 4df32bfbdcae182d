package k8s

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandgate/sandgate/executors/executortest"
)

// requireEnv, set by `make test`, makes a missing cluster fail these
// tests instead of skipping them (issue 29 names it
// SANDGATE_REQUIRE_KUBERNETES; SANDGATE_REQUIRE_K8S is accepted too).
var requireEnv = []string{"SANDGATE_REQUIRE_KUBERNETES", "SANDGATE_REQUIRE_K8S"}

// The cluster scripts/k8s.sh starts: its admin kubeconfig and the
// sandbox image it imported, unless the environment names others.
const (
	defaultKubeconfig = "/var/lib/sandgate/k8s/run/pki/admin.kubeconfig"
	defaultImageFile  = "/var/lib/sandgate/k8s/run/sandbox-image"
)

func required() bool {
	for _, v := range requireEnv {
		if os.Getenv(v) == "1" {
			return true
		}
	}
	return false
}

func testKubeconfig() string {
	if p := os.Getenv("SANDGATE_K8S_KUBECONFIG"); p != "" {
		return p
	}
	return defaultKubeconfig
}

func testImage() string {
	if v := os.Getenv("SANDGATE_K8S_IMAGE"); v != "" {
		return v
	}
	b, _ := os.ReadFile(defaultImageFile)
	return strings.TrimSpace(string(b))
}

// needCluster skips (or, when required, fails) the test unless the test
// cluster answers and its sandbox image is known.
func needCluster(t testing.TB) {
	t.Helper()
	reason := ""
	if _, err := os.Stat(testKubeconfig()); err != nil {
		reason = "no kubeconfig (scripts/k8s.sh start): " + err.Error()
	} else if testImage() == "" {
		reason = "no sandbox image (scripts/k8s.sh start imports it, or set SANDGATE_K8S_IMAGE)"
	} else {
		rc, err := restConfig(testKubeconfig())
		if err == nil {
			var e *Executor
			e, err = newBare(rc)
			if err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err = e.Available(ctx)
				cancel()
			}
		}
		if err != nil {
			reason = "the cluster does not answer: " + err.Error()
		}
	}
	if reason == "" {
		shareCluster(t)
		return
	}
	if required() {
		t.Fatalf("Kubernetes required (SANDGATE_REQUIRE_KUBERNETES=1): %s", reason)
	}
	t.Skipf("Kubernetes cluster not usable: %s", reason)
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// newTestExecutor builds an executor on a namespace of its own, deleted
// (with every pod in it) at the end of the test, after checking that
// Close left no sandbox pod.
func newTestExecutor(t testing.TB, mutate ...func(*Config)) *Executor {
	t.Helper()
	needCluster(t)
	cfg := Config{
		Kubeconfig:      testKubeconfig(),
		Namespace:       "sandgate-test-" + executortest.Nonce(),
		Image:           testImage(),
		ImagePullPolicy: "Never",
		Instance:        "test-" + executortest.Nonce(),
		Logger:          testLogger(t),
		PodMemoryMB:     1024,
		PodCPU:          "500m",
	}
	for _, m := range mutate {
		m(&cfg)
	}
	e, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := e.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
		// The instance's pods (the pool's idle ones are the
		// ReplicaSet's, shared by every executor on the namespace).
		waitNoPods(t, e, labelInstance+"="+e.cfg.Instance)
		_ = e.cs.CoreV1().Namespaces().Delete(ctx, e.cfg.Namespace, metav1.DeleteOptions{})
	})
	return e
}

// waitNoPods waits (at most a minute) until the namespace holds no
// sandbox pod matching the extra label selector, and fails otherwise.
func waitNoPods(t testing.TB, e *Executor, selector string) {
	t.Helper()
	sel := labelManagedBy + "=" + managedBy
	if selector != "" {
		sel += "," + selector
	}
	deadline := time.Now().Add(time.Minute)
	for {
		l, err := e.cs.CoreV1().Pods(e.cfg.Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: sel})
		if err == nil && len(l.Items) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("pods left after a minute: %v (err %v)", names(l.Items), err)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// sessionPod is the session's one pod (found by its label, as any
// replica finds it); an error unless there is exactly one.
func sessionPod(t testing.TB, e *Executor, session string) (*corev1.Pod, error) {
	t.Helper()
	l, err := e.cs.CoreV1().Pods(e.cfg.Namespace).List(context.Background(),
		metav1.ListOptions{LabelSelector: labelSession + "=" + sessionHash(session)})
	if err != nil {
		return nil, err
	}
	if len(l.Items) != 1 {
		return nil, fmt.Errorf("pods of session %s: %v, want exactly one", session, names(l.Items))
	}
	return &l.Items[0], nil
}

func mustSessionPod(t testing.TB, e *Executor, session string) *corev1.Pod {
	t.Helper()
	p, err := sessionPod(t, e, session)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// testsLock serialises the tests that disrupt the cluster (a stopped
// kubelet, a restarted apiserver: faults_test.go), which hold it
// exclusively, with every other test on it, in any package, which holds
// it shared for its duration.
const testsLock = "/run/sandgate-k8s/tests.lock"

// exclusive is set while this package's test holds testsLock
// exclusively (the package's tests run one at a time).
var exclusive bool

func shareCluster(t testing.TB) { lockCluster(t, syscall.LOCK_SH) }

// ownCluster takes the cluster for a disruptive test.
func ownCluster(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(filepath.Dir(testsLock)); err != nil {
		needCluster(t) // skips, or fails when the cluster is required
	}
	lockCluster(t, syscall.LOCK_EX)
	exclusive = true
	t.Cleanup(func() { exclusive = false })
	needCluster(t)
}

func lockCluster(t testing.TB, how int) {
	t.Helper()
	if exclusive {
		return
	}
	f, err := os.OpenFile(testsLock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("the cluster's test lock: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		t.Fatalf("the cluster's test lock: %v", err)
	}
	t.Cleanup(func() { f.Close() })
}
