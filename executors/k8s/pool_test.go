package k8s

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandgate/sandgate/executors/executortest"
)

// poolPods lists the pool's pods in state ("idle", "claimed"), ready or
// not, as the apiserver has them.
func poolPods(t testing.TB, e *Executor, state string) []corev1.Pod {
	t.Helper()
	l, err := e.cs.CoreV1().Pods(e.cfg.Namespace).List(context.Background(), metav1.ListOptions{
		LabelSelector: labelPool + "=" + e.cfg.Pool.Name + "," + labelPoolState + "=" + state})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// waitIdle waits until the pool holds n ready idle pods of e's template,
// none of them in not, and returns their names.
func waitIdle(t testing.TB, e *Executor, n int, not map[string]bool) map[string]bool {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		got := map[string]bool{}
		for _, p := range poolPods(t, e, poolIdle) {
			if st, _ := stateOf(&p); st == podReady && p.Labels[labelTemplate] == e.poolHash && !not[p.Name] {
				got[p.Name] = true
			}
		}
		if len(got) == n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pool holds %d ready idle pods after 90 s, want %d", len(got), n)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestWarmPool: a session's first run claims one of the pool's idle pods
// (no new pod is made for it), the ReplicaSet refills the pool, the
// claimed pod is the session's alone (labelled with it, out of the
// ReplicaSet, never idle again), and releasing the session deletes it.
// The session has a uid of its own, as every gateway session has: the
// pod runs as a uid of its own too, which no other pod of the pool has,
// and the gateway's copy of what the run wrote is the session's uid's.
func TestWarmPool(t *testing.T) {
	e := newTestExecutor(t, func(c *Config) { c.Pool.Size = 2; c.PodMemoryMB = 512; c.PodCPU = "100m" })
	idle := waitIdle(t, e, 2, nil)
	session := "sess-" + executortest.Nonce()
	spec := bashSpec(t, session, "echo pooled > f.txt; id -u; hostname")
	spec.UID, spec.GID = 4242, 4243
	res, err := e.Execute(t.Context(), spec)
	p := mustSessionPod(t, e, session)
	if err != nil || res.ExitCode != 0 || res.Stdout != fmt.Sprintf("%d\nsandbox\n", podUID(p)) || podUID(p) < poolUIDBase {
		t.Fatalf("first run: %v %+v (the pod's uid %d)", err, res, podUID(p))
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(spec.WorkspaceDir, "f.txt"), &st); err != nil || st.Uid != 4242 || st.Gid != 4243 {
		t.Fatalf("the host copy of f.txt: %v, owner %d:%d, want the session's 4242:4243", err, st.Uid, st.Gid)
	}
	if !idle[p.Name] {
		t.Fatalf("the session's pod %s was not one of the pool's idle pods %v", p.Name, idle)
	}
	if p.Labels[labelPoolState] != poolClaimed || len(p.OwnerReferences) != 0 || p.Annotations[annSession] != session {
		t.Fatalf("claimed pod: labels %v owners %v annotations %v", p.Labels, p.OwnerReferences, p.Annotations)
	}
	// The refill runs as uids of their own, none the claimed pod's.
	refill := waitIdle(t, e, 2, map[string]bool{p.Name: true})
	uids := map[int64]string{podUID(p): p.Name}
	for _, q := range poolPods(t, e, poolIdle) {
		if !refill[q.Name] {
			continue
		}
		if other, dup := uids[podUID(&q)]; dup {
			t.Fatalf("pods %s and %s both run as uid %d", q.Name, other, podUID(&q))
		}
		uids[podUID(&q)] = q.Name
	}
	spec.Code = "cat f.txt"
	if res, err := e.Execute(t.Context(), spec); err != nil || res.Stdout != "pooled\n" {
		t.Fatalf("second run on the claimed pod: %v %+v", err, res)
	}
	// sandboxd fingerprinted the pod's workspace, so a run that writes
	// nothing costs no copy back (about 55 ms a run on the test cluster).
	e.mu.Lock()
	sb := e.sandboxes[session]
	e.mu.Unlock()
	if sb == nil || sb.podFP == "" {
		t.Fatal("no workspace fingerprint after a run: every run copies the whole workspace back")
	}
	if err := e.ReleaseSession(t.Context(), session); err != nil {
		t.Fatal(err)
	}
	waitNoPods(t, e, labelSession+"="+sessionHash(session))
	for _, q := range poolPods(t, e, poolIdle) {
		if q.Name == p.Name {
			t.Fatalf("the released session's pod %s is idle in the pool again", p.Name)
		}
	}
}

// TestPoolConcurrentClaims: two replicas (executors on one namespace and
// pool) start six sessions at once on a pool of two: every session runs,
// each on a pod of its own, and no pod serves two sessions (the claims
// race on the same idle pods; the apiserver's optimistic concurrency
// lets one claim of a pod win, and the losers take another pod or a
// new one).
func TestPoolConcurrentClaims(t *testing.T) {
	cfg := func(c *Config) { c.Pool.Size = 2; c.PodMemoryMB = 512; c.PodCPU = "100m" }
	a := newTestExecutor(t, cfg)
	b := newTestExecutor(t, cfg, func(c *Config) { c.Namespace = a.cfg.Namespace })
	waitIdle(t, a, 2, nil)
	var wg sync.WaitGroup
	sessions := make([]string, 6)
	errs := make([]error, 6)
	for i := range sessions {
		sessions[i] = fmt.Sprintf("race-%d-%s", i, executortest.Nonce())
		e := a
		if i%2 == 1 {
			e = b
		}
		wg.Go(func() {
			res, err := e.Execute(t.Context(), bashSpec(t, sessions[i], "echo $((6*7))"))
			if err == nil && res.Stdout != "42\n" {
				err = fmt.Errorf("stdout %q stderr %q", res.Stdout, res.Stderr)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	seen := map[string]string{}
	pooled := 0
	for i, s := range sessions {
		if errs[i] != nil {
			t.Fatalf("session %d: %v", i, errs[i])
		}
		p := mustSessionPod(t, a, s)
		if other, ok := seen[p.Name]; ok {
			t.Fatalf("pod %s serves %s and %s", p.Name, other, s)
		}
		seen[p.Name] = s
		if p.Labels[labelPool] != "" {
			pooled++
		}
	}
	if pooled == 0 {
		t.Fatal("no session got a pooled pod")
	}
	t.Logf("%d of 6 sessions claimed a pooled pod", pooled)
}

// TestPoolReapsStale: a gateway starting with a changed pool (here the
// pods' memory) replaces the idle pods of the old template, and deletes
// a pod that was claimed but never bound (its claimant died in between);
// it leaves a bound claim alone.
func TestPoolReapsStale(t *testing.T) {
	old := newTestExecutor(t, func(c *Config) { c.Pool.Size = 2; c.PodMemoryMB = 512; c.PodCPU = "100m" })
	oldIdle := waitIdle(t, old, 2, nil)
	bound := "sess-" + executortest.Nonce()
	if _, err := old.Execute(t.Context(), bashSpec(t, bound, "true")); err != nil {
		t.Fatal(err)
	}
	boundPod := mustSessionPod(t, old, bound)
	// A claim whose claimant died before binding: claimed an hour ago.
	idle := waitIdle(t, old, 2, map[string]bool{boundPod.Name: true})
	var orphan string
	for name := range idle {
		orphan = name
		break
	}
	p, err := old.cs.CoreV1().Pods(old.cfg.Namespace).Get(t.Context(), orphan, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Labels[labelPoolState], p.Labels[labelSession] = poolClaimed, sessionHash("gone-"+executortest.Nonce())
	p.Annotations = map[string]string{annClaimedAt: time.Now().Add(-time.Hour).UTC().Format(time.RFC3339Nano)}
	p.OwnerReferences = nil
	if _, err := old.cs.CoreV1().Pods(old.cfg.Namespace).Update(t.Context(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, old, 2, map[string]bool{boundPod.Name: true, orphan: true})

	e := newTestExecutor(t, func(c *Config) {
		c.Pool.Size = 2
		c.PodMemoryMB = 640
		c.PodCPU = "100m"
		c.Namespace = old.cfg.Namespace
	})
	if e.poolHash == old.poolHash {
		t.Fatal("the changed pool has the old template's hash")
	}
	fresh := waitIdle(t, e, 2, oldIdle)
	for name := range fresh {
		p, err := e.cs.CoreV1().Pods(e.cfg.Namespace).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil || p.Spec.Containers[0].Resources.Limits.Memory().Value() != 640<<20 {
			t.Fatalf("refilled pod %s: %v, want the new template's 640Mi", name, err)
		}
	}
	for _, q := range poolPods(t, e, poolIdle) {
		if q.Labels[labelTemplate] != e.poolHash {
			t.Fatalf("an idle pod of the old template is left: %s", q.Name)
		}
	}
	waitGone(t, e, orphan)
	if _, err := e.cs.CoreV1().Pods(e.cfg.Namespace).Get(t.Context(), boundPod.Name, metav1.GetOptions{}); err != nil {
		t.Fatalf("the bound claim %s was reaped: %v", boundPod.Name, err)
	}
}

func waitGone(t testing.TB, e *Executor, pod string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		_, err := e.cs.CoreV1().Pods(e.cfg.Namespace).Get(context.Background(), pod, metav1.GetOptions{})
		if err != nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s still there after a minute", pod)
		}
	}
}
