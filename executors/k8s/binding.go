package k8s

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandgate/sandgate/executors"
)

// A session's binding is a Secret named sbx-<session hash>: its creation
// is the session's lock (the apiserver lets one create of a name win), so
// whichever replica, process or retry places the session's sandbox, a
// session has at most one pod, whether that pod was created for it or
// claimed from the warm pool (pool.go), whose pods have names of their
// own. The binding holds the sandbox's key (sandboxd's API key, minted
// with it) and names the pod (annotations, and the pod as its owner, so
// the garbage collector deletes the binding with the pod). A replica that
// finds a binding adopts its pod; one that finds the bound pod gone tells
// its request the sandbox was lost, and deletes the binding, so the
// request after it starts afresh and the loss is said once.
const (
	annPod    = "sandgate.dev/pod"
	annPodUID = "sandgate.dev/pod-uid"
	// bindingGrace is how long past ReadyTimeout a binding may stay
	// without a pod before it counts as abandoned (its placer died).
	bindingGrace = 30 * time.Second
)

func bindingName(sessionID string) string { return "sbx-" + sessionHash(sessionID) }

// errBindingTaken: another placer's binding won the name or just went;
// look again.
var errBindingTaken = errors.New("k8s: the session's binding changed")

// staleBinding is a binding whose pod is gone.
type staleBinding struct{ why string }

func (s *staleBinding) Error() string { return "k8s: the bound pod is gone: " + s.why }

// placement is the session's pod and its sandboxd's key. adopted: another
// replica or an earlier attempt placed it. claimed: the way to a pod
// claimed from the pool here, through which its sandboxd took the key.
type placement struct {
	pod     *corev1.Pod
	key     string
	adopted bool
	claimed *conn
}

// bind returns the session's placement: the pod its binding names, or a
// pod placed here under a new binding.
func (e *Executor) bind(ctx context.Context, spec executors.Spec) (placement, error) {
	name := bindingName(spec.SessionID)
	for attempt := 0; attempt < 5; attempt++ {
		sec, err := e.cs.CoreV1().Secrets(e.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			pl, err := e.place(ctx, spec)
			if errors.Is(err, errBindingTaken) {
				continue
			}
			return pl, err
		}
		if err != nil {
			return placement{}, unavailable("look up the session's sandbox", err)
		}
		pod, err := e.boundPod(ctx, sec)
		var stale *staleBinding
		switch {
		case errors.Is(err, errBindingTaken):
			continue
		case errors.As(err, &stale):
			e.unbind(context.WithoutCancel(ctx), sec)
			return placement{}, lostError(stale.why)
		case err != nil:
			return placement{}, err
		}
		e.takeOver(ctx, sec, pod)
		return placement{pod: pod, key: string(sec.Data[keyField]), adopted: true}, nil
	}
	return placement{}, unavailable("bind the session's sandbox", errors.New("its binding kept changing"))
}

// place creates the session's binding, then claims a pooled pod or
// creates one, and records the pod in the binding.
func (e *Executor) place(ctx context.Context, spec executors.Spec) (placement, error) {
	key, err := newKey()
	if err != nil {
		return placement{}, err
	}
	secrets := e.cs.CoreV1().Secrets(e.cfg.Namespace)
	sec, err := secrets.Create(ctx, e.keySecret(spec.SessionID, bindingName(spec.SessionID), key), metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return placement{}, errBindingTaken
	}
	if err != nil {
		return placement{}, unavailable("create the sandbox's key", err)
	}
	pod, cn, err := e.claimPooled(ctx, spec, key)
	if pod == nil && err == nil {
		pod, err = e.createPod(ctx, spec, sec.Name)
	}
	if err == nil {
		sec.Annotations = map[string]string{annPod: pod.Name, annPodUID: string(pod.UID)}
		sec.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}}
		if _, uerr := secrets.Update(ctx, sec, metav1.UpdateOptions{}); uerr != nil {
			_ = e.deletePodUID(context.WithoutCancel(ctx), pod.Name, pod.UID)
			err = unavailable("record the session's pod", uerr)
		}
	}
	if err != nil {
		if cn != nil {
			cn.close()
		}
		e.unbind(context.WithoutCancel(ctx), sec)
		return placement{}, err
	}
	return placement{pod: pod, key: key, claimed: cn}, nil
}

