package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/internal/recheck"
)

// labelBoot marks the containers of one Executor value, so the orphan
// reaper, which may run late (the engine was down at New), never takes a
// container this process has just created for a run.
const labelBoot = labelPrefix + "boot"

// Executor runs code in a fresh, network-less container per run. It is safe
// for concurrent use.
type Executor struct {
	cfg      Config
	prologue executors.Prologue
	log      *slog.Logger
	cli      *client.Client
	boot     string // value of labelBoot on this value's containers

	life     context.Context // ends at Close; parent of background work
	stopLife context.CancelFunc
	closed   atomic.Bool
	bg       sync.WaitGroup // removals and warm preparations

	reaped  atomic.Bool // orphans of earlier processes removed
	reaping sync.Mutex

	mu       sync.Mutex
	leftover map[string]bool // containers whose removal failed; retried

	warm     *warmPool
	warmHits atomic.Int64 // runs served by a warm container
	pool     *sandboxPool // pre-started sandboxes of no session (pool.go)

	kernels *kernels // stateful runs' kernel containers, by session (kernel.go)

	detached *detachedRuns // detached runs and network holders, by session (detached.go)

	sandboxes *sandboxes // session sandboxes, by session (session.go)

	imageIDs imageIDs // what Capabilities names as the root filesystem

	egress egressState
	// hostUDS: the engine registers Config.Runtime with a flag that lets
	// a sandbox with its own kernel connect to a host Unix socket (runsc
	// --host-uds=open), which the egress bridge needs (checkRuntime).
	hostUDS atomic.Bool
	// netOff: containers are created with the engine's network setup
	// skipped (netfiles.go): always under runc, under a runtime with its
	// own kernel only when its registration gives it a loopback.
	netOff   atomic.Bool
	netFiles netFiles
	platform runtimePlatform // Config.Runtime's platform (platform.go)
	// checked: the runtime's registration and the images, as Available
	// last found them, stand (see package recheck).
	checked recheck.Passed
}

// Interface guards.
var (
	_ executors.Executor        = (*Executor)(nil)
	_ executors.Closer          = (*Executor)(nil)
	_ executors.SessionReleaser = (*Executor)(nil)
	_ executors.KernelHost      = (*Executor)(nil)
)

// New builds the executor. It fails only on a bad config: an engine that
// is down is not an error here (Available reports it, and the executor
// recovers by itself when the engine answers). When the engine answers,
// New removes the containers a crashed predecessor with the same
// Config.Instance left behind before it returns.
func New(ctx context.Context, cfg Config) (*Executor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("docker: config: %w", err)
	}
	cfg = cfg.withDefaults()
	// The client negotiates the API version with the engine on first use
	// (and on every ping, see ping).
	host := client.WithHostFromEnv()
	if cfg.Host != "" {
		host = client.WithHost(cfg.Host)
	}
	cli, err := client.New(host)
	if err != nil {
		return nil, fmt.Errorf("docker: client: %w", err)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	life, stop := context.WithCancel(context.WithoutCancel(ctx))
	e := &Executor{
		cfg:      cfg,
		log:      cfg.Logger.With("executor", string(cfg.Kind), "instance", cfg.Instance),
		cli:      cli,
		boot:     hex.EncodeToString(b[:]),
		life:     life,
		stopLife: stop,
		leftover: map[string]bool{},
		prologue: executors.Prologue{Kind: executors.KindDocker, UID: cfg.SandboxUID, GID: cfg.SandboxGID,
			Timeout: cfg.DefaultTimeout, Limits: cfg.Limits},
	}
	e.netOff.Store(!cfg.OwnKernel)
	e.removeStaleDirs()
	e.warm = newWarmPool(e)
	e.kernels = newKernels(e)
	e.detached = newDetachedRuns()
	e.sandboxes = newSandboxes()
	if err := e.ping(ctx); err != nil {
		e.log.Warn("docker engine not reachable at start; will retry", "err", err.Error())
	} else {
		e.reapOrphans(ctx)
		_ = e.checkRuntime(ctx) // capabilities know the runtime's flags from the start
	}
	e.pool = newSandboxPool(e)
	e.log.Info("docker executor ready", "images", cfg.Images, "warm_max", cfg.WarmMax, "pool_max", cfg.Pool.Max, "pool", e.pool.off)
	return e, nil
}

// Kind implements executors.Executor.
func (e *Executor) Kind() executors.Kind { return e.cfg.Kind }

