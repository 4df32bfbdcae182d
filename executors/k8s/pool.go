package k8s

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/aio"
)

// The warm pool. A ReplicaSet (one per namespace, shared by every replica
// of the gateway) keeps pool.size idle sandbox pods running. They belong
// to no session: sandboxd in them serves from the pod's start but awaits
// its key (--await-key) and refuses every request until it has one. A
// claim takes one pod by updating its labels (state idle → claimed, the
// session's labels) and dropping its owner reference, in one update
// carrying the resourceVersion the claimant read: of two claims of one
// pod, the apiserver accepts one and answers the other with a conflict
// (optimistic concurrency), so a pod never serves a second session. The
// claimed pod no longer matches the ReplicaSet's selector, so the
// ReplicaSet controller creates its replacement; nothing ever sets a
// pod's state back to idle, so a claimed pod never returns to the pool.
// The claimant then hands the key to the pod's sandboxd (POST /v1/claim)
// through the port-forward that then carries the session's runs: the key
// is in no spec, argument or log, and sandboxd takes one key only. The
// claim costs a few API calls and one request, not a process start.
//
// A session fits a pooled pod when it runs as the pool's uid
// (sandbox_uid) with the default layout and needs no more memory than
// the pool's pods have; others get a pod of their own, as when the pool
// is empty. The uid is not a formality: on a node without user
// namespaces (runc, hostUsers unset) the kernel counts a uid's processes
// across every pod of the node, and sandboxd's per-run process limit is
// an RLIMIT_NPROC. A pooled pod serving a session of another uid would
// put every such session under one count, where one could starve the
// others; the executor conformance suite's process-limit case fails on
// pooled pods for that reason (pool pods and their sessions already share
// the pool's uid). The way out is a uid range per pod (user namespaces,
// which need runc 1.2; this host has Debian's 1.1.5) or a uid per pool
// slot; until then gateway sessions, which each have a uid of their own,
// get pods made for them.
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
)

// poolTemplate is the pool pods' template, labelled with its own hash.
// Their sandboxd serves from the start, awaiting its key (a claim).
func (e *Executor) poolTemplate() corev1.PodTemplateSpec {
	argv := append([]string{"/usr/local/bin/sandboxd"}, serveArgs(executors.Layout{})...)
	spec := e.lockedSpec(e.cfg.SandboxUID, e.cfg.SandboxGID, e.cfg.PodMemoryMB, "", append(argv, "--await-key"), nil)
	spec.RestartPolicy = corev1.RestartPolicyAlways
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
