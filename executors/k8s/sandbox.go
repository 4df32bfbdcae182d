package k8s

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/aio"
)

// ErrSandboxLost is wrapped by the error of the first request after the
// session's pod was deleted, evicted or died: its state (workspace,
// processes) is gone with it. The next request starts a new, empty pod;
// a lost sandbox is said once and never silently replaced.
var ErrSandboxLost = errors.New("the session's sandbox was lost")

// sandbox is one session's pod as this gateway replica knows it.
type sandbox struct {
	e       *Executor
	session string
	name    string
	ready   chan struct{} // closed when start ended; err says how
	err     error

	uid    types.UID // the pod's
	key    string
	client *aio.Client
	// adopted: the pod was placed by another replica (or process); its
	// workspace is the truth, so the first run pulls it before anything
	// is pushed.
	adopted bool

	runMu sync.Mutex // runs of a session take turns: the workspace copy is per run
	// connMu orders reach's replacing of tun and client (under runMu)
	// with close, which the watch calls from its own goroutine.
	connMu sync.Mutex
	tun    *tunnel
	snap   string // the host workspace as last synced (workspace.go)
	// podFP is the pod's workspace fingerprint as last synced ("" when
	// unknown), and fresh says the pod's workspace is still the empty
	// one it started with (workspace.go).
	podFP string
	fresh bool
}

