package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandgate/sandgate/executors/executortest"
	"github.com/sandgate/sandgate/policy"
)

// kubeTestCluster returns the test cluster's kubeconfig and sandbox
// image (scripts/k8s.sh), skipping the test when there is none, or
// failing it when SANDGATE_REQUIRE_KUBERNETES=1 (make test).
func kubeTestCluster(t *testing.T) (kubeconfig, image string) {
	t.Helper()
	kubeconfig = os.Getenv("SANDGATE_K8S_KUBECONFIG")
	if kubeconfig == "" {
		kubeconfig = "/var/lib/sandgate/k8s/run/pki/admin.kubeconfig"
	}
	image = os.Getenv("SANDGATE_K8S_IMAGE")
	if image == "" {
		b, _ := os.ReadFile("/var/lib/sandgate/k8s/run/sandbox-image")
		image = strings.TrimSpace(string(b))
	}
	_, err := os.Stat(kubeconfig)
	if err == nil && image == "" {
		err = fmt.Errorf("no sandbox image")
	}
	if err == nil {
		shareKubeCluster(t)
		return kubeconfig, image
	}
	if os.Getenv("SANDGATE_REQUIRE_KUBERNETES") == "1" || os.Getenv("SANDGATE_REQUIRE_K8S") == "1" {
		t.Fatalf("Kubernetes required (SANDGATE_REQUIRE_KUBERNETES=1): %v (scripts/k8s.sh start)", err)
	}
	t.Skipf("no Kubernetes test cluster (scripts/k8s.sh start): %v", err)
	return "", ""
}

// TestPolicyRoutesToKubernetes: a policy whose rows name the executor
// "kubernetes" sends a session's run_code to a pod of the Kubernetes
// tier: the decision names it, the code runs there, the session has
// exactly one pod, and deleting the session deletes it. DeerFlow's
// provisioner API is backed by the same tier (the only executor on):
// its sandbox's shell runs in a pod of its own, with DeerFlow's paths.
func TestPolicyRoutesToKubernetes(t *testing.T) {
	kubeconfig, image := kubeTestCluster(t)
	tmp := t.TempDir()
	chmodTraversable(t, tmp)
	dir := filepath.Join(tmp, "policy")
	writePolicyTree(t, dir, map[string]string{"sandgate/config/data.json": routeAllTo(t, "kubernetes")})
	ns := "sandgate-gw-" + executortest.Nonce()
	tok := "agent-" + executortest.Nonce()
	g := startPolicyGateway(t, tmp, fmt.Sprintf(`executors:
  subprocess: {enabled: false}
  docker: {enabled: false}
  gvisor: {enabled: false}
  aio: {enabled: false}
  kubernetes: {enabled: true, kubeconfig: %q, namespace: %q, image: %q, image_pull_policy: Never, pod_memory_mb: 512, pod_cpu: 500m}
browser: {enabled: false}
auth:
  tokens:
    - {name: a, role: agent, tenant: team-a, token: %s}
policy:
  dir: %s
`, kubeconfig, ns, image, tok, dir))
	cs := kubeClient(t, kubeconfig)
	t.Cleanup(func() {
		_ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})

	body, _ := json.Marshal(map[string]any{"language": "bash",
		"code": "hostname; echo routed > f.txt; cat f.txt"})
	st, out, raw := g.call("POST", "/v1/sessions/k8s-routed/run_code", tok, string(body))
	if st != 200 {
		t.Fatalf("run_code: %d %s", st, raw)
	}
	d, _ := out["decision"].(map[string]any)
	if out["stdout"] != "sandbox\nrouted\n" || d["executor"] != "kubernetes" {
		t.Fatalf("run_code: stdout %q decision %v", out["stdout"], d)
	}
	pods, err := cs.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=sandgate"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods after the run: %d (%v), want exactly the session's one", len(pods.Items), err)
	}
	// DeerFlow's provisioner API on the same tier: its sandbox's shell
	// runs in a pod of its own session, with DeerFlow's paths.
	st, sb, raw := g.call("POST", "/deerflow/api/sandboxes", tok, `{"sandbox_id":"sbx-k8s","thread_id":"t1","user_id":"u1"}`)
	url, _ := sb["sandbox_url"].(string)
	if st != 200 || !strings.HasPrefix(url, g.base+"/deerflow/sandboxes/") {
		t.Fatalf("DeerFlow create: %d %s", st, raw)
	}
	st, sh, raw := g.call("POST", strings.TrimPrefix(url, g.base)+"/v1/shell/exec", "",
		`{"command":"hostname; pwd; echo df > /mnt/user-data/outputs/k.txt; cat /mnt/user-data/outputs/k.txt"}`)
	data, _ := sh["data"].(map[string]any)
	if out, _ := data["output"].(string); st != 200 || !strings.Contains(out, "sandbox\n/mnt/user-data/workspace\ndf") {
		t.Fatalf("DeerFlow shell/exec on the Kubernetes tier: %d %s", st, raw)
	}
	pods, err = cs.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=sandgate"})
	if err != nil || len(pods.Items) != 2 {
		t.Fatalf("pods after DeerFlow's command: %d (%v), want the two sessions' two", len(pods.Items), err)
	}
	if st, _, raw := g.call("DELETE", "/deerflow/api/sandboxes/sbx-k8s", tok, ""); st != 200 {
		t.Fatalf("DeerFlow delete: %d %s", st, raw)
	}
	if st, _, raw := g.call("DELETE", "/v1/sessions/k8s-routed", tok, ""); st/100 != 2 {
		t.Fatalf("delete the session: %d %s", st, raw)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		pods, err = cs.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=sandgate"})
		if err == nil && len(pods.Items) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the session's pod outlived the session by a minute (%d pods, %v)", len(pods.Items), err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// routeAllTo is the default policy's configuration with every row's
// executor set to kind and no isolation upgrade.
func routeAllTo(t *testing.T, kind string) string {
	t.Helper()
	tree, err := policy.DefaultTree()
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(tree["sandgate/config/data.json"].Data, &cfg); err != nil {
		t.Fatal(err)
	}
	for _, levels := range cfg["modes"].(map[string]any) {
		for _, row := range levels.(map[string]any) {
			row.(map[string]any)["executor"] = kind
		}
	}
	cfg["isolation_upgrade"].(map[string]any)["modes"] = []any{}
	out, _ := json.Marshal(cfg)
	return string(out)
}

func kubeClient(t *testing.T, kubeconfig string) kubernetes.Interface {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// shareKubeCluster holds the cluster's test lock shared for the test's
// duration: executors/k8s's fault tests (a stopped kubelet, a restarted
// apiserver) hold it exclusively, so they never run under this test.
func shareKubeCluster(t *testing.T) {
	t.Helper()
	f, err := os.OpenFile("/run/sandgate-k8s/tests.lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err == nil {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_SH)
	}
	if err != nil {
		t.Fatalf("the cluster's test lock: %v", err)
	}
	t.Cleanup(func() { f.Close() })
}