// Available implements executors.Executor: the engine answers a ping,
// lists Config.Runtime (when set) among its runtimes, and every configured
// image exists. The last two stand for a while once they pass (package
// recheck). A success also finishes work the engine's absence postponed
// (orphan reaping, failed removals).
func (e *Executor) Available(ctx context.Context) error {
	if e.closed.Load() {
		return e.unavailable("executor closed", nil)
	}
	if err := e.ping(ctx); err != nil {
		e.checked.Forget()
		return e.unavailable("engine unreachable", err)
	}
	if !e.checked.Fresh(time.Now()) {
		tok := e.checked.Begin()
		if err := e.checkRuntime(ctx); err != nil {
			return err
		}
		if err := e.checkImages(ctx); err != nil {
			return err
		}
		e.checked.Pass(tok, time.Now())
	}
	e.afterEngineOK()
	return nil
}

// checkImages makes an engine without one of the configured images an
// unavailable one, and records each image's id for Capabilities.
func (e *Executor) checkImages(ctx context.Context) error {
	seen := map[string]bool{}
	for _, lang := range languages {
		img := e.cfg.Images[lang]
		if seen[img] {
			continue
		}
		seen[img] = true
		info, err := e.cli.ImageInspect(ctx, img)
		if err != nil {
			if cerrdefs.IsNotFound(err) {
				return e.unavailable("image "+img+" missing (make images)", err)
			}
			return e.unavailable("image inspect", err)
		}
		seen := seenImage{id: info.ID}
		if info.Config != nil {
			seen.rootFS = info.Config.Labels[labelRootFS]
		}
		e.imageIDs.set(img, seen)
	}
	return nil
}

// ErrRuntimeMissing is the cause of the unavailability of an executor whose
// Config.Runtime the engine does not list.
var ErrRuntimeMissing = errors.New("runtime not registered with the engine")

// checkRuntime makes an engine that does not know Config.Runtime an
// unavailable one, with the runtimes it does know in the reason.
func (e *Executor) checkRuntime(ctx context.Context) error {
	if e.cfg.Runtime == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.PingTimeout)
	defer cancel()
	info, err := e.cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return e.unavailable("engine info", err)
	}
	rt, ok := info.Info.Runtimes[e.cfg.Runtime]
	e.hostUDS.Store(ok && runtimeAllowsHostUDS(rt.Args))
	if ok && e.cfg.OwnKernel {
		e.platform.set(rt.Args)
	}
	if e.cfg.OwnKernel {
		e.netOff.Store(ok && runtimeDisablesNetwork(rt.Args))
	}
	if !ok {
		known := slices.Sorted(maps.Keys(info.Info.Runtimes))
		return e.unavailable(fmt.Sprintf("the engine has no %q runtime (it has %s; scripts/dockerd.sh registers it, see the README)",
			e.cfg.Runtime, strings.Join(known, ", ")), ErrRuntimeMissing)
	}
	return nil
}

func (e *Executor) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.PingTimeout)
	defer cancel()
	_, err := e.cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true})
	return err
}

// afterEngineOK starts, in the background, the clean-ups that needed the
// engine: reaping orphans (when New could not) and retrying removals.
func (e *Executor) afterEngineOK() {
	e.mu.Lock()
	pending := len(e.leftover) > 0
	e.mu.Unlock()
	if (e.reaped.Load() && !pending) || e.closed.Load() {
		return
	}
	e.goBackground(func() {
		ctx, cancel := context.WithTimeout(e.life, e.cfg.EngineTimeout)
		defer cancel()
		if !e.reaped.Load() {
			e.reapOrphans(ctx)
		}
		e.retryLeftovers(ctx)
	})
}

func (e *Executor) unavailable(reason string, err error) error {
	return &executors.UnavailableError{Kind: e.cfg.Kind, Reason: reason, Err: err}
}

// engineError classifies a failed engine call. A cancelled request stays a
// context error. Anything else means the engine could not run the work:
// executor_unavailable, whether the engine is gone (the usual case
// mid-flight) or refused (an image removed under us, a runtime failure).
func (e *Executor) engineError(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("docker: %s: %w", op, context.Cause(ctx))
	}
	e.checked.Forget() // the engine may have lost the runtime or an image: the next probe looks
	reason := op + " failed"
	if client.IsErrConnectionFailed(err) || e.ping(e.life) != nil {
		reason = "engine unreachable during " + op
	} else if cerrdefs.IsNotFound(err) && op == "create" {
		reason = "image missing (make images)"
	}
	return e.unavailable(reason, err)
}

// goBackground runs f as tracked background work (Close waits for it).
func (e *Executor) goBackground(f func()) {
	e.bg.Add(1)
	go func() {
		defer e.bg.Done()
		f()
	}()
}

