package k8s

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/client-go/util/retry"

	"github.com/sandgate/sandgate/executors"
)

// The warm pool. A ReplicaSet (one per namespace, shared by every replica
// of the gateway) keeps pool.size idle sandbox pods running. They belong
// to no session: sandboxd in them does not serve yet; the container's
// shell waits on a FIFO for the key. A claim takes one pod by updating
// its labels (state idle → claimed, the session's labels) and dropping
// its owner reference, in one update carrying the resourceVersion the
// claimant read: of two claims of one pod, the apiserver accepts one and
// answers the other with a conflict (optimistic concurrency), so a pod
// never serves a second session. The claimed pod no longer matches the
// ReplicaSet's selector, so the ReplicaSet controller creates its
// replacement; nothing ever sets a pod's state back to idle, so a
// claimed pod never returns to the pool. The claimant then hands the
// key to the pod through the FIFO (one exec, stdin only: the key is in
// no spec, argument or log), and sandboxd starts serving with it.
//
// A session fits a pooled pod when it runs as the default uid with the
// default layout and needs no more memory than the pool's pods have;
// others get a pod of their own, as when the pool is empty.
//
// Pool pods have restartPolicy Always (a ReplicaSet requires it); a
// sandbox container that restarted after the claim counts as lost
// (stateOf), as a dead one does on a pod of its own.
const (
	labelPool      = "sandgate.dev/pool"
	labelPoolState = "sandgate.dev/pool-state"
	labelTemplate  = "sandgate.dev/template"
	annClaimedAt   = "sandgate.dev/claimed-at"
	poolIdle       = "idle"
	poolClaimed    = "claimed"
	keyFIFO        = "/run/sandgate/key"
)

// poolTemplate is the pool pods' template, labelled with its own hash.
func (e *Executor) poolTemplate() corev1.PodTemplateSpec {
	script := `f=` + keyFIFO + `; mkfifo -m 0600 "$f" && IFS= read -r SANDBOXD_API_KEY <"$f" && rm -f "$f" && ` +
		`export SANDBOXD_API_KEY && exec /usr/local/bin/sandboxd ` + strings.Join(serveArgs(executors.Layout{}), " ")
	spec := e.lockedSpec(e.cfg.SandboxUID, e.cfg.SandboxGID, e.cfg.PodMemoryMB, "", []string{"/bin/sh", "-c", script}, nil)
	spec.RestartPolicy = corev1.RestartPolicyAlways
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "handoff", VolumeSource: corev1.VolumeSource{
		EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}})
	c := &spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "handoff", MountPath: "/run/sandgate"})
	raw, _ := json.Marshal(spec)
	sum := sha256.Sum256(raw)
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{
			labelManagedBy: managedBy, labelComponent: componentSbx,
			labelPool: e.cfg.Pool.Name, labelPoolState: poolIdle, labelTemplate: hex.EncodeToString(sum[:])[:16],
		}},
		Spec: spec,
	}
}

// ensurePool creates or updates the pool's ReplicaSet, then reaps what a
// pool left behind: idle pods of an older template (a ReplicaSet does not
// replace pods when its template changes), idle pods whose sandbox
// restarted, and claims that were never bound (their claimant died
// between the claim and the binding).
func (e *Executor) ensurePool(ctx context.Context) error {
	if e.cfg.Pool.Size == 0 {
		return nil
	}
	tmpl := e.poolTemplate()
	e.poolHash = tmpl.Labels[labelTemplate]
	n := int32(e.cfg.Pool.Size)
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: e.cfg.Pool.Name, Namespace: e.cfg.Namespace,
			Labels: map[string]string{labelManagedBy: managedBy, labelPool: e.cfg.Pool.Name}},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: &n,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{labelPool: e.cfg.Pool.Name, labelPoolState: poolIdle}},
			Template: tmpl,
		},
	}
	rsc := e.cs.AppsV1().ReplicaSets(e.cfg.Namespace)
	_, err := rsc.Create(ctx, rs, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, err := rsc.Get(ctx, rs.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur.Spec.Replicas, cur.Spec.Template = &n, tmpl
			_, err = rsc.Update(ctx, cur, metav1.UpdateOptions{})
			return err
		})
	}
	if err != nil {
		return fmt.Errorf("k8s: pool replicaset: %w", err)
	}
	return e.reapPool(ctx)
}

func (e *Executor) reapPool(ctx context.Context) error {
	pods, err := e.cs.CoreV1().Pods(e.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: labelPool + "=" + e.cfg.Pool.Name})
	if err != nil {
		return fmt.Errorf("k8s: list the pool's pods: %w", err)
	}
	var errs []error
	for i := range pods.Items {
		p := &pods.Items[i]
		why := ""
		switch p.Labels[labelPoolState] {
		case poolIdle:
			if p.Labels[labelTemplate] != e.poolHash {
				why = "an older template"
			} else if restarts(p) > 0 {
				why = "its sandbox restarted"
			}
		case poolClaimed:
			if e.unboundClaim(ctx, p) {
				why = "claimed but never bound"
			}
		}
		if why != "" {
			e.cfg.Logger.Info("k8s: reaping a stale pool pod", "pod", p.Name, "reason", why)
			errs = append(errs, e.deletePodUID(ctx, p.Name, p.UID))
		}
	}
	return errors.Join(errs...)
}

