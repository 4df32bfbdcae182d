package k8s

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestNamespaceWaitsForItsServiceAccount: a namespace the executor creates
// is ready for pods only once the controller manager has given it its
// default ServiceAccount (the admission plugin refuses pods before); the
// executor's start waits for it rather than failing the first session.
// client-go's fake clientset stands in for the apiserver, and the test
// for the controller manager, 300 ms late.
func TestNamespaceWaitsForItsServiceAccount(t *testing.T) {
	cs := fake.NewClientset()
	e := &Executor{cfg: Config{Namespace: "sbx", Instance: "t"}}
	const late = 300 * time.Millisecond
	go func() {
		time.Sleep(late)
		_, _ = cs.CoreV1().ServiceAccounts("sbx").Create(t.Context(),
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	}()
	start := time.Now()
	if err := ensureNamespace(t.Context(), cs, e); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts("sbx").Get(t.Context(), "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("ensureNamespace returned after %v, before the namespace had its ServiceAccount: %v", time.Since(start), err)
	}
	// A namespace that exists is not waited on again.
	if err := ensureNamespace(t.Context(), cs, e); err != nil {
		t.Fatal(err)
	}
}