// Close implements executors.Closer: it removes the warm containers, waits
// for pending removals (bounded by ctx) and closes the engine client. Runs
// still in flight are killed by their own contexts; Execute refuses new
// ones.
func (e *Executor) Close(ctx context.Context) error {
	if e.closed.Swap(true) {
		return nil
	}
	e.warm.closeAll()
	e.pool.closeAll()
	e.kernels.closeAll()
	e.closeDetached()
	e.closeSandboxes()
	done := make(chan struct{})
	go func() {
		e.bg.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
		e.retryLeftovers(ctx)
		e.sweepOwn(ctx)
	case <-ctx.Done():
		err = fmt.Errorf("docker: close: %w", ctx.Err())
	}
	e.stopLife()
	e.removeEgressRoot()
	e.removeNetFiles()
	e.mu.Lock()
	if n := len(e.leftover); n > 0 {
		e.log.Warn("containers left for the next start to reap", "count", n)
	}
	e.mu.Unlock()
	return errors.Join(err, e.cli.Close())
}

// sweepOwn removes every container this Executor value created that is
// still there once its own work has ended. Those are containers whose
// create call reached the engine while its answer was lost (the engine
// connection dropped mid-call, as when it restarts while a warm container
// is being prepared): no id was ever returned for them.
func (e *Executor) sweepOwn(ctx context.Context) {
	list, err := e.cli.ContainerList(ctx, client.ContainerListOptions{All: true,
		Filters: e.instanceFilter().Add("label", labelBoot+"="+e.boot)})
	if err != nil {
		e.log.Warn("list own containers at close", "err", err.Error())
		return
	}
	for _, c := range list.Items {
		if err := e.removeNow(c.ID); err != nil {
			e.mu.Lock()
			e.leftover[c.ID] = true
			e.mu.Unlock()
		}
	}
	if n := len(list.Items); n > 0 {
		e.log.Info("removed containers whose creation was not confirmed", "count", n)
	}
}

// ReleaseSession implements executors.SessionReleaser: the session's warm
// container, if any, its kernel's and its session sandbox are removed.
func (e *Executor) ReleaseSession(_ context.Context, sessionID string) error {
	e.warm.release(sessionID)
	e.kernels.release(sessionID)
	e.releaseDetached(sessionID)
	e.releaseSandbox(sessionID)
	return nil
}

// remove deletes a container in the background, killing it if it still
// runs. A failure (engine gone) keeps the id for a retry when the engine is
// back; a restart reaps it otherwise.
func (e *Executor) remove(id string) {
	e.goBackground(func() {
		if err := e.removeNow(id); err != nil {
			e.log.Warn("remove container; will retry", "container", shortID(id), "err", err.Error())
			e.mu.Lock()
			e.leftover[id] = true
			e.mu.Unlock()
		}
	})
}

// removeNow force-removes a container, now. A container that is exiting
// while the engine kills it gets 409 "Could not kill running container
// ..., cannot remove - ... is not running" (Docker 20.10): the removal is
// tried again at once a few times, rather than left for the next retry,
// which comes only with the next run or engine recovery.
func (e *Executor) removeNow(id string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(e.life), e.cfg.EngineTimeout)
	defer cancel()
	for try := 0; ; try++ {
		_, err := e.cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		if err == nil || cerrdefs.IsNotFound(err) {
			return nil
		}
		if !cerrdefs.IsConflict(err) || ctx.Err() != nil || try == len(removeConflictPauses) {
			return err
		}
		time.Sleep(removeConflictPauses[try])
	}
}

// removeConflictPauses are removeNow's waits between tries after a conflict.
var removeConflictPauses = []time.Duration{50 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond}

func (e *Executor) retryLeftovers(ctx context.Context) {
	e.mu.Lock()
	ids := make([]string, 0, len(e.leftover))
	for id := range e.leftover {
		ids = append(ids, id)
	}
	e.mu.Unlock()
	for _, id := range ids {
		if ctx.Err() != nil {
			return
		}
		if err := e.removeNow(id); err == nil {
			e.mu.Lock()
			delete(e.leftover, id)
			e.mu.Unlock()
		}
	}
}

// reapOrphans removes every container of this instance that this Executor
// value did not create: what a crashed or killed predecessor left. The
// first success schedules the follow-up sweeps (resweepOrphans).
func (e *Executor) reapOrphans(ctx context.Context) {
	e.reaping.Lock()
	defer e.reaping.Unlock()
	if e.reaped.Load() {
		return
	}
	if err := e.removeOrphans(ctx); err != nil {
		e.log.Warn("reap orphans", "err", err.Error())
		return
	}
	e.reaped.Store(true)
	go e.resweepOrphans(time.Now(), orphanResweeps)
}

// orphanResweeps are the times after the first reap at which the orphans
// are swept again. A create call the predecessor had in flight when it
// was killed reaches the engine anyway, and its container can appear
// after the first reap (issue 21's soak, gateway SIGKILL): the first
// sweep cannot see it, and without a later one it stays for good. Such a
// call ends within seconds of its client's death, so the sweeps stop
// after a minute rather than run forever (a list call each). A variable
// so that tests can shorten it.
var orphanResweeps = []time.Duration{2 * time.Second, 10 * time.Second, 60 * time.Second}