// unboundClaim: p was claimed long enough ago and no binding names it.
func (e *Executor) unboundClaim(ctx context.Context, p *corev1.Pod) bool {
	at, err := time.Parse(time.RFC3339Nano, p.Annotations[annClaimedAt])
	if err == nil && time.Since(at) < e.cfg.ReadyTimeout+bindingGrace {
		return false
	}
	// The binding's name is the session label's value behind "sbx-".
	sec, err := e.cs.CoreV1().Secrets(e.cfg.Namespace).Get(ctx, "sbx-"+p.Labels[labelSession], metav1.GetOptions{})
	return apierrors.IsNotFound(err) || (err == nil && sec.Annotations[annPodUID] != string(p.UID))
}

func restarts(p *corev1.Pod) int32 {
	for _, c := range p.Status.ContainerStatuses {
		if c.Name == containerName {
			return c.RestartCount
		}
	}
	return 0
}

// fitsPool: a pooled pod can be this run's sandbox.
func (e *Executor) fitsPool(spec executors.Spec) bool {
	return e.cfg.Pool.Size > 0 && spec.UID == e.cfg.SandboxUID && spec.GID == e.cfg.SandboxGID &&
		spec.Layout.Root == "" && spec.Layout.Dir() == workspacePath &&
		spec.Limits.MemoryMB+256 <= e.cfg.PodMemoryMB
}

// idlePods lists the pool's ready, unclaimed pods of the current
// template, as the watch sees them, in random order (claimants on other
// replicas start elsewhere in the list).
func (e *Executor) idlePods() []*corev1.Pod {
	var out []*corev1.Pod
	for _, obj := range e.pods.lister.List() {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.Labels[labelPool] != e.cfg.Pool.Name || p.Labels[labelPoolState] != poolIdle ||
			p.Labels[labelTemplate] != e.poolHash || restarts(p) > 0 {
			continue
		}
		if st, _ := stateOf(p); st == podReady {
			out = append(out, p)
		}
	}
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// claimPooled claims an idle pooled pod for the session and hands it
// key; nil with no error when none fits or none is idle.
func (e *Executor) claimPooled(ctx context.Context, spec executors.Spec, key string) (*corev1.Pod, error) {
	if !e.fitsPool(spec) {
		return nil, nil
	}
	for _, p := range e.idlePods() {
		c := p.DeepCopy()
		for k, v := range e.labels(spec.SessionID) {
			c.Labels[k] = v
		}
		c.Labels[labelPoolState] = poolClaimed
		if c.Annotations == nil {
			c.Annotations = map[string]string{}
		}
		c.Annotations[annSession] = spec.SessionID
		c.Annotations[annClaimedAt] = time.Now().UTC().Format(time.RFC3339Nano)
		c.OwnerReferences = nil // out of the ReplicaSet, which refills the pool
		got, err := e.cs.CoreV1().Pods(e.cfg.Namespace).Update(ctx, c, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			continue // another claimant (or the controller) was first
		}
		if err != nil {
			return nil, unavailable("claim a pooled sandbox pod", err)
		}
		if err := e.handKey(ctx, got.Name, key); err != nil {
			// That pod is of no use to anyone now; another may be.
			e.cfg.Logger.Warn("k8s: a claimed pool pod did not take its key", "pod", got.Name, "err", err)
			_ = e.deletePodUID(context.WithoutCancel(ctx), got.Name, got.UID)
			if ctx.Err() != nil {
				return nil, unavailable("hand the key to a pooled sandbox pod", err)
			}
			continue
		}
		return got, nil
	}
	return nil, nil
}

// handKey writes key into the pooled pod's FIFO, where its shell waits
// for it to start sandboxd. The exec's script reads the key from its
// stdin first and refuses an empty one (an exec's stdin can arrive empty
// when the stream closes early, and an empty key would end the pod's
// shell): nothing reached the FIFO then, so the hand-off is tried again.
// It waits for the FIFO (a claim as the container starts) and, after
// writing, for the pod's shell to remove it, so a nil error means the
// key was read.
func (e *Executor) handKey(ctx context.Context, pod, key string) error {
	script := `IFS= read -r k && [ -n "$k" ] || exit 5; f=` + keyFIFO + `; i=0; ` +
		`while [ ! -p "$f" ]; do i=$((i+1)); [ $i -gt 200 ] && exit 3; sleep 0.05; done; ` +
		`printf '%s\n' "$k" >"$f" || exit 4; i=0; while [ -e "$f" ]; do i=$((i+1)); [ $i -gt 200 ] && exit 6; sleep 0.02; done`
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = e.podExec(hctx, pod, []string{"/bin/sh", "-c", script}, strings.NewReader(key+"\n"), nil)
		cancel()
		var code utilexec.ExitError
		if err == nil || !errors.As(err, &code) || code.ExitStatus() != 5 || ctx.Err() != nil {
			return err
		}
	}
	return err
}
