package k8s

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// restConfig loads the kubeconfig, or the in-cluster config when none is
// named (the gateway deployed with deploy/kubernetes/).
func restConfig(path string) (*rest.Config, error) {
	var (
		rc  *rest.Config
		err error
	)
	if path == "" {
		rc, err = rest.InClusterConfig()
	} else {
		rc, err = clientcmd.BuildConfigFromFlags("", path)
	}
	if err != nil {
		return nil, fmt.Errorf("k8s: client config: %w", err)
	}
	rc.UserAgent = "sandgate"
	// Pod creation bursts (50 sessions at once) must not queue behind
	// client-go's default 5 requests per second.
	rc.QPS, rc.Burst = 100, 200
	return rc, nil
}

// ensureNamespace creates the sandbox namespace, enforcing Pod Security
// "restricted", and the isolation NetworkPolicy, when missing. A
// namespace that exists without the enforcement label is refused: pods
// there could be weaker than this tier says.
func ensureNamespace(ctx context.Context, cs kubernetes.Interface, e *Executor) error {
	ns, err := cs.CoreV1().Namespaces().Get(ctx, e.cfg.Namespace, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		ns, err = cs.CoreV1().Namespaces().Create(ctx, e.namespace(), metav1.CreateOptions{})
		if err == nil {
			awaitDefaultServiceAccount(ctx, cs, e.cfg.Namespace)
		}
		if apierrors.IsAlreadyExists(err) {
			ns, err = cs.CoreV1().Namespaces().Get(ctx, e.cfg.Namespace, metav1.GetOptions{})
		}
	}
	if err != nil {
		return fmt.Errorf("k8s: namespace %s: %w", e.cfg.Namespace, err)
	}
	if got := ns.Labels["pod-security.kubernetes.io/enforce"]; got != "restricted" {
		return fmt.Errorf("k8s: namespace %s enforces Pod Security %q, want restricted", e.cfg.Namespace, got)
	}
	_, err = cs.NetworkingV1().NetworkPolicies(e.cfg.Namespace).Create(ctx, e.denyAllPolicy(), metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("k8s: network policy: %w", err)
	}
	_, err = cs.CoreV1().ConfigMaps(e.cfg.Namespace).Create(ctx, e.etcFiles(), metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = cs.CoreV1().ConfigMaps(e.cfg.Namespace).Update(ctx, e.etcFiles(), metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("k8s: sandbox /etc files: %w", err)
	}
	return nil
}

// serviceAccountWait bounds awaitDefaultServiceAccount.
const serviceAccountWait = 30 * time.Second

// awaitDefaultServiceAccount waits until a namespace this executor has just
// created has its "default" ServiceAccount, which the controller manager
// adds shortly after. Until then the ServiceAccount admission plugin refuses
// every pod in it, though sandbox pods mount no token: CI's loaded cluster
// once refused the first sandbox of a new namespace that way. After
// serviceAccountWait, or on any other answer, it returns, and a pod that is
// still refused reports why.
func awaitDefaultServiceAccount(ctx context.Context, cs kubernetes.Interface, namespace string) {
	ctx, cancel := context.WithTimeout(ctx, serviceAccountWait)
	defer cancel()
	for {
		_, err := cs.CoreV1().ServiceAccounts(namespace).Get(ctx, "default", metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// podState classifies a pod for the tier: ready (sandboxd's container
// runs), pending, or gone for good (failed, succeeded, being deleted).
type podState int

const (
	podPending podState = iota
	podReady
	podGone
)

func stateOf(p *corev1.Pod) (podState, string) {
	if p.DeletionTimestamp != nil {
		return podGone, "the pod is being deleted"
	}
	switch p.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		msg := string(p.Status.Phase)
		if p.Status.Reason != "" {
			msg += ": " + p.Status.Reason
		}
		return podGone, msg
	case corev1.PodRunning:
		for _, c := range p.Status.ContainerStatuses {
			if c.Name == containerName && c.RestartCount > 0 && p.Annotations[annSession] != "" {
				// A pooled pod's (restartPolicy Always) sandbox restarted
				// after its claim: what the session had is gone.
				return podGone, "the sandbox container restarted"
			}
			if c.Name == containerName && c.State.Running != nil {
				return podReady, ""
			}
			if c.Name == containerName && c.State.Terminated != nil {
				return podGone, "the sandbox container exited: " + c.State.Terminated.Reason
			}
		}
	}
	for _, c := range p.Status.ContainerStatuses {
		if w := c.State.Waiting; w != nil && (w.Reason == "ErrImageNeverPull" || w.Reason == "ImagePullBackOff" ||
			w.Reason == "CreateContainerConfigError" && !cacheNotSynced(w.Message) || w.Reason == "InvalidImageName") {
			return podGone, w.Reason + ": " + w.Message
		}
	}
	return podPending, ""
}

// cacheNotSynced tells kubelet's CreateContainerConfigError for its own
// Secret or ConfigMap cache not synced yet ("failed to sync secret cache:
// timed out waiting for the condition", seen on a loaded node), which
// kubelet retries, from the same reason for a Secret or ConfigMap that is
// missing, which is final. The pod's start stays bounded by the tier's
// start timeout either way.
func cacheNotSynced(msg string) bool {
	return strings.Contains(msg, "failed to sync") && strings.Contains(msg, "cache")
}
