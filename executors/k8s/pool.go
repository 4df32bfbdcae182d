package k8s

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/aio"
)

// The warm pool. ReplicaSets (one per slot, pool.size of them, shared by
// every replica of the gateway) keep pool.size idle sandbox pods running,
// each as a uid of its own (ensurePool). They belong to no session:
// sandboxd in them serves from the pod's start but awaits its key
// (--await-key) and refuses every request until it has one. A claim
// takes one pod by updating its labels (state idle → claimed, the
// session's labels) and dropping its owner reference, in one update
// carrying the resourceVersion the claimant read: of two claims of one
// pod, the apiserver accepts one and answers the other with a conflict
// (optimistic concurrency), so a pod never serves a second session. The
// claimed pod no longer matches its ReplicaSet's selector, so the
// ReplicaSet controller creates its replacement, as a new uid once the
// claimant rotated the slot's (rotateSlot); nothing ever sets a pod's
// state back to idle, so a claimed pod never returns to the pool. The
// claimant then hands the key to the pod's sandboxd (POST /v1/claim)
// through the port-forward that then carries the session's runs: the key
// is in no spec, argument or log, and sandboxd takes one key only. The
// claim costs a few API calls and one request, not a process start.
//
// A session fits a pooled pod when it uses the default layout and needs
// no more memory than the pool's pods have; others get a pod of their
// own, as when the pool is empty. Its uid is not asked for: every pool
// pod runs as a uid of its own (ensurePool), which stands for the
// session's in its pod, as a session's own uid does in a pod made for it
// (the gateway's copy of the workspace stays the session's uid's).
//
// Pool pods have restartPolicy Always (a ReplicaSet requires it); a
// sandbox container that restarted after the claim counts as lost
// (stateOf), as a dead one does on a pod of its own.
const (
	labelPool      = "sandgate.dev/pool"
	labelPoolState = "sandgate.dev/pool-state"
	labelTemplate  = "sandgate.dev/template"
	labelSlot      = "sandgate.dev/pool-slot"
	annClaimedAt   = "sandgate.dev/claimed-at"
	poolIdle       = "idle"
	poolClaimed    = "claimed"
)

// poolTemplate is the template of pool slot slot's pods, running as
// uid: labelled with a hash of everything but the uid (and the slot),
// which all slots share.
func (e *Executor) poolTemplate(slot int, uid int64) corev1.PodTemplateSpec {
	argv := append([]string{"/usr/local/bin/sandboxd"}, serveArgs(executors.Layout{})...)
	spec := e.lockedSpec(e.cfg.SandboxUID, e.cfg.SandboxGID, e.cfg.PodMemoryMB, "", append(argv, "--await-key"), nil)
	spec.RestartPolicy = corev1.RestartPolicyAlways
	raw, _ := json.Marshal(spec)
	sum := sha256.Sum256(append([]byte(poolTemplateVersion), raw...))
	spec.SecurityContext.RunAsUser, spec.SecurityContext.RunAsGroup = &uid, &uid
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{
			labelManagedBy: managedBy, labelComponent: componentSbx,
			labelPool: e.cfg.Pool.Name, labelPoolState: poolIdle, labelTemplate: hex.EncodeToString(sum[:])[:16],
			labelSlot: strconv.Itoa(slot),
		}},
		Spec: spec,
	}
}

// poolTemplateVersion is part of the template's hash: pods of a pool from
// before slots (one uid for all) are of an older template, so reaped.
const poolTemplateVersion = "slots/1\n"

// Pool uids: a pod's own, drawn at random from a range far from the
// sessions' (workspace.DefaultUIDBase) and from the ids distributions
// hand out, and none that a pod in use runs as, so that no two pods share
// a uid's process count. The sandbox image names each `sandbox`
// (scripts/k8s-images.sh), as the runtime image names the executors'
// default uids.
const (
	poolUIDBase  = 1_000_000_000
	poolUIDCount = 8192
)

// freePoolUID draws a pool uid that no pod of the tier runs as, as far
// as the watch knows (a few tries; past them, any: the range is far
// larger than a namespace's pods).
func (e *Executor) freePoolUID() int64 {
	inUse := e.uidsInUse(false)
	uid := poolUIDBase + rand.Int64N(poolUIDCount)
	for try := 0; try < 32 && inUse[uid]; try++ {
		uid = poolUIDBase + rand.Int64N(poolUIDCount)
	}
	return uid
}

