package k8s

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// podWatch turns the informer's watch events into what the tier needs:
// waking a creation waiting for its pod to run, and marking a session's
// sandbox lost when its pod is deleted, evicted or dies. Nothing polls:
// the informer keeps one watch open and resumes it (from its last
// resourceVersion, or by relisting) when the apiserver restarts.
type podWatch struct {
	e      *Executor
	lister cache.Indexer

	mu      sync.Mutex
	waiters map[string][]chan struct{} // by pod name: woken on any change
}

func newPodWatch(e *Executor) *podWatch {
	return &podWatch{e: e, waiters: map[string][]chan struct{}{}}
}

func (w *podWatch) handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.changed(obj, false) },
		UpdateFunc: func(_, obj any) { w.changed(obj, false) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			w.changed(obj, true)
		},
	}
}

func (w *podWatch) changed(obj any, deleted bool) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	st, why := stateOf(p)
	if deleted {
		st, why = podGone, "the pod was deleted"
	}
	if st == podGone {
		w.e.podLost(p.Annotations[annSession], p.UID, why)
	}
	w.mu.Lock()
	ws := w.waiters[p.Name]
	delete(w.waiters, p.Name)
	w.mu.Unlock()
	for _, c := range ws {
		close(c)
	}
}

// get returns the watch's current view of the pod named name.
func (w *podWatch) get(name string) (*corev1.Pod, bool) {
	obj, ok, err := w.lister.GetByKey(w.e.cfg.Namespace + "/" + name)
	if err != nil || !ok {
		return nil, false
	}
	p, ok := obj.(*corev1.Pod)
	return p, ok
}

// waitReady blocks until the pod uid (named name) runs sandboxd, is gone,
// or ctx ends. The waiter is registered before the state is read, so no
// event between the two is missed.
func (w *podWatch) waitReady(ctx context.Context, name string, uid types.UID) (podState, string) {
	for {
		ch := make(chan struct{})
		w.mu.Lock()
		w.waiters[name] = append(w.waiters[name], ch)
		w.mu.Unlock()
		if p, ok := w.get(name); ok && p.UID == uid {
			if st, why := stateOf(p); st != podPending {
				return st, why
			}
		}
		select {
		case <-ctx.Done():
			return podPending, ctx.Err().Error()
		case <-ch:
		}
	}
}