// createPod creates a pod for the session, reading its key from the
// binding secret.
func (e *Executor) createPod(ctx context.Context, spec executors.Spec, secret string) (*corev1.Pod, error) {
	mem := max(e.cfg.PodMemoryMB, spec.Limits.MemoryMB+256)
	pod, err := e.cs.CoreV1().Pods(e.cfg.Namespace).Create(ctx, e.podSpec(spec.SessionID, secret, spec.UID, spec.GID, mem, spec.Layout), metav1.CreateOptions{})
	switch {
	case apierrors.IsForbidden(err) || apierrors.IsInvalid(err):
		return nil, fmt.Errorf("k8s: the cluster refused the sandbox pod: %w", err)
	case err != nil:
		return nil, unavailable("create the sandbox pod", err)
	}
	return pod, nil
}

// boundPod is the pod sec names, waiting (as long as a creation may
// take) while another placer has not named it yet.
func (e *Executor) boundPod(ctx context.Context, sec *corev1.Secret) (*corev1.Pod, error) {
	for {
		if name := sec.Annotations[annPod]; name != "" {
			p, err := e.cs.CoreV1().Pods(e.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) || (err == nil && string(p.UID) != sec.Annotations[annPodUID]) {
				return nil, &staleBinding{"the pod was deleted"}
			}
			if err != nil {
				return nil, unavailable("look up the sandbox pod", err)
			}
			if st, why := stateOf(p); st == podGone {
				return nil, &staleBinding{why}
			}
			return p, nil
		}
		if time.Since(sec.CreationTimestamp.Time) > e.cfg.ReadyTimeout+bindingGrace {
			e.unbind(context.WithoutCancel(ctx), sec) // its placer died before naming a pod
			return nil, errBindingTaken
		}
		select {
		case <-ctx.Done():
			return nil, unavailable("wait for the session's sandbox", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
		var err error
		sec, err = e.cs.CoreV1().Secrets(e.cfg.Namespace).Get(ctx, sec.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, errBindingTaken
		}
		if err != nil {
			return nil, unavailable("look up the session's sandbox", err)
		}
	}
}

// unbind deletes the binding (that very object: a newer binding of the
// session is left alone) and the pod it names, if that pod is still there.
func (e *Executor) unbind(ctx context.Context, sec *corev1.Secret) {
	if name, uid := sec.Annotations[annPod], types.UID(sec.Annotations[annPodUID]); name != "" {
		_ = e.deletePodUID(ctx, name, uid)
	}
	uid := sec.UID
	err := e.cs.CoreV1().Secrets(e.cfg.Namespace).Delete(ctx, sec.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		e.cfg.Logger.Warn("k8s: delete a session's binding", "binding", sec.Name, "err", err)
	}
}

// unbindLost deletes the session's binding when it still names the lost
// pod uid, after its loss was told: the next request places a new pod.
func (e *Executor) unbindLost(ctx context.Context, sessionID string, uid types.UID) {
	sec, err := e.cs.CoreV1().Secrets(e.cfg.Namespace).Get(ctx, bindingName(sessionID), metav1.GetOptions{})
	if err == nil && types.UID(sec.Annotations[annPodUID]) == uid {
		e.unbind(ctx, sec)
	}
}

// takeOver relabels an adopted pod and its binding with this replica's
// instance, so this replica's shutdown reaps them and the one that
// placed them (killed, then restarted under its name) leaves them alone.
func (e *Executor) takeOver(ctx context.Context, sec *corev1.Secret, pod *corev1.Pod) {
	if pod.Labels[labelInstance] == e.cfg.Instance {
		return
	}
	patch := []byte(`{"metadata":{"labels":{"` + labelInstance + `":"` + e.cfg.Instance + `"}}}`)
	_, err := e.cs.CoreV1().Pods(e.cfg.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err == nil {
		_, err = e.cs.CoreV1().Secrets(e.cfg.Namespace).Patch(ctx, sec.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	}
	if err != nil {
		e.cfg.Logger.Warn("k8s: label an adopted sandbox pod", "pod", pod.Name, "err", err)
	}
}

// deletePodUID deletes the pod name when it is still the pod uid.
func (e *Executor) deletePodUID(ctx context.Context, name string, uid types.UID) error {
	grace := int64(1)
	opts := metav1.DeleteOptions{GracePeriodSeconds: &grace}
	if uid != "" {
		opts.Preconditions = &metav1.Preconditions{UID: &uid}
	}
	err := e.cs.CoreV1().Pods(e.cfg.Namespace).Delete(ctx, name, opts)
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("k8s: delete pod %s: %w", name, err)
	}
	return nil
}