// uidsInUse are the uids the tier's pods run as: every pod's, or with
// busyOnly those of pods that are not idle in the pool.
func (e *Executor) uidsInUse(busyOnly bool) map[int64]bool {
	out := map[int64]bool{}
	if e.pods == nil {
		return out
	}
	for _, obj := range e.pods.lister.List() {
		if p, ok := obj.(*corev1.Pod); ok && (!busyOnly || p.Labels[labelPoolState] != poolIdle) {
			out[podUID(p)] = true
		}
	}
	return out
}

// podUID is the uid pod p runs as (0 when its spec does not say).
func podUID(p *corev1.Pod) int64 { return runAsUser(&p.Spec) }

func runAsUser(spec *corev1.PodSpec) int64 {
	if sc := spec.SecurityContext; sc != nil && sc.RunAsUser != nil {
		return *sc.RunAsUser
	}
	return 0
}

func (e *Executor) slotName(slot int) string { return e.cfg.Pool.Name + "-" + strconv.Itoa(slot) }

// ensurePool creates or updates the pool's slots, then reaps what a
// pool left behind: idle pods of an older template (a ReplicaSet does not
// replace pods when its template changes), idle pods whose sandbox
// restarted, and claims that were never bound (their claimant died
// between the claim and the binding).
//
// A slot is a ReplicaSet of one pod whose template carries a uid of the
// slot's own, drawn anew at each claim (rotateSlot): every pool pod runs
// as a uid no other pod of the node has. One ReplicaSet for the whole
// pool would give all its pods one uid, and on a node without user
// namespaces the kernel counts a uid's processes across pods, which
// sandboxd's per-run process limit (RLIMIT_NPROC) relies on.
func (e *Executor) ensurePool(ctx context.Context) error {
	if e.cfg.Pool.Size == 0 {
		return nil
	}
	e.poolHash = e.poolTemplate(0, 0).Labels[labelTemplate]
	rsc := e.cs.AppsV1().ReplicaSets(e.cfg.Namespace)
	one := int32(1)
	for slot := range e.cfg.Pool.Size {
		rs := &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Name: e.slotName(slot), Namespace: e.cfg.Namespace,
				Labels: map[string]string{labelManagedBy: managedBy, labelPool: e.cfg.Pool.Name, labelSlot: strconv.Itoa(slot)}},
			Spec: appsv1.ReplicaSetSpec{
				Replicas: &one,
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{
					labelPool: e.cfg.Pool.Name, labelSlot: strconv.Itoa(slot), labelPoolState: poolIdle}},
				Template: e.poolTemplate(slot, e.freePoolUID()),
			},
		}
		_, err := rsc.Create(ctx, rs, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			err = e.setSlot(ctx, slot, func(cur int64) (int64, bool) {
				if cur >= poolUIDBase && cur < poolUIDBase+poolUIDCount {
					return cur, true // the slot keeps its uid
				}
				return e.freePoolUID(), true
			})
		}
		if err != nil {
			return fmt.Errorf("k8s: pool slot %d: %w", slot, err)
		}
	}
	if err := e.dropSlots(ctx); err != nil {
		return err
	}
	return e.reapPool(ctx)
}

