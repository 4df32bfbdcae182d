package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// The Kubernetes tier's scenario (issue 29), on the test cluster
// scripts/k8s.sh starts:
//   - warm-pool claim to first output: a new session's first run_code
//     (print(1)) through a gateway whose pool holds ready idle pods; the
//     pool is refilled before each sample, outside the timing;
//   - a cold pod to first output: the same through a gateway without a
//     pool (the pod is created for the session);
//   - run_code on a warm pod against the local aio tier: print(1) on a
//     session whose pod runs, alternated with print(1) on a session whose
//     aio instance runs, each through its gateway.
type k8sResult struct {
	Claim   stats    `json:"claim_to_first_output"`
	Cold    stats    `json:"cold_to_first_output"`
	RunCode abResult `json:"run_code"`
}

const (
	k8sPodLabel = "kubernetes pod (warm)"
	k8sAIOLabel = "aio instance (warm, local)"
	k8sPoolSize = 2
)

// k8sCluster is the test cluster's kubeconfig and sandbox image, from
// the environment (SANDGATE_K8S_KUBECONFIG, SANDGATE_K8S_IMAGE) or where
// scripts/k8s.sh leaves them.
func k8sCluster() (kubeconfig, image string, err error) {
	kubeconfig = os.Getenv("SANDGATE_K8S_KUBECONFIG")
	if kubeconfig == "" {
		kubeconfig = "/var/lib/sandgate/k8s/run/pki/admin.kubeconfig"
	}
	image = os.Getenv("SANDGATE_K8S_IMAGE")
	if image == "" {
		b, _ := os.ReadFile("/var/lib/sandgate/k8s/run/sandbox-image")
		image = strings.TrimSpace(string(b))
	}
	if _, err := os.Stat(kubeconfig); err != nil || image == "" {
		return "", "", fmt.Errorf("no Kubernetes test cluster (scripts/k8s.sh start): kubeconfig %s, image %q", kubeconfig, image)
	}
	return kubeconfig, image, nil
}

// startK8sGateway starts a gateway whose policy sends every run to the
// Kubernetes tier, in namespace ns, with a pool of pool idle pods.
func startK8sGateway(ctx context.Context, kubeconfig, image, ns string, pool int) (*gatewayProc, error) {
	dir, bin, err := buildGateway(ctx)
	if err != nil {
		return nil, err
	}
	pol := filepath.Join(dir, "policy")
	if err := copyPolicy("policy/rego", pol); err != nil {
		return nil, err
	}
	if err := routeAllTo(pol, "kubernetes"); err != nil {
		return nil, err
	}
	yaml := fmt.Sprintf(`policy: {dir: %s}
browser: {enabled: false}
executors:
  subprocess: {enabled: false}
  docker: {enabled: false}
  gvisor: {enabled: false}
  aio: {enabled: false}
  kubernetes: {enabled: true, kubeconfig: %q, namespace: %q, image: %q, image_pull_policy: Never, pod_memory_mb: 768, pod_cpu: "1", pod_cpu_request: 100m, pool: {size: %d}}
`, pol, kubeconfig, ns, image, pool)
	return launchGateway(dir, bin, yaml, "sandgate-bench-k8s-"+ns+".log")
}

// routeAllTo sets every row of the copied policy's modes to kind, with no
// isolation upgrade.
func routeAllTo(pol, kind string) error {
	data := filepath.Join(pol, "sandgate", "config", "data.json")
	b, err := os.ReadFile(data)
	if err != nil {
		return err
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		return err
	}
	modes, _ := cfg["modes"].(map[string]any)
	for _, levels := range modes {
		for _, row := range levels.(map[string]any) {
			row.(map[string]any)["executor"] = kind
		}
	}
	if up, ok := cfg["isolation_upgrade"].(map[string]any); ok {
		up["modes"] = []any{}
	}
	if b, err = json.MarshalIndent(cfg, "", "  "); err != nil {
		return err
	}
	return os.WriteFile(data, b, 0o644)
}

