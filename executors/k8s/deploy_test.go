package k8s

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/sandgate/sandgate/executors/executortest"
)

const deployDir = "../../deploy/kubernetes"

// manifests decodes every object of deploy/kubernetes/*.yaml.
func manifests(t *testing.T) []runtime.Object {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(deployDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", deployDir, err)
	}
	var out []runtime.Object
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(b), "\n---\n") {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			obj, _, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			out = append(out, obj)
		}
	}
	return out
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// apply creates obj (dry run only when dry), an existing object being no
// error.
func apply(ctx context.Context, cs kubernetes.Interface, obj runtime.Object, dry bool) error {
	o := metav1.CreateOptions{}
	if dry {
		o.DryRun = []string{metav1.DryRunAll}
	}
	var err error
	switch v := obj.(type) {
	case *corev1.Namespace:
		_, err = cs.CoreV1().Namespaces().Create(ctx, v, o)
	case *corev1.ServiceAccount:
		_, err = cs.CoreV1().ServiceAccounts(v.Namespace).Create(ctx, v, o)
	case *corev1.ConfigMap:
		_, err = cs.CoreV1().ConfigMaps(v.Namespace).Create(ctx, v, o)
	case *corev1.Service:
		_, err = cs.CoreV1().Services(v.Namespace).Create(ctx, v, o)
	case *appsv1.Deployment:
		_, err = cs.AppsV1().Deployments(v.Namespace).Create(ctx, v, o)
	case *rbacv1.Role:
		_, err = cs.RbacV1().Roles(v.Namespace).Create(ctx, v, o)
	case *rbacv1.RoleBinding:
		_, err = cs.RbacV1().RoleBindings(v.Namespace).Create(ctx, v, o)
	case *rbacv1.ClusterRole:
		_, err = cs.RbacV1().ClusterRoles().Create(ctx, v, o)
	case *rbacv1.ClusterRoleBinding:
		_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, v, o)
	case *nodev1.RuntimeClass:
		_, err = cs.NodeV1().RuntimeClasses().Create(ctx, v, o)
	case *networkingv1.NetworkPolicy:
		_, err = cs.NetworkingV1().NetworkPolicies(v.Namespace).Create(ctx, v, o)
	case *policyv1.PodDisruptionBudget:
		_, err = cs.PolicyV1().PodDisruptionBudgets(v.Namespace).Create(ctx, v, o)
	default:
		return fmt.Errorf("no test apply for %T", obj)
	}
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// TestDeployManifests: every object of deploy/kubernetes/ is accepted by
// the apiserver (a dry run: schema, admission); applied, its
// ServiceAccount's RBAC is enough for the Kubernetes tier, used with that
// account's own token: a session on a pool pod in sandgate-sandboxes runs
// and is released; and it is least privilege: the account cannot read
// pods or secrets in another namespace. Then the gateway itself runs in
// the cluster from the Deployment, on its locally built image
// (inTestCluster says what the test node needs changed), and serves a
// session's run_code end to end on a pod of the sandbox namespace.
func TestDeployManifests(t *testing.T) {
	needCluster(t)
	admin := newBareClient(t)
	ctx := t.Context()
	objs := manifests(t)
	image := gatewayImage(t)
	port := freeLoopbackPort(t)
	for _, o := range objs {
		if err := apply(ctx, admin, o, true); err != nil && !isNamespacePending(err) {
			t.Fatalf("dry run of %T: %v", o, err)
		}
	}
	t.Cleanup(func() {
		c := context.Background()
		for _, ns := range []string{"sandgate-system", "sandgate-sandboxes"} {
			_ = admin.CoreV1().Namespaces().Delete(c, ns, metav1.DeleteOptions{})
		}
		_ = admin.RbacV1().ClusterRoleBindings().Delete(c, "sandgate-gateway-sandbox-namespace", metav1.DeleteOptions{})
		_ = admin.RbacV1().ClusterRoles().Delete(c, "sandgate-gateway-sandbox-namespace", metav1.DeleteOptions{})
		_ = admin.NodeV1().RuntimeClasses().Delete(c, "gvisor", metav1.DeleteOptions{})
	})
	inTestCluster(objs, image, port)
	// Namespaces first, then the rest; the Deployment at the end.
	for pass := range 2 {
		for _, o := range objs {
			_, isNS := o.(*corev1.Namespace)
			_, isDeploy := o.(*appsv1.Deployment)
			if isNS == (pass == 0) && !isDeploy {
				if err := apply(ctx, admin, o, false); err != nil {
					t.Fatalf("apply %T: %v", o, err)
				}
			}
		}
	}
	kubeconfig := serviceAccountKubeconfig(t, admin, "sandgate-system", "sandgate-gateway")
	saCheck(t, kubeconfig)
	agent := "agent-" + executortest.Nonce() + executortest.Nonce()
	base := deployGateway(t, admin, objs, port, agent)
	st, out := runThroughGateway(t, base, agent, "in-cluster", "echo served in the cluster; hostname")
	d, _ := out["decision"].(map[string]any)
	if st != 200 || out["stdout"] != "served in the cluster\nsandbox\n" || d["executor"] != "kubernetes" {
		t.Fatalf("run_code through the in-cluster gateway: %d %v\n%s", st, out, gatewayLogs(admin))
	}
	pods, err := admin.CoreV1().Pods("sandgate-sandboxes").List(ctx, metav1.ListOptions{LabelSelector: labelSession})
	// A pod another test's session left behind, already finished, is not
	// this session's (CI 4: a Succeeded pool pod was listed beside it).
	if err != nil {
		t.Fatalf("session pods in sandgate-sandboxes: %v", err)
	}
	live := pods.Items[:0]
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			live = append(live, p)
		}
	}
	if len(live) != 1 {
		t.Fatalf("session pods in sandgate-sandboxes: %v, want one running", names(pods.Items))
	}
}