// resweepOrphans runs the follow-up sweeps, at the given times after
// reaped, until Close.
func (e *Executor) resweepOrphans(reaped time.Time, at []time.Duration) {
	for _, at := range at {
		t := time.NewTimer(time.Until(reaped.Add(at)))
		select {
		case <-e.life.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if e.closed.Load() {
			return
		}
		ctx, cancel := context.WithTimeout(e.life, e.cfg.EngineTimeout)
		e.reaping.Lock()
		err := e.removeOrphans(ctx)
		e.reaping.Unlock()
		cancel()
		if err != nil {
			e.log.Warn("sweep late orphans", "err", err.Error())
		}
	}
}

// removeOrphans removes this instance's containers of other Executor
// values (labelBoot).
func (e *Executor) removeOrphans(ctx context.Context) error {
	list, err := e.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: e.instanceFilter()})
	if err != nil {
		return fmt.Errorf("list orphans: %w", err)
	}
	n := 0
	for _, c := range list.Items {
		if c.Labels[labelBoot] == e.boot {
			continue
		}
		if err := e.removeNow(c.ID); err != nil {
			return fmt.Errorf("reap orphan %s: %w", shortID(c.ID), err)
		}
		n++
	}
	if n > 0 {
		e.log.Info("reaped orphan containers", "count", n)
	}
	return nil
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// Execute implements executors.Executor.
func (e *Executor) Execute(ctx context.Context, spec executors.Spec) (executors.Result, error) {
	if e.closed.Load() {
		return executors.Result{}, e.unavailable("executor closed", nil)
	}
	if spec.Stateful {
		return e.executeCell(ctx, spec)
	}
	spec, err := e.prologue.Resolve(spec)
	if err != nil {
		return executors.Result{}, err
	}
	if err := executors.CheckEgress(e.cfg.Kind, e.Capabilities(), spec); err != nil {
		return executors.Result{}, err
	}
	id, lim := spec.RequestID, spec.Limits
	dir, err := checkWorkspace(spec.WorkspaceDir, spec.UID, spec.GID)
	if err != nil {
		return executors.Result{}, err
	}
	if wantsSandbox(spec) {
		return e.executeInSandbox(ctx, spec, dir) // session.go
	}
	sh := newShape(e.cfg.Images[spec.Language], dir, spec.UID, spec.GID, lim, e.cfg.Runtime).withEgress(spec.Egress).withLayout(spec.Layout)
	if !e.cfg.OwnKernel && !sh.egress {
		sh.netns = e.detached.netns(spec.SessionID) // the session's loopback, once it holds one (detached.go)
	}
	log := e.log.With("request_id", id, "session_id", spec.SessionID)

	arrived := time.Now()
	b, warm, err := e.acquire(ctx, spec.SessionID, id, sh)
	if err != nil {
		return executors.Result{}, err
	}
	later := false
	if spec.SessionID != "" {
		later = e.warm.replenish(spec.SessionID, arrived, sh)
	}
	stopEgress := func() {}
	if b.egress != nil {
		stopEgress = executors.ServeEgress(ctx, b.egress.ln, spec.Egress)
	}
	res, err := e.run(ctx, b, runInput{
		lang: spec.Language, code: spec.Code, timeout: spec.Timeout, limits: lim,
		dir: dir, requestID: id, log: log, tap: spec.Output,
	})
	stopEgress()
	e.discard(b)
	if later && err == nil {
		e.warm.topUp(spec.SessionID, sh)
	}
	log.DebugContext(ctx, "run finished", "warm", warm, "exit_code", res.ExitCode,
		"timed_out", res.TimedOut, "oom_killed", res.OOMKilled, "truncated", res.Truncated,
		"duration_ms", res.Duration.Milliseconds(), "err", errString(err))
	return res, err
}

// acquire returns a container ready for the run: the session's warm one
// when it matches, else a fresh one.
func (e *Executor) acquire(ctx context.Context, session, request string, sh shape) (*box, bool, error) {
	if session != "" {
		if b := e.warm.take(ctx, session, sh); b != nil {
			e.warmHits.Add(1)
			return b, true, nil
		}
		if ctx.Err() != nil {
			return nil, false, fmt.Errorf("docker: %w", context.Cause(ctx))
		}
	}
	if b := e.pool.claim(ctx, sh); b != nil {
		return b, true, nil
	}
	t0 := time.Now()
	b, err := e.prepare(ctx, sh, e.labels(session, request))
	if err == nil {
		e.warm.observePrep(time.Since(t0))
	}
	return b, false, err
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// errTimedOut is the cause recorded when a run hit its timeout.
var errTimedOut = errors.New("docker: run timed out")
