package k8s

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/sandgate/sandgate/executors/executortest"
)

// gatewayImage is the gateway's image in the test cluster:
// SANDGATE_K8S_GATEWAY_IMAGE, or deploy/kubernetes/image.sh import
// (a build of this checkout; nothing when it is unchanged).
func gatewayImage(t *testing.T) string {
	t.Helper()
	if v := os.Getenv("SANDGATE_K8S_GATEWAY_IMAGE"); v != "" {
		return v
	}
	script, _ := filepath.Abs(filepath.Join(deployDir, "image.sh"))
	cmd := exec.CommandContext(t.Context(), script, "import")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("build the gateway image: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// inTestCluster adapts the manifests to the test node: the gateway on
// the host's network (the pod network is isolated and routes nowhere, so
// only there does it reach the apiserver, at 127.0.0.1:6443, which the
// in-cluster config then names), which Pod Security "baseline" refuses
// in sandgate-system; the locally built images, never pulled; and a
// loopback port of the host for its API.
func inTestCluster(objs []runtime.Object, image string, port int) {
	for _, o := range objs {
		switch v := o.(type) {
		case *corev1.Namespace:
			if v.Name == "sandgate-system" {
				v.Labels["pod-security.kubernetes.io/enforce"] = "privileged"
			}
		case *corev1.ConfigMap:
			v.Data["gateway.yaml"] = strings.Replace(v.Data["gateway.yaml"], "image: sandgate/k8s-sandbox:latest",
				"image: "+testImage()+"\n    image_pull_policy: Never\n    pod_cpu: 100m\n    pod_memory_mb: 512", 1)
		case *appsv1.Deployment:
			s := &v.Spec.Template.Spec
			s.HostNetwork = true
			c := &s.Containers[0]
			c.Image, c.ImagePullPolicy = image, corev1.PullNever
			c.Args = []string{"--config", "/etc/sandgate/config/gateway.yaml", "--listen", "127.0.0.1:" + strconv.Itoa(port),
				"--data-dir", "/var/lib/sandgate/data"}
			c.Ports[0].ContainerPort = int32(port)
			c.Env = append(c.Env, corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: "127.0.0.1"},
				corev1.EnvVar{Name: "KUBERNETES_SERVICE_PORT", Value: "6443"})
		}
	}
}

// deployGateway applies the adapted Deployment and its token Secret, and
// returns the gateway's base URL once it is ready.
func deployGateway(t *testing.T, admin kubernetes.Interface, objs []runtime.Object, port int, agent string) string {
	t.Helper()
	ctx := t.Context()
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sandgate-tokens", Namespace: "sandgate-system"},
		StringData: map[string]string{"agent": agent, "admin": "admin-" + executortest.Nonce() + executortest.Nonce()}}
	if _, err := admin.CoreV1().Secrets("sandgate-system").Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if _, ok := o.(*appsv1.Deployment); ok {
			if err := apply(ctx, admin, o, false); err != nil {
				t.Fatalf("apply the gateway's Deployment: %v", err)
			}
		}
	}
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		res, err := http.Get(base + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return base
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway in the cluster is not ready after 2 minutes (%v); its logs:\n%s", err, gatewayLogs(admin))
		}
	}
}

func gatewayLogs(cs kubernetes.Interface) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pods, err := cs.CoreV1().Pods("sandgate-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=sandgate-gateway"})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "pod %s phase %s %v\n", p.Name, p.Status.Phase, p.Status.ContainerStatuses)
		raw, err := cs.CoreV1().Pods("sandgate-system").GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		fmt.Fprintf(&b, "%s %v\n", raw, err)
	}
	return b.String()
}

// runThroughGateway posts run_code to the in-cluster gateway.
func runThroughGateway(t *testing.T, base, tok, session, code string) (int, map[string]any) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"language": "bash", "code": code})
	req, _ := http.NewRequest("POST", base+"/v1/sessions/"+session+"/run_code", strings.NewReader(string(body)))
	req.Header.Set("Authorization", "Bearer "+tok)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	var out map[string]any
	if json.Unmarshal(raw, &out) != nil {
		out = map[string]any{"raw": string(raw)}
	}
	return res.StatusCode, out
}

func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