// saCheck: the ServiceAccount's RBAC is enough for the tier and no more.
func saCheck(t *testing.T, kubeconfig string) {
	t.Helper()
	ctx := t.Context()
	e, err := New(ctx, Config{Kubeconfig: kubeconfig, Namespace: "sandgate-sandboxes", Image: testImage(),
		ImagePullPolicy: "Never", Instance: "deploy-" + executortest.Nonce(), Logger: testLogger(t),
		PodMemoryMB: 512, PodCPU: "100m", Pool: PoolConfig{Size: 1}})
	if err != nil {
		t.Fatalf("the tier with the gateway's ServiceAccount: %v", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := e.Close(cctx); err != nil {
			t.Errorf("Close with the ServiceAccount: %v", err)
		}
	}()
	waitIdle(t, e, 1, nil)
	session := "deploy-" + executortest.Nonce()
	res, err := e.Execute(ctx, bashSpec(t, session, "echo via the service account"))
	if err != nil || res.Stdout != "via the service account\n" {
		t.Fatalf("run with the ServiceAccount: %v %+v", err, res)
	}
	if err := e.ReleaseSession(ctx, session); err != nil {
		t.Fatalf("release with the ServiceAccount: %v", err)
	}
	for _, read := range []func() error{
		func() error { _, err := e.cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{}); return err },
		func() error {
			_, err := e.cs.CoreV1().Secrets("sandgate-system").List(ctx, metav1.ListOptions{})
			return err
		},
		func() error {
			_, err := e.cs.CoreV1().Secrets("sandgate-sandboxes").List(ctx, metav1.ListOptions{})
			return err
		},
	} {
		if err := read(); !apierrors.IsForbidden(err) {
			t.Fatalf("the ServiceAccount reads beyond its need: %v, want forbidden", err)
		}
	}
}

// isNamespacePending: a dry run of an object whose namespace the dry
// run of the namespaces did not create.
func isNamespacePending(err error) bool { return apierrors.IsNotFound(err) }

func newBareClient(t *testing.T) kubernetes.Interface {
	t.Helper()
	rc, err := restConfig(testKubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// serviceAccountKubeconfig writes a kubeconfig holding a token of the
// ServiceAccount (TokenRequest), for the test cluster's server and CA.
func serviceAccountKubeconfig(t *testing.T, cs kubernetes.Interface, ns, name string) string {
	t.Helper()
	exp := int64(3600)
	tok, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), name,
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.LoadFromFile(testKubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range cfg.AuthInfos {
		*a = *clientcmdAuth(tok.Status.Token)
	}
	path := filepath.Join(t.TempDir(), "sa.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func clientcmdAuth(token string) *clientcmdapi.AuthInfo { return &clientcmdapi.AuthInfo{Token: token} }
