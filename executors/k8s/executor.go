package k8s

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/aio"
)

// Executor places each session's sandbox in a pod of its own. It
// implements executors.Executor, executors.Closer and
// executors.SessionReleaser. It is safe for concurrent use.
type Executor struct {
	cfg      Config
	rc       *rest.Config
	cs       kubernetes.Interface
	prologue executors.Prologue
	pods     *podWatch
	stop     chan struct{}
	closed   atomic.Bool

	mu        sync.Mutex
	sandboxes map[string]*sandbox // by session id
	// lost holds the sessions whose pod was lost and whose next
	// request has not been told yet (see lostError).
	lost map[string]lostPod
	// poolHash is the pool template's hash (pool.go).
	poolHash string
}

// lostPod is why a session's pod (uid) was lost.
type lostPod struct {
	why string
	uid types.UID
}

// Interface guards.
var (
	_ executors.Executor        = (*Executor)(nil)
	_ executors.Closer          = (*Executor)(nil)
	_ executors.SessionReleaser = (*Executor)(nil)
)

// New connects to the cluster, makes sure the sandbox namespace enforces
// Pod Security "restricted" and carries the isolation NetworkPolicy, and
// starts the watch of this tier's pods. A cluster that does not answer
// is an error here: the gateway's config named it.
func New(ctx context.Context, cfg Config) (*Executor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("k8s: config: %w", err)
	}
	cfg = cfg.withDefaults()
	rc, err := restConfig(cfg.Kubeconfig)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("k8s: client: %w", err)
	}
	e := &Executor{cfg: cfg, rc: rc, cs: cs, stop: make(chan struct{}),
		sandboxes: map[string]*sandbox{}, lost: map[string]lostPod{},
		prologue: executors.Prologue{Kind: Kind, UID: cfg.SandboxUID, GID: cfg.SandboxGID,
			Timeout: cfg.DefaultTimeout, Limits: cfg.Limits}}
	if err := ensureNamespace(ctx, cs, e); err != nil {
		return nil, err
	}
	e.pods = newPodWatch(e)
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = labelManagedBy + "=" + managedBy + "," + labelComponent + "=" + componentSbx
		}))
	inf := factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(e.pods.handler()); err != nil {
		return nil, fmt.Errorf("k8s: pod watch: %w", err)
	}
	factory.Start(e.stop)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if !cache.WaitForCacheSync(sctx.Done(), inf.HasSynced) {
		close(e.stop)
		return nil, fmt.Errorf("k8s: pod watch did not sync: %w", sctx.Err())
	}
	e.pods.lister = inf.GetIndexer()
	if err := e.ensurePool(ctx); err != nil {
		close(e.stop)
		return nil, err
	}
	cfg.Logger.Info("kubernetes executor ready", "namespace", cfg.Namespace, "image", cfg.Image,
		"runtime_class", cfg.RuntimeClassName, "instance", cfg.Instance)
	return e, nil
}

// Kind implements executors.Executor.
func (e *Executor) Kind() executors.Kind { return Kind }

// Available implements executors.Executor: the apiserver answers and the
// pod watch is live.
func (e *Executor) Available(ctx context.Context) error {
	if e.closed.Load() {
		return unavailable("executor closed", nil)
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := e.cs.CoreV1().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error(); err != nil {
		return unavailable("the apiserver does not answer", err)
	}
	return nil
}

// Capabilities implements executors.Executor. sandboxd in the pod
// enforces the per-run obligations as in the aio tier (rlimits, the
// tree kill; --contained: the pod's PID namespace holds only the
// session's processes and the pause reaper); the pod has no network but
// its loopback (isolated pod network and the NetworkPolicy), and its root
// is the image's. Network grants through the egress proxy are not bridged
// into pods yet, so network_grant is false and such runs are refused.
// Stateful kernels are not offered on this tier yet.
func (e *Executor) Capabilities() executors.Capabilities {
	iso := "kubernetes pod"
	if e.cfg.RuntimeClassName != "" {
		iso += ", runtimeClass " + e.cfg.RuntimeClassName
	}
	return executors.Capabilities{
		NetworkIsolation:    true,
		MemoryLimit:         true,
		ProcessLimit:        true,
		KillDetached:        true,
		FilesystemIsolation: true,
		RequiresSession:     true,
		SessionSandbox:      true, // one pod for the session's life
		RootFS:              "image:" + e.cfg.Image,
		Isolation:           iso,
	}
}

// Execute implements executors.Executor: the run goes to the session's
// pod (created on the session's first run), with the host workspace
// copied in before and back after (workspace.go).
func (e *Executor) Execute(ctx context.Context, spec executors.Spec) (executors.Result, error) {
	spec, err := e.prologue.Resolve(spec)
	if err != nil {
		return executors.Result{}, err
	}
	if err := e.Capabilities().Check(Kind, spec); err != nil {
		return executors.Result{}, err
	}
	if err := executors.CheckEgress(Kind, e.Capabilities(), spec); err != nil {
		return executors.Result{}, err
	}
	if spec.SessionID == "" {
		return executors.Result{}, errors.New("k8s: a run needs a session id: the pod belongs to the session")
	}
	if e.closed.Load() {
		return executors.Result{}, unavailable("executor closed", nil)
	}
	sb, err := e.sandboxFor(ctx, spec)
	if err != nil {
		return executors.Result{}, err
	}
	return sb.run(ctx, spec)
}

// ReleaseSession implements executors.SessionReleaser: the session's pod
// and its binding are deleted (found by the session's label, whichever
// replica placed them).
func (e *Executor) ReleaseSession(ctx context.Context, sessionID string) error {
	e.mu.Lock()
	sb := e.sandboxes[sessionID]
	delete(e.sandboxes, sessionID)
	delete(e.lost, sessionID)
	e.mu.Unlock()
	if sb != nil {
		sb.close()
	}
	return e.reap(ctx, labelSession+"="+sessionHash(sessionID))
}

// Close implements executors.Closer: every pod this gateway instance
// created is deleted (by label), and the watch stops.
func (e *Executor) Close(ctx context.Context) error {
	if e.closed.Swap(true) {
		return nil
	}
	e.mu.Lock()
	sbs := e.sandboxes
	e.sandboxes = map[string]*sandbox{}
	e.mu.Unlock()
	for _, sb := range sbs {
		sb.close()
	}
	err := e.reap(ctx, labelInstance+"="+e.cfg.Instance)
	close(e.stop)
	return err
}

// unavailable wraps executors.ErrUnavailable with the reason.
func unavailable(reason string, err error) error {
	return &executors.UnavailableError{Kind: Kind, Reason: reason, Err: err}
}

// ensure aio stays linked for RunRemote (sandbox.go).
var _ = aio.RunRemote