// dropSlots deletes the pool's ReplicaSets beyond its size, and the one
// ReplicaSet of a pool from before slots; their idle pods go with them.
func (e *Executor) dropSlots(ctx context.Context) error {
	rsc := e.cs.AppsV1().ReplicaSets(e.cfg.Namespace)
	l, err := rsc.List(ctx, metav1.ListOptions{LabelSelector: labelPool + "=" + e.cfg.Pool.Name})
	if err != nil {
		return fmt.Errorf("k8s: list the pool's slots: %w", err)
	}
	var errs []error
	for _, rs := range l.Items {
		slot, err := strconv.Atoi(rs.Labels[labelSlot])
		if err == nil && slot < e.cfg.Pool.Size && rs.Name == e.slotName(slot) {
			continue
		}
		if err := rsc.Delete(ctx, rs.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// setSlot rewrites slot's ReplicaSet with one replica and the current
// template, as the uid pick chooses from its template's present one;
// pick's false leaves the ReplicaSet as it is.
func (e *Executor) setSlot(ctx context.Context, slot int, pick func(cur int64) (int64, bool)) error {
	rsc := e.cs.AppsV1().ReplicaSets(e.cfg.Namespace)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := rsc.Get(ctx, e.slotName(slot), metav1.GetOptions{})
		if err != nil {
			return err
		}
		uid, ok := pick(runAsUser(&cur.Spec.Template.Spec))
		if !ok {
			return nil
		}
		one := int32(1)
		cur.Spec.Replicas, cur.Spec.Template = &one, e.poolTemplate(slot, uid)
		_, err = rsc.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

// rotateSlot draws a new uid for the slot claimed's pod came from, so
// that the pod replacing it runs as a uid of its own, and deletes an
// idle replacement made (by the controller, faster) from the old
// template: its uid is claimed's. Off the claim's path; until it is
// done, idlePods passes over a pod of a uid in use.
func (e *Executor) rotateSlot(ctx context.Context, claimed *corev1.Pod) {
	slot, uid := claimed.Labels[labelSlot], podUID(claimed)
	n, err := strconv.Atoi(slot)
	if err != nil {
		return
	}
	err = e.setSlot(ctx, n, func(cur int64) (int64, bool) {
		return e.freePoolUID(), cur == uid // else rotated already
	})
	if err != nil && !apierrors.IsNotFound(err) {
		e.cfg.Logger.Warn("k8s: rotate a pool slot's uid", "slot", slot, "err", err)
		return
	}
	pods, err := e.cs.CoreV1().Pods(e.cfg.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labelPool + "=" + e.cfg.Pool.Name + "," + labelSlot + "=" + slot + "," + labelPoolState + "=" + poolIdle})
	if err != nil {
		return
	}
	for i := range pods.Items {
		if p := &pods.Items[i]; podUID(p) == uid {
			_ = e.deletePodUID(ctx, p.Name, p.UID)
		}
	}
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
	return e.cfg.Pool.Size > 0 && spec.Layout.Root == "" && spec.Layout.Dir() == workspacePath &&
		spec.Limits.MemoryMB+256 <= e.cfg.PodMemoryMB
}

// idlePods lists the pool's ready, unclaimed pods of the current
// template, as the watch sees them, in random order (claimants on other
// replicas start elsewhere in the list), but for a pod whose uid a pod
// in use has (a replacement made before its slot's uid was rotated).
func (e *Executor) idlePods() []*corev1.Pod {
	var out []*corev1.Pod
	inUse := e.uidsInUse(true)
	for _, obj := range e.pods.lister.List() {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.Labels[labelPool] != e.cfg.Pool.Name || p.Labels[labelPoolState] != poolIdle ||
			p.Labels[labelTemplate] != e.poolHash || restarts(p) > 0 || inUse[podUID(p)] {
			continue
		}
		if st, _ := stateOf(p); st == podReady {
			out = append(out, p)
		}
	}
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// claimPooled claims an idle pooled pod for the session and hands its
// sandboxd key; nil with no error when none fits or none is idle. The
// tunnel the key went through is the sandbox's from then on.
func (e *Executor) claimPooled(ctx context.Context, spec executors.Spec, key string) (*corev1.Pod, *conn, error) {
	if !e.fitsPool(spec) {
		return nil, nil, nil
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
			return nil, nil, unavailable("claim a pooled sandbox pod", err)
		}
		cctx, cancel := context.WithTimeout(ctx, claimTimeout)
		cn, err := e.dial(cctx, got.Name, got.UID, key, claim)
		cancel()
		if err != nil {
			// That pod is of no use to anyone now; another (or a new
			// one) may be.
			e.cfg.Logger.Warn("k8s: a claimed pool pod did not take its key", "pod", got.Name, "err", err)
			_ = e.deletePodUID(context.WithoutCancel(ctx), got.Name, got.UID)
			if ctx.Err() != nil {
				return nil, nil, unavailable("hand the key to a pooled sandbox pod", err)
			}
			continue
		}
		go func() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
			defer cancel()
			e.rotateSlot(rctx, got)
		}()
		return got, cn, nil
	}
	return nil, nil, nil
}

// claimTimeout bounds one pooled pod's claim (the tunnel and the key's
// request): an idle pod that does not answer is left for the next one,
// or a pod made for the session, instead of holding the request until
// ready_timeout.
const claimTimeout = 10 * time.Second

// claim is dial's probe for a pooled pod: its sandboxd takes the key. A
// sandboxd that already has another key (409) is never retried: the pod
// is someone else's.
func claim(ctx context.Context, c *aio.Client) error {
	var last error
	for delay := 2 * time.Millisecond; ; delay = min(delay*2, 50*time.Millisecond) {
		err := c.Claim(ctx)
		var apiErr *aio.APIError
		if err == nil || errors.As(err, &apiErr) {
			return err
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last attempt: %w)", ctx.Err(), last)
		case <-time.After(delay):
		}
	}
}