func scenarioK8s(ctx context.Context, gw *gatewayProc, o opts) (k8sResult, error) {
	kubeconfig, image, err := k8sCluster()
	if err != nil {
		return k8sResult{}, err
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return k8sResult{}, err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return k8sResult{}, err
	}
	pooledNS, coldNS := "sgbench-k8s-pool-"+randHex(), "sgbench-k8s-cold-"+randHex()
	defer func() {
		for _, ns := range []string{pooledNS, coldNS} {
			_ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
		}
	}()
	pooled, err := startK8sGateway(ctx, kubeconfig, image, pooledNS, k8sPoolSize)
	if err != nil {
		return k8sResult{}, err
	}
	defer pooled.stop()
	cold, err := startK8sGateway(ctx, kubeconfig, image, coldNS, 0)
	if err != nil {
		return k8sResult{}, err
	}
	defer cold.stop()
	var r k8sResult
	if r.Claim, err = firstOutputs(ctx, pooled, "claim", o.k8sN, func(ctx context.Context) error {
		return waitPoolIdle(ctx, cs, pooledNS, k8sPoolSize)
	}); err != nil {
		return r, fmt.Errorf("claim to first output: %w", err)
	}
	fmt.Printf("k8s warm-pool claim to first output: p50 %s p95 %s n=%d\n", ms(r.Claim.P50), ms(r.Claim.P95), r.Claim.N)
	if r.Cold, err = firstOutputs(ctx, cold, "cold", max(o.k8sN/2, 5), nil); err != nil {
		return r, fmt.Errorf("cold pod to first output: %w", err)
	}
	fmt.Printf("k8s cold pod to first output: p50 %s p95 %s n=%d\n", ms(r.Cold.P50), ms(r.Cold.P95), r.Cold.N)
	const podSession, aioSession = "bench-k8s-warm", "bench-k8s-aio"
	for _, warm := range []func(context.Context) error{
		func(ctx context.Context) error { return pooled.runCode(ctx, podSession, "print(1)", false, "") },
		func(ctx context.Context) error { return gw.runCode(ctx, aioSession, "print(1)", true, "aio") },
	} {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		err := warm(wctx)
		cancel()
		if err != nil {
			return r, err
		}
	}
	r.RunCode, err = ab(ctx, "k8s", "run_code on a warm session: Kubernetes pod vs local aio instance",
		[]named{{label: k8sPodLabel, s: pooled.runCodeSide(podSession, "print(1)", false, "")},
			{label: k8sAIOLabel, s: gw.runCodeSide(aioSession, "print(1)", true, "aio")}}, 1, o.k8sN*5, o.block)
	if err != nil {
		return r, err
	}
	r.RunCode.print(os.Stdout)
	_ = gw.deleteSession(ctx, aioSession)
	return r, nil
}

// firstOutputs times n new sessions' first run_code (print(1)) on g, each
// after ready (when set) returned, each session deleted afterwards.
func firstOutputs(ctx context.Context, g *gatewayProc, prefix string, n int, ready func(context.Context) error) (stats, error) {
	lat := make([]time.Duration, 0, n)
	began := time.Now()
	for i := range n {
		if ready != nil {
			rctx, cancel := context.WithTimeout(ctx, time.Minute)
			err := ready(rctx)
			cancel()
			if err != nil {
				return stats{}, err
			}
		}
		session := fmt.Sprintf("bench-k8s-%s-%d-%s", prefix, i, randHex())
		t0 := time.Now()
		err := g.runCode(ctx, session, "print(1)", false, "")
		d := time.Since(t0)
		_ = g.deleteSession(ctx, session)
		if err != nil {
			return stats{}, err
		}
		lat = append(lat, d)
	}
	return summarize(lat, time.Since(began)), nil
}

// waitPoolIdle waits until the namespace's pool holds n running idle pods.
func waitPoolIdle(ctx context.Context, cs kubernetes.Interface, ns string, n int) error {
	for {
		l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "sandgate.dev/pool-state=idle"})
		if err != nil {
			return err
		}
		ready := 0
		for _, p := range l.Items {
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && running(p) {
				ready++
			}
		}
		if ready >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.New("the pool was not refilled within a minute")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func running(p corev1.Pod) bool {
	for _, c := range p.Status.ContainerStatuses {
		if c.State.Running == nil {
			return false
		}
	}
	return len(p.Status.ContainerStatuses) > 0
}

// k8sMarkdown is the report's section.
func k8sMarkdown(r *k8sResult) string {
	if r == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n## Kubernetes tier (issue 29)\n\n")
	fmt.Fprintf(&b, "On the single-node test cluster (scripts/k8s.sh: runc pods, the same machine), through the gateway.\n\n")
	fmt.Fprintf(&b, "| what | p50 | p95 | n | target |\n|---|---|---|---|---|\n")
	fmt.Fprintf(&b, "| warm-pool claim to first output | %s | %s | %d | p50 ≤ 100 ms: %s |\n", ms(r.Claim.P50), ms(r.Claim.P95), r.Claim.N, metStr(r.Claim.P50 <= 100))
	fmt.Fprintf(&b, "| cold pod to first output | %s | %s | %d | reported |\n", ms(r.Cold.P50), ms(r.Cold.P95), r.Cold.N)
	pod, ok1 := r.RunCode.side(k8sPodLabel)
	local, ok2 := r.RunCode.side(k8sAIOLabel)
	if ok1 && ok2 && local.Stats.P50 > 0 {
		ratio := pod.Stats.P50 / local.Stats.P50
		fmt.Fprintf(&b, "| run_code, warm pod | %s | %s | %d | ≤ 1.3× aio: %.2f× %s |\n", ms(pod.Stats.P50), ms(pod.Stats.P95), pod.Stats.N, ratio, metStr(ratio <= 1.3))
		fmt.Fprintf(&b, "| run_code, warm local aio instance (baseline, same run) | %s | %s | %d | |\n", ms(local.Stats.P50), ms(local.Stats.P95), local.Stats.N)
	}
	return b.String()
}

func metStr(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}
