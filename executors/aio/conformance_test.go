package aio

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/testcontainers/testcontainers-go"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/executortest"
	"github.com/sandgate/sandgate/executors/internal/etcmount"
	"github.com/sandgate/sandgate/executors/internal/wsmount"
)

// TestConformancePool runs the conformance suite against the executor as
// the gateway wires it: the pool and its local Docker backend. Every
// sub-test uses a new session, so each run binds an instance started ahead
// (or a fresh one) and the pool evicts idle ones as it fills.
func TestConformancePool(t *testing.T) {
	testImage(t)
	var (
		once sync.Once
		e    *Executor
	)
	executortest.Run(t, executortest.Harness{
		New: func(st *testing.T) executors.Executor {
			once.Do(func() {
				e = newTestExecutor(t, func(c *PoolConfig) { c.MinInstances, c.MaxInstances = 2, 4 })
			})
			return e
		},
		ProcessesVisible: true,
		DataStack:        true, // the image is built on the runtime root (images/)
		FingerprintExceptions: map[string]string{
			"env SANDBOXD_RUN": sandboxdMarkerReason,
		},
	})
}

// sandboxdMarkerReason: sandboxd finds the processes of one run among the
// others of the same uid in a shared container (escapes by setsid or a
// double fork included) by a variable they inherit; no cgroup or PID
// namespace is available to it unprivileged.
const sandboxdMarkerReason = "sandboxd's per-run marker variable (proctree.go)"

// TestConformanceSandboxd runs the suite against one sandboxd container
// that testcontainers-go starts as a fixture (hardened as the pool's, but
// with sandboxd as its main process): the client and sandboxd alone,
// without the pool. Each run's workspace is bind-mounted onto the
// fixture's propagated /workspace for the duration of the run.
func TestConformanceSandboxd(t *testing.T) {
	img := testImage(t)
	fx := startFixture(t, img)
	executortest.Run(t, executortest.Harness{
		New:              func(*testing.T) executors.Executor { return fx },
		Serial:           true, // one /workspace mount point: runs take turns
		ProcessesVisible: true,
		NoLayouts:        "the fixture is one sandbox for every run: its HOME is fixed (TestConformancePool checks layouts)",
		DataStack:        true, // the image is built on the runtime root (images/)
		FingerprintExceptions: map[string]string{
			"env SANDBOXD_RUN": sandboxdMarkerReason,
			// The fixture's uid is one of its own (see startFixture), as a
			// session's is through the gateway: no passwd entry names it.
			"user ": "the fixture's own uid has no passwd name", "whoami ": "the fixture's own uid has no passwd name",
			"shell ": "bash's SHELL falls back to /bin/sh for a uid without a passwd entry", "- group": "the fixture's own uid has no group name",
			"-": "id -un prints nothing for a uid without a name",
		},
	})
}

// fixture is a single-sandbox executor over a testcontainers container.
type fixture struct {
	c      *Client
	target string // host directory propagated to the container's /workspace
	uid    int
	img    string
	mu     sync.Mutex // one workspace mounted at a time
}