// sandboxFor returns the session's running sandbox, creating (or, when
// another replica created it, adopting) its pod.
func (e *Executor) sandboxFor(ctx context.Context, spec executors.Spec) (*sandbox, error) {
	e.mu.Lock()
	if l, ok := e.lost[spec.SessionID]; ok {
		delete(e.lost, spec.SessionID)
		e.mu.Unlock()
		e.unbindLost(context.WithoutCancel(ctx), spec.SessionID, l.uid)
		return nil, lostError(l.why)
	}
	sb, found := e.sandboxes[spec.SessionID]
	if !found {
		sb = &sandbox{e: e, session: spec.SessionID, ready: make(chan struct{})}
		e.sandboxes[spec.SessionID] = sb
	}
	e.mu.Unlock()
	if !found {
		// The creation outlives a cancelled first request: other requests
		// of the session may be waiting for it.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.ReadyTimeout)
		sb.err = sb.start(cctx, spec)
		cancel()
		if sb.err != nil {
			e.mu.Lock()
			if e.sandboxes[spec.SessionID] == sb {
				delete(e.sandboxes, spec.SessionID)
			}
			e.mu.Unlock()
		}
		close(sb.ready)
	}
	select {
	case <-sb.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return sb, sb.err
}

func lostError(why string) error {
	return unavailable("sandbox lost", fmt.Errorf("%w: %s; its workspace and processes are gone", ErrSandboxLost, why))
}

// podLost is the watch's report that a pod is gone for good.
func (e *Executor) podLost(sessionID string, uid types.UID, why string) {
	if sessionID == "" {
		return
	}
	e.mu.Lock()
	sb := e.sandboxes[sessionID]
	if sb == nil || !sb.started() || sb.uid != uid { // started first: it orders the read of uid
		e.mu.Unlock()
		return
	}
	delete(e.sandboxes, sessionID)
	e.lost[sessionID] = lostPod{why: why, uid: uid}
	e.mu.Unlock()
	e.cfg.Logger.Warn("k8s: a session's sandbox pod is gone", "session_id", sessionID, "pod", sb.name, "reason", why)
	sb.close()
}

func (sb *sandbox) started() bool {
	select {
	case <-sb.ready:
		return sb.err == nil
	default:
		return false
	}
}

// start binds the session to a pod (binding.go: adopted, claimed from
// the pool, or created), waits on the watch until sandboxd's container
// runs, and opens the tunnel to it.
func (sb *sandbox) start(ctx context.Context, spec executors.Spec) error {
	e := sb.e
	began := time.Now()
	pl, err := e.bind(ctx, spec)
	if err != nil {
		return err
	}
	pod := pl.pod
	sb.name, sb.uid, sb.key, sb.adopted, sb.fresh = pod.Name, pod.UID, pl.key, pl.adopted, !pl.adopted
	cn := pl.claimed // a pooled pod's sandboxd answered its claim: it runs
	if cn == nil {
		if st, why := e.pods.waitReady(ctx, sb.name, pod.UID); st != podReady {
			e.unbindLost(context.WithoutCancel(ctx), sb.session, pod.UID)
			return unavailable("sandbox pod did not start", errors.New(why))
		}
		if cn, err = sb.connect(ctx); err != nil {
			return err
		}
	}
	sb.tun, sb.client = cn.tun, cn.client
	e.cfg.Logger.Info("k8s: sandbox pod ready", "session_id", sb.session, "pod", sb.name,
		"pooled", pod.Labels[labelPool] != "", "adopted", pl.adopted, "took_ms", time.Since(began).Milliseconds())
	return nil
}

// conn is an open way to a sandbox's sandboxd: the tunnel, and a client
// that goes through it.
type conn struct {
	tun    *tunnel
	client *aio.Client
}

func (cn *conn) close() {
	cn.tun.close()
	cn.client.Close()
}

// dial opens a tunnel to pod name (uid) and runs probe (aio.WaitReady, or
// claim for a pooled pod) through it. client-go ends a port-forward when
// the pod refuses one of its connections, which a probe sent before
// sandboxd listens is: a tunnel that ends while sandboxd is not ready yet
// is opened again, until ctx ends (CI 12: one probe too early, then 90 s
// of a dead local port).
func (e *Executor) dial(ctx context.Context, name string, uid types.UID, key string, probe func(context.Context, *aio.Client) error) (*conn, error) {
	for {
		t, err := e.openTunnel(ctx, name)
		if err != nil {
			return nil, err
		}
		c := aio.NewHTTPClient(t.url(), key)
		wctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-t.done:
				cancel()
			case <-wctx.Done():
			}
		}()
		err = probe(wctx, c)
		cancel()
		if err == nil {
			return &conn{tun: t, client: c}, nil
		}
		died := t.dead()
		t.close()
		c.Close()
		if !died || ctx.Err() != nil {
			return nil, err
		}
		if p, ok := e.pods.get(name); ok && p.UID == uid {
			if st, why := stateOf(p); st == podGone {
				return nil, unavailable("sandbox pod did not start", errors.New(why))
			}
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// connect opens a new way to the session's sandboxd, once it answers.
func (sb *sandbox) connect(ctx context.Context) (*conn, error) {
	return sb.e.dial(ctx, sb.name, sb.uid, sb.key, aio.WaitReady)
}

// run runs spec in the pod: the host workspace in, the run, the pod's
// workspace back out.
func (sb *sandbox) run(ctx context.Context, spec executors.Spec) (executors.Result, error) {
	sb.runMu.Lock()
	defer sb.runMu.Unlock()
	if err := sb.reach(ctx); err != nil {
		return executors.Result{}, sb.explain(err)
	}
	sync := sb.push
	if sb.adopted {
		// Another replica's pod: its workspace is the session's.
		sync = func(ctx context.Context, dir string) error { return sb.pull(ctx, dir, spec.UID, spec.GID) }
	}
	if err := sync(ctx, spec.WorkspaceDir); err != nil {
		return executors.Result{}, sb.explain(err)
	}
	sb.adopted = false
	res, err := aio.RunRemote(ctx, sb.client, spec, aio.DefaultClientMargin)
	if err != nil {
		return res, sb.explain(err)
	}
	if err := sb.pullChanged(ctx, spec.WorkspaceDir, spec.UID, spec.GID); err != nil {
		return executors.Result{}, sb.explain(err)
	}
	return res, nil
}

// reachTimeout bounds how long a run waits for the session's sandbox to
// answer before the run is sent: a kubelet, container runtime or
// apiserver that stopped answering makes the request fail with a clear
// 503 (sandbox pod unreachable) instead of hanging for the run's timeout.
const reachTimeout = 10 * time.Second

// reach makes sure sandboxd answers through the tunnel: a tunnel that
// ended (the apiserver or kubelet restarted) is opened anew to the same
// pod, which still holds the session's state.
func (sb *sandbox) reach(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, reachTimeout)
	defer cancel()
	if sb.tun != nil && !sb.tun.dead() {
		if _, err := sb.client.Sandbox(rctx); err == nil {
			return nil
		} else if ctx.Err() != nil || rctx.Err() != nil {
			// %v: the request did not time out, the sandbox did not answer.
			return unavailable("sandbox pod unreachable", fmt.Errorf("no answer in %v: %v", reachTimeout, err))
		}
	}
	if sb.tun != nil {
		sb.tun.close()
	}
	cn, err := sb.connect(rctx)
	if err != nil {
		return unavailable("sandbox pod unreachable", err)
	}
	sb.client.Close()
	sb.connMu.Lock()
	sb.tun, sb.client = cn.tun, cn.client
	sb.connMu.Unlock()
	return nil
}

// explain turns a failure into "lost" when the pod is gone: the watch
// may not have delivered the deletion yet.
func (sb *sandbox) explain(err error) error {
	p, ok := sb.e.pods.get(sb.name)
	why := "the pod was deleted"
	if ok && p.UID == sb.uid {
		var st podState
		if st, why = stateOf(p); st != podGone {
			if errors.Is(err, executors.ErrUnavailable) {
				return err
			}
			return unavailable("sandbox pod unreachable", err)
		}
	}
	// Told now, so not again on the next request.
	sb.e.forget(sb)
	sb.e.unbindLost(context.Background(), sb.session, sb.uid)
	return lostError(why)
}

// forget drops sb from the sessions (and any pending loss report of it).
func (e *Executor) forget(sb *sandbox) {
	e.mu.Lock()
	if e.sandboxes[sb.session] == sb {
		delete(e.sandboxes, sb.session)
	}
	delete(e.lost, sb.session)
	e.mu.Unlock()
	sb.close()
}

func (sb *sandbox) close() {
	sb.connMu.Lock()
	defer sb.connMu.Unlock()
	if sb.tun != nil {
		sb.tun.close()
	}
	if sb.client != nil {
		sb.client.Close()
	}
}

// reap deletes every sandbox pod (and key Secret) matching selector: a
// gateway's shutdown, or orphans found by label.
func (e *Executor) reap(ctx context.Context, selector string) error {
	grace := int64(1)
	sel := labelManagedBy + "=" + managedBy + "," + labelComponent + "=" + componentSbx + "," + selector
	err := e.cs.CoreV1().Pods(e.cfg.Namespace).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &grace},
		metav1.ListOptions{LabelSelector: sel})
	err2 := e.cs.CoreV1().Secrets(e.cfg.Namespace).DeleteCollection(ctx, metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: sel})
	return errors.Join(err, err2)
}

func newKey() (string, error) {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("k8s: key: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}