func startFixture(t *testing.T, img string) *fixture {
	t.Helper()
	state := newStateDir(t)
	if _, err := ensureSharedMount(state); err != nil {
		t.Fatal(err)
	}
	ws, run, etc := filepath.Join(state, "ws"), filepath.Join(state, "run"), filepath.Join(state, stateEtc)
	for _, d := range []string{ws, run, etc} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := executors.WriteNetworkFiles(etc); err != nil {
		t.Fatal(err)
	}
	// A uid of its own: RLIMIT_NPROC, which enforces the process
	// obligation, counts every task of the uid on the host, and other
	// sandboxes of the default uid (another test binary's) would share it.
	uid := DefaultSandboxID + 1_000_000 + int(time.Now().UnixNano()%1_000_000)
	if err := os.Chown(run, uid, uid); err != nil {
		t.Fatal(err)
	}
	key := newKey()
	init, pids := true, int64(256)
	ctx := context.Background()
	ctr, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{
			Image:  img,
			Env:    map[string]string{"SANDBOXD_API_KEY": key},
			Cmd:    []string{"serve", "--contained", "--workspace", workspaceMount, "--listen", "unix:" + containerRun + "/" + socketName},
			Labels: map[string]string{"sandgate.test": testRun, labelExecutor: "aio"},
			ConfigModifier: func(c *container.Config) {
				c.User = strconv.Itoa(uid) + ":" + strconv.Itoa(uid)
				c.WorkingDir = workspaceMount
				c.Hostname = executors.Hostname
			},
			HostConfigModifier: func(hc *container.HostConfig) {
				hc.NetworkMode = "none"
				hc.CapDrop = []string{"ALL"}
				hc.SecurityOpt = []string{"no-new-privileges"}
				hc.ReadonlyRootfs = true
				hc.Init = &init
				hc.Tmpfs = map[string]string{"/tmp": "rw,nosuid,nodev,mode=1777,size=512m",
					executors.CodeDir: "rw,nosuid,nodev,noexec,mode=1777,size=16m"}
				hc.Resources.Memory, hc.Resources.MemorySwap, hc.Resources.PidsLimit = 1<<30, 1<<30, &pids
				hc.Mounts = []mount.Mount{
					{Type: mount.TypeBind, Source: ws, Target: workspaceMount, BindOptions: &mount.BindOptions{Propagation: mount.PropagationRSlave}},
					{Type: mount.TypeBind, Source: run, Target: containerRun},
				}
				hc.Mounts = append(hc.Mounts, etcmount.Mounts(etc)...) // as the pool's (local.go)
			},
		},
		Started: true,
	})
	if err != nil {
		t.Fatalf("start the sandboxd fixture: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := ctr.Terminate(ctx); err != nil {
			t.Errorf("terminate fixture: %v", err)
		}
		_ = wsmount.UnmountAll(ws)
		for _, p := range []string{filepath.Join(run, socketName), run, ws} {
			_ = os.Remove(p)
		}
		_ = os.RemoveAll(etc)
	})
	c := NewUnixClient(filepath.Join(run, socketName), key)
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := waitReady(rctx, c); err != nil {
		t.Fatal(err)
	}
	return &fixture{c: c, target: ws, uid: uid, img: img}
}

func (f *fixture) Kind() executors.Kind { return executors.KindAIO }

// Capabilities: the fixture is sandboxd without the pool, which is what
// bridges egress, so it grants no network (the egress cases then check
// its refusal; TestConformancePool runs them for real).
func (f *fixture) Capabilities() executors.Capabilities {
	c := capabilitiesFor(NetworkNone, "image:"+f.img)
	c.NetworkGrant = false
	return c
}

func (f *fixture) Available(ctx context.Context) error {
	_, err := f.c.Sandbox(ctx)
	return err
}

func (f *fixture) Execute(ctx context.Context, spec executors.Spec) (executors.Result, error) {
	spec, err := executors.Prologue{Kind: executors.KindAIO, UID: f.uid, GID: f.uid, Timeout: DefaultTimeout,
		Limits: DefaultLimits}.Resolve(spec)
	if err != nil {
		return executors.Result{}, err
	}
	if err := executors.CheckEgress(executors.KindAIO, f.Capabilities(), spec); err != nil {
		return executors.Result{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := prepareWorkspace(spec.WorkspaceDir, f.uid, f.uid); err != nil {
		return executors.Result{}, err
	}
	if err := wsmount.Bind(spec.WorkspaceDir, f.target); err != nil {
		return executors.Result{}, err
	}
	defer func() { _ = wsmount.UnmountAll(f.target) }()
	return run(ctx, f.c, runRequest{dir: workspaceMount, id: spec.RequestID, lang: spec.Language, code: spec.Code, timeout: spec.Timeout,
		margin: DefaultClientMargin, limits: spec.Limits, extended: true, output: spec.Output})
}
