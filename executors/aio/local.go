package aio

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/internal/etcmount"
	"github.com/sandgate/sandgate/executors/internal/recheck"
	"github.com/sandgate/sandgate/executors/internal/wsmount"
)

// Labels on every container of the pool, following the docker executor's
// conventions: sandgate.managed and sandgate.executor are what operators
// and the acceptance tooling filter on, sandgate.instance scopes adoption
// to this gateway. The docker executor's orphan reaper selects
// sandgate.executor=docker, so it never touches these.
const (
	labelManaged  = "sandgate.managed"
	labelExecutor = "sandgate.executor"
	labelInstance = "sandgate.instance"
	labelSession  = "sandgate.session"
	labelSlot     = "sandgate.aio.slot"
	// labelClaim marks an instance whose sandboxd awaits an identity
	// claim (claimas.go); one without it (made by an earlier gateway)
	// runs sandboxd standby and is bound with an exec.
	labelClaim = "sandgate.aio.claim"
)

// Paths in an instance's state directory and in the container.
const (
	stateWS        = "ws"  // mount point of the session workspace (container: /workspace)
	stateRun       = "run" // sandboxd's socket directory (container: /run/sandboxd)
	stateKey       = "key"
	stateEtc       = "etc" // /etc/hosts and /etc/resolv.conf (executors.NetworkFiles)
	stateSession   = "session"
	socketName     = "sandboxd.sock"
	containerRun   = "/run/sandboxd"
	sandboxdBinary = "/usr/local/bin/sandboxd"
	// standbyID runs an unbound instance's idle main process: not a
	// session's uid, so no session's code can signal it.
	standbyID = 65534
)

// handle is one instance's container and state.
type handle struct {
	slot        string // names the state directory; fixed for the container's life
	containerID string
	name        string // the container's current name
	dir         string
	key         string
	port        int // bridge mode: the published host port
	// Direct binding (direct.go): the labels the container is created
	// with once its workspace is known, and the pinned socket.
	labels map[string]string
	sockFD int
	// claimAs: the instance's sandboxd awaits an identity claim
	// (claimas.go).
	claimAs bool
}

// binding is what an instance serves once bound.
type binding struct {
	session string
	ws      Workspace
}

// adoptable is an instance found at start-up.
type adoptable struct {
	h       *handle
	session string // "" for an unbound one
	ws      Workspace
	client  *Client
	created time.Time
}

// backend creates, binds and destroys instances. The pool holds the
// state machine; a backend only does the work.
type backend interface {
	available(ctx context.Context) error
	// create starts an instance. On failure the handle is nil, or, when
	// what it made could not be removed, the handle the pool must destroy.
	create(ctx context.Context, slot, session string) (*handle, error)
	bind(ctx context.Context, h *handle, b binding) (*Client, error)
	destroy(ctx context.Context, h *handle) error
	adopt(ctx context.Context) ([]adoptable, error)
	// gone reports whether the instance's container has stopped or been
	// removed behind the pool's back (false when it cannot tell).
	gone(ctx context.Context, h *handle) bool
	containerName(session string) string
	// close releases the backend; keep leaves the instances' state for
	// the next process to adopt.
	close(keep bool)
}

// localBackend runs instances on a Docker engine.
type localBackend struct {
	cfg PoolConfig
	cli *client.Client
	log *slog.Logger
	// madeMount is set when this process made StateDir a mount point; it
	// undoes that at a Close that removed every instance.
	madeMount bool
	// direct: a non-root gateway; instances are made for their session
	// with the workspace mounted by the engine (direct.go).
	direct bool
	image  imageID // the id of cfg.Image, for Capabilities
	// checked: the image, as available last found it, stands (package
	// recheck).
	checked recheck.Passed
	egress  egressHub
}

func newLocalBackend(cfg PoolConfig) (*localBackend, error) {
	// The client negotiates the API version with the engine (the default
	// since moby client v0.3): Debian 12's engine speaks 1.41.
	opts := []client.Opt{}
	if cfg.Host != "" {
		opts = append(opts, client.WithHost(cfg.Host))
	} else {
		opts = append(opts, client.WithHostFromEnv())
	}
	cli, err := client.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("aio: docker client: %w", err)
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("aio: state dir: %w", err)
	}
	if err := os.Chmod(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("aio: state dir: %w", err)
	}
	b := &localBackend{cfg: cfg, cli: cli, log: cfg.Logger, direct: directMode(cfg.Network)}
	if cfg.Network == NetworkNone && !b.direct {
		if b.madeMount, err = ensureSharedMount(cfg.StateDir); err != nil {
			return nil, fmt.Errorf("aio: state dir: %w", err)
		}
	}
	return b, nil
}

func (b *localBackend) close(keep bool) {
	b.closeAllEgress()
	_ = b.cli.Close()
	if b.madeMount && !keep {
		_ = wsmount.UnmountAll(b.cfg.StateDir)
	}
}

func (b *localBackend) available(ctx context.Context) error {
	if _, err := b.cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		b.checked.Forget()
		return unavailable("docker engine unreachable", err)
	}
	if b.checked.Fresh(time.Now()) {
		return nil
	}
	tok := b.checked.Begin()
	info, err := b.cli.ImageInspect(ctx, b.cfg.Image)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return unavailable("image "+b.cfg.Image+" missing (make images)", err)
		}
		return unavailable("image inspect", err)
	}
	seen := seenImage{id: info.ID}
	if info.Config != nil {
		seen.rootFS = info.Config.Labels[labelRootFS]
	}
	b.image.set(seen)
	b.checked.Pass(tok, time.Now())
	return nil
}

func unavailable(reason string, err error) error {
	return &executors.UnavailableError{Kind: executors.KindAIO, Reason: reason, Err: err}
}

// instanceID is the deterministic id of a session's instance: the same
// session maps to the same container name across gateway restarts.
func instanceID(instance, session string) string {
	sum := sha256.Sum256([]byte("sandgate/aio\x00" + instance + "\x00" + session))
	return hex.EncodeToString(sum[:8])
}

func (b *localBackend) containerName(session string) string {
	return "sandgate-aio-" + b.cfg.Instance + "-" + instanceID(b.cfg.Instance, session)
}

func (b *localBackend) warmName(slot string) string {
	return "sandgate-aio-" + b.cfg.Instance + "-w" + slot
}

func newSlot() string {
	var s [6]byte
	_, _ = rand.Read(s[:])
	return hex.EncodeToString(s[:])
}

func newKey() string {
	var k [32]byte
	_, _ = rand.Read(k[:])
	return hex.EncodeToString(k[:])
}

// create prepares the state directory and starts a container. With a
// session the container gets its deterministic name at once; without one
// it waits, unbound, under a warm name.
func (b *localBackend) create(ctx context.Context, slot, session string) (*handle, error) {
	labels := map[string]string{labelManaged: "true", labelExecutor: string(executors.KindAIO),
		labelInstance: b.cfg.Instance, labelSlot: slot}
	if session != "" {
		labels[labelSession] = session
	}
	if b.direct {
		return b.createDirect(slot, session, labels)
	}
	h := &handle{slot: slot, dir: filepath.Join(b.cfg.StateDir, slot), key: newKey(), claimAs: b.cfg.Network == NetworkNone}
	if h.claimAs {
		labels[labelClaim] = "identity"
	}
	if err := b.prepareState(h); err != nil {
		return nil, err
	}
	name := b.warmName(slot)
	if session != "" {
		name = b.containerName(session)
	}
	cfg, hc := b.containerConfig(h, labels)
	res, err := b.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: cfg, HostConfig: hc, Name: name})
	if err != nil {
		if cerrdefs.IsConflict(err) && session != "" {
			// A container of an earlier life holds the name (its state was
			// lost): it cannot be adopted, so it goes.
			b.removeByName(ctx, name)
			res, err = b.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: cfg, HostConfig: hc, Name: name})
		}
		if err != nil {
			if ctx.Err() != nil {
				b.removeCancelled(ctx, name)
			}
			b.cleanState(h)
			return nil, b.engineError("create container", err)
		}
	}
	h.containerID, h.name = res.ID, name
	if b.cfg.Network == NetworkNone {
		if err := b.openEgress(h); err != nil {
			return b.undoCreate(ctx, h, err)
		}
	}
	if _, err := b.cli.ContainerStart(ctx, h.containerID, client.ContainerStartOptions{}); err != nil {
		return b.undoCreate(ctx, h, b.engineError("start container", err))
	}
	if b.cfg.Network == NetworkBridge {
		port, err := b.publishedPort(ctx, h.containerID)
		if err != nil {
			return b.undoCreate(ctx, h, err)
		}
		h.port = port
	}
	return h, nil
}

// undoCreate removes the container a failed create made. When the engine
// refuses that too (it is stopping: the usual reason the start failed),
// the handle comes back with the error, and the pool removes it with
// retries (destroyRetrying): without them the container stayed, created
// or dead, for good (issue 21's soak, engine restarts).
func (b *localBackend) undoCreate(ctx context.Context, h *handle, err error) (*handle, error) {
	if derr := b.destroy(context.WithoutCancel(ctx), h); derr != nil {
		return h, err
	}
	return nil, err
}

// removeCancelled removes the container named name that a create whose
// context ended may still have made: the engine goes on with a create the
// client gave up on (a pool closing under an acquisition), and nothing else
// would learn the container's id. It looks for a while, since the engine
// may register the name only after the client has gone.
func (b *localBackend) removeCancelled(ctx context.Context, name string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelledCreateWait)
	defer cancel()
	err := poll(ctx, 10*time.Millisecond, func() (bool, error) {
		_, err := b.cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
		return true, err
	})
	if err == nil {
		b.removeByName(ctx, name)
	}
}

// cancelledCreateWait bounds removeCancelled's search.
const cancelledCreateWait = 3 * time.Second

func (b *localBackend) removeByName(ctx context.Context, name string) {
	res, err := b.cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	if err != nil {
		return
	}
	c := res.Container
	if c.Config == nil || c.Config.Labels[labelManaged] != "true" || c.Config.Labels[labelExecutor] != string(executors.KindAIO) {
		return // not ours: leave it, the create will fail
	}
	slot := c.Config.Labels[labelSlot]
	_ = b.destroy(ctx, &handle{slot: slot, containerID: c.ID, dir: b.slotDir(slot)})
}

func (b *localBackend) slotDir(slot string) string {
	if slot == "" || strings.ContainsAny(slot, "/.") {
		return ""
	}
	return filepath.Join(b.cfg.StateDir, slot)
}

// prepareState makes <state>/<slot>/{ws,run,egress,etc} and the key file.
// egress/ is root's, 0755: sandboxd reaches the socket in it, and code in
// the sandbox cannot replace what the gateway puts there.
func (b *localBackend) prepareState(h *handle) error {
	for _, d := range []string{h.dir, filepath.Join(h.dir, stateWS), filepath.Join(h.dir, stateRun), filepath.Join(h.dir, stateEgress), filepath.Join(h.dir, stateEtc)} {
		if err := os.Mkdir(d, 0o700); err != nil {
			b.cleanState(h)
			return fmt.Errorf("aio: state dir: %w", err)
		}
	}
	if err := os.Chmod(filepath.Join(h.dir, stateEgress), 0o755); err != nil {
		b.cleanState(h)
		return fmt.Errorf("aio: state dir: %w", err)
	}
	if err := makeLayoutDirs(h); err != nil {
		b.cleanState(h)
		return err
	}
	if err := os.WriteFile(filepath.Join(h.dir, stateKey), []byte(h.key), 0o600); err != nil {
		b.cleanState(h)
		return fmt.Errorf("aio: state dir: %w", err)
	}
	if err := executors.WriteNetworkFiles(filepath.Join(h.dir, stateEtc)); err != nil {
		b.cleanState(h)
		return fmt.Errorf("aio: state dir: %w", err)
	}
	return nil
}

// codeTmpfsMB caps the tmpfs of program files: a few concurrent programs
// (the manager caps code at 256 KiB by default).
const codeTmpfsMB = 16

// containerConfig applies the docker executor's hardening: no network
// (or, in bridge mode, a port on loopback only), every capability dropped,
// no-new-privileges, a read-only root with a private /tmp, cgroup limits,
// and no log file. docker-init is the container's PID 1 so that orphans of
// runs are reaped in a container that lives for many runs.
func (b *localBackend) containerConfig(h *handle, labels map[string]string) (*container.Config, *container.HostConfig) {
	init := true
	mem := int64(b.cfg.MemoryMB) << 20
	pids := int64(b.cfg.Pids)
	cfg := &container.Config{
		Image:      b.cfg.Image,
		Hostname:   executors.Hostname,
		Env:        []string{"PATH=" + executors.SandboxPATH, "LANG=" + executors.SandboxLang},
		WorkingDir: workspaceMount,
		Labels:     labels,
	}
	hc := &container.HostConfig{
		CapDrop:     []string{"ALL"},
		SecurityOpt: []string{"no-new-privileges"},
		Tmpfs: map[string]string{
			"/tmp": "rw,nosuid,nodev,mode=1777,size=" + strconv.Itoa(b.cfg.TmpfsMB) + "m",
			// The program files of the gateway's runs (aiowire
			// RunExtension.Program): where every backend puts them.
			executors.CodeDir: "rw,nosuid,nodev,noexec,mode=1777,size=" + strconv.Itoa(codeTmpfsMB) + "m",
		},
		Mounts: []mount.Mount{{
			Type: mount.TypeBind, Source: filepath.Join(h.dir, stateWS), Target: workspaceMount,
			// rslave: the session's workspace, mounted on the host onto
			// this directory when the instance is bound, appears here.
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRSlave},
		}},
		LogConfig: container.LogConfig{Type: "none"},
		Init:      &init,
		Resources: container.Resources{
			Memory: mem, MemorySwap: mem, NanoCPUs: int64(b.cfg.CPUs * 1e9), PidsLimit: &pids,
			Ulimits: []*container.Ulimit{{Name: "core", Soft: 0, Hard: 0}},
		},
	}
	hc.Mounts = append(hc.Mounts, layoutMounts(h)...)
	if b.cfg.Network == NetworkBridge {
		// The real agent-infra image: its own entrypoint and user, its
		// API key from SANDBOX_API_KEY, port 8080 on 127.0.0.1 only.
		port := network.MustParsePort(strconv.Itoa(bridgePort) + "/tcp")
		cfg.Env = append(cfg.Env, "SANDBOX_API_KEY="+h.key)
		cfg.ExposedPorts = network.PortSet{port: {}}
		hc.NetworkMode = "bridge"
		hc.PortBindings = network.PortMap{port: {{HostIP: netip.MustParseAddr("127.0.0.1")}}}
		return cfg, hc
	}
	cfg.User = strconv.Itoa(standbyID) + ":" + strconv.Itoa(standbyID)
	cfg.Entrypoint = []string{sandboxdBinary}
	cfg.Cmd = []string{"standby"}
	if h.claimAs {
		claimAsConfig(cfg, hc)
	}
	hc.NetworkMode = "none"
	// As the docker executor's (executors/docker netfiles.go): the
	// engine's network setup skipped, lo alone (runc brings it up), and
	// the sandboxes' own /etc/hosts and /etc/resolv.conf.
	cfg.NetworkDisabled = true
	hc.Mounts = append(hc.Mounts, etcmount.Mounts(filepath.Join(h.dir, stateEtc))...)
	hc.ReadonlyRootfs = true
	hc.Mounts = append(hc.Mounts, mount.Mount{
		Type: mount.TypeBind, Source: filepath.Join(h.dir, stateRun), Target: containerRun,
		BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate},
	}, mount.Mount{
		// The egress bridge (egress.go): read-only, connecting to a
		// socket needs no write access to its file system.
		Type: mount.TypeBind, Source: filepath.Join(h.dir, stateEgress), Target: executors.EgressDir, ReadOnly: true,
		BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate},
	})
	return cfg, hc
}

func (b *localBackend) publishedPort(ctx context.Context, id string) (int, error) {
	res, err := b.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return 0, b.engineError("inspect container", err)
	}
	if res.Container.NetworkSettings != nil {
		for p, binds := range res.Container.NetworkSettings.Ports {
			if p.Num() != bridgePort {
				continue
			}
			for _, bnd := range binds {
				if n, err := strconv.Atoi(bnd.HostPort); err == nil && n > 0 {
					return n, nil
				}
			}
		}
	}
	return 0, unavailable("bridge mode: no published port for 8080", nil)
}

// bind mounts the session's workspace into the instance, renames the
// container for the session while, in none mode, it claims sandboxd for
// the session's uid (or starts it as that uid with docker exec), and
// returns once sandboxd answers and the rename is done.
func (b *localBackend) bind(ctx context.Context, h *handle, bd binding) (*Client, error) {
	if err := prepareWorkspace(bd.ws.Dir, bd.ws.UID, bd.ws.GID); err != nil {
		return nil, fmt.Errorf("aio: %w", err)
	}
	if b.direct {
		if h.containerID != "" && h.name != b.containerName(bd.session) {
			return nil, unavailable("under a non-root gateway an instance serves the session it was made for", nil)
		}
		if h.containerID == "" {
			if err := b.startDirect(ctx, h, bd.ws); err != nil {
				return nil, err
			}
		}
	} else {
		target := filepath.Join(h.dir, stateWS)
		if err := wsmount.UnmountAll(target); err != nil {
			return nil, fmt.Errorf("aio: %w", err)
		}
		if err := wsmount.Bind(bd.ws.Dir, target); err != nil {
			return nil, fmt.Errorf("aio: %w", err)
		}
		if err := bindLayout(h, bd.ws); err != nil {
			return nil, err
		}
	}
	rec, _ := json.Marshal(sessionRecord{Session: bd.session, Dir: bd.ws.Dir, UID: bd.ws.UID, GID: bd.ws.GID,
		Root: bd.ws.Root, Home: bd.ws.Home})
	if err := os.WriteFile(filepath.Join(h.dir, stateSession), rec, 0o600); err != nil {
		return nil, fmt.Errorf("aio: state dir: %w", err)
	}
	renamed := b.renameAsync(ctx, h, b.containerName(bd.session))
	c, err := b.serve(ctx, h, bd)
	if rerr := renamed(); rerr != nil && err == nil {
		c.Close()
		return nil, rerr
	}
	return c, err
}

// renameAsync renames h's container to name in the background and
// returns the wait for it. The rename is an engine round trip (2–4 ms on
// the development VM) that the session's sandboxd does not need, so it
// overlaps the claim instead of adding to the session's first output;
// bind still fails when it fails. h.name is set by the wait, on the
// caller's goroutine.
func (b *localBackend) renameAsync(ctx context.Context, h *handle, name string) func() error {
	if h.name == name {
		return func() error { return nil }
	}
	done := make(chan error, 1)
	id := h.containerID
	go func() {
		_, err := b.cli.ContainerRename(ctx, id, client.ContainerRenameOptions{NewName: name})
		if err != nil {
			if res, ierr := b.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{}); ierr == nil &&
				strings.TrimPrefix(res.Container.Name, "/") == name {
				err = nil
			}
		}
		done <- err
	}()
	return func() error {
		if err := <-done; err != nil {
			return b.engineError("rename container", err)
		}
		h.name = name
		return nil
	}
}

// serve starts or claims the bound instance's server and returns its
// client once it answers.
func (b *localBackend) serve(ctx context.Context, h *handle, bd binding) (*Client, error) {
	if b.cfg.Network == NetworkBridge {
		c := NewHTTPClient("http://127.0.0.1:"+strconv.Itoa(h.port), h.key)
		return c, waitReady(ctx, c)
	}
	if h.claimAs {
		return claimAs(ctx, h, bd.ws)
	}
	run := filepath.Join(h.dir, stateRun)
	if err := os.Chown(run, bd.ws.UID, bd.ws.GID); err != nil && !(b.direct && bd.ws.UID == os.Geteuid()) {
		return nil, fmt.Errorf("aio: %w", err)
	}
	user := strconv.Itoa(bd.ws.UID) + ":" + strconv.Itoa(bd.ws.GID)
	ex, err := b.cli.ExecCreate(ctx, h.containerID, client.ExecCreateOptions{
		User:       user,
		Env:        []string{"SANDBOXD_API_KEY=" + h.key},
		WorkingDir: workspaceMount,
		Cmd: append([]string{sandboxdBinary, "serve", "--contained", "--workspace", workspaceMount,
			"--listen", "unix:" + containerRun + "/" + socketName,
			"--egress", "unix:" + executors.EgressDir + "/" + executors.EgressSocketName}, homeArgs(bd.ws)...),
	})
	if err != nil {
		return nil, b.engineError("exec sandboxd", err)
	}
	if _, err := b.cli.ExecStart(ctx, ex.ID, client.ExecStartOptions{Detach: true}); err != nil {
		return nil, b.engineError("start sandboxd", err)
	}
	c := NewUnixClient(filepath.Join(run, socketName), h.key)
	if err := waitReady(ctx, c); err != nil {
		c.Close()
		return nil, err
	}
	if b.direct {
		c.Close()
		pinned, err := pinSocket(h, filepath.Join(run, socketName))
		if err != nil {
			return nil, err
		}
		return NewUnixClient(pinned, h.key), nil
	}
	// The socket exists: the directory goes back to root, so that code in
	// the sandbox (the socket's owner) cannot swap the socket for a
	// symlink the gateway would follow on the host when it connects.
	if err := os.Chown(run, 0, 0); err != nil {
		c.Close()
		return nil, fmt.Errorf("aio: %w", err)
	}
	if err := os.Chmod(run, 0o755); err != nil {
		c.Close()
		return nil, fmt.Errorf("aio: %w", err)
	}
	if fi, err := os.Lstat(filepath.Join(run, socketName)); err != nil || fi.Mode().Type() != fs.ModeSocket {
		c.Close()
		return nil, unavailable("sandboxd socket replaced during start-up", err)
	}
	return c, nil
}

// waitReady polls GET /v1/sandbox until it answers 200.
func waitReady(ctx context.Context, c *Client) error {
	err := poll(ctx, 2*time.Millisecond, func() (bool, error) {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := c.Sandbox(pctx)
		return true, err
	})
	if err != nil {
		return unavailable("sandbox not ready", err)
	}
	return nil
}

// poll calls try until it returns nil, returns again=false, or ctx ends,
// waiting first, then twice as long each time up to 20 ms: a sandboxd
// listens tens of milliseconds after its start, and a faster poll only
// takes CPU from that start. Its error is try's last, with ctx's when
// ctx ended it.
func poll(ctx context.Context, first time.Duration, try func() (again bool, err error)) error {
	for delay := first; ; delay = min(delay*2, 20*time.Millisecond) {
		again, err := try()
		if err == nil || !again {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		case <-time.After(delay):
		}
	}
}

// destroy removes the container, then the workspace mount, then the state
// directory, one known entry at a time: never a recursive removal that
// could reach through a mount into a session's files.
func (b *localBackend) destroy(ctx context.Context, h *handle) error {
	var errs []error
	if h.containerID != "" {
		_, err := b.cli.ContainerRemove(ctx, h.containerID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		if err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, b.engineError("remove container", err))
		}
	}
	b.closeEgress(h.slot)
	unpin(h)
	if h.dir != "" {
		if !b.direct { // under direct binding the gateway made no mount
			if err := errors.Join(wsmount.UnmountAll(filepath.Join(h.dir, stateWS)), unmountLayout(h)); err != nil {
				errs = append(errs, err)
			}
		}
		b.cleanState(h)
	}
	return errors.Join(errs...)
}

// gone inspects the instance's container: removed, or no longer running
// (killed, or stopped with its engine).
func (b *localBackend) gone(ctx context.Context, h *handle) bool {
	if h.containerID == "" {
		return false
	}
	res, err := b.cli.ContainerInspect(ctx, h.containerID, client.ContainerInspectOptions{})
	if err != nil {
		return cerrdefs.IsNotFound(err)
	}
	return res.Container.State != nil && !res.Container.State.Running
}

// cleanState removes the state directory's known entries, each with a
// non-recursive remove.
func (b *localBackend) cleanState(h *handle) {
	var etc []string
	for name := range executors.NetworkFiles {
		etc = append(etc, filepath.Join(h.dir, stateEtc, name))
	}
	for _, p := range append(etc, []string{
		filepath.Join(h.dir, stateRun, socketName), filepath.Join(h.dir, stateRun), filepath.Join(h.dir, stateWS),
		filepath.Join(h.dir, stateEgress, executors.EgressSocketName), filepath.Join(h.dir, stateEgress, executors.EgressBundleName),
		filepath.Join(h.dir, stateEgress, executors.EgressBundleName+".new"),
		filepath.Join(h.dir, stateEgress),
		filepath.Join(h.dir, stateEtc),
	}...) {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			b.log.Warn("aio: state entry left behind", "path", p, "err", err.Error())
		}
	}
	for _, p := range append(layoutEntries(h), filepath.Join(h.dir, stateKey), filepath.Join(h.dir, stateSession), h.dir) {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			b.log.Warn("aio: state entry left behind", "path", p, "err", err.Error())
		}
	}
}

// sessionRecord is what an instance's state directory remembers of its
// binding, for the adoption after a restart.
type sessionRecord struct {
	Session string `json:"session"`
	Dir     string `json:"dir"`
	UID     int    `json:"uid"`
	GID     int    `json:"gid"`
	// Root and Home are its layout's (Workspace).
	Root string `json:"root,omitempty"`
	Home string `json:"home,omitempty"`
}

// adopt lists this gateway's labelled containers after a restart. Running
// ones whose state is intact are handed to the pool (bound ones only when
// their sandboxd answers); everything else is removed, including state
// directories no container uses any more.
func (b *localBackend) adopt(ctx context.Context) ([]adoptable, error) {
	f := make(client.Filters).Add("label", labelManaged+"=true").
		Add("label", labelExecutor+"="+string(executors.KindAIO)).
		Add("label", labelInstance+"="+b.cfg.Instance)
	list, err := b.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return nil, b.engineError("list containers", err)
	}
	var out []adoptable
	used := map[string]bool{}
	for _, c := range list.Items {
		slot := c.Labels[labelSlot]
		h := &handle{slot: slot, containerID: c.ID, dir: b.slotDir(slot)}
		used[slot] = true
		a, ok := b.adoptOne(ctx, c, h)
		if !ok {
			if err := b.destroy(ctx, h); err != nil {
				b.log.Warn("aio: removing a stale instance failed", "container", shortID(c.ID), "err", err.Error())
			}
			continue
		}
		out = append(out, a)
	}
	// State directories without a container: a crash between the two.
	entries, _ := os.ReadDir(b.cfg.StateDir)
	for _, e := range entries {
		if e.IsDir() && !used[e.Name()] && b.slotDir(e.Name()) != "" {
			b.cleanAfterUnmount(&handle{slot: e.Name(), dir: b.slotDir(e.Name())})
		}
	}
	return out, nil
}

func (b *localBackend) cleanAfterUnmount(h *handle) {
	if b.direct {
		b.cleanState(h)
		return
	}
	if err := errors.Join(wsmount.UnmountAll(filepath.Join(h.dir, stateWS)), unmountLayout(h)); err != nil {
		b.log.Warn("aio: stale mount left behind", "dir", h.dir, "err", err.Error())
		return
	}
	b.cleanState(h)
}

func (b *localBackend) adoptOne(ctx context.Context, c container.Summary, h *handle) (adoptable, bool) {
	if c.State != container.StateRunning || h.dir == "" || b.direct {
		return adoptable{}, false // direct binding adopts nothing (direct.go)
	}
	key, err := os.ReadFile(filepath.Join(h.dir, stateKey))
	if err != nil {
		return adoptable{}, false
	}
	h.key = string(key)
	h.claimAs = c.Labels[labelClaim] == "identity"
	a := adoptable{h: h, created: time.Unix(c.Created, 0)}
	if b.cfg.Network == NetworkNone {
		// The egress directory is mounted if the container was made by a
		// gateway that knew it; without it the instance serves no
		// network run (startEgress refuses them).
		if fi, err := os.Stat(filepath.Join(h.dir, stateEgress)); err == nil && fi.IsDir() {
			if err := b.openEgress(h); err != nil {
				b.log.Warn("aio: adopted instance without egress bridge", "slot", h.slot, "err", err.Error())
			}
		}
	}
	if b.cfg.Network == NetworkBridge {
		if h.port, err = b.publishedPort(ctx, c.ID); err != nil {
			return adoptable{}, false
		}
	}
	name := ""
	if len(c.Names) > 0 {
		name = strings.TrimPrefix(c.Names[0], "/")
	}
	h.name = name
	if name == b.warmName(h.slot) {
		return a, true // unbound, started ahead
	}
	raw, err := os.ReadFile(filepath.Join(h.dir, stateSession))
	var rec sessionRecord
	if err != nil || json.Unmarshal(raw, &rec) != nil || rec.Session == "" || name != b.containerName(rec.Session) {
		return adoptable{}, false
	}
	if mounted, _, err := isMountPoint(filepath.Join(h.dir, stateWS)); err != nil || !mounted {
		return adoptable{}, false
	}
	a.session, a.ws = rec.Session, Workspace{Dir: rec.Dir, UID: rec.UID, GID: rec.GID, Root: rec.Root, Home: rec.Home}
	if b.cfg.Network == NetworkBridge {
		a.client = NewHTTPClient("http://127.0.0.1:"+strconv.Itoa(h.port), h.key)
	} else {
		a.client = NewUnixClient(filepath.Join(h.dir, stateRun, socketName), h.key)
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := a.client.Sandbox(pctx); err != nil {
		a.client.Close()
		return adoptable{}, false
	}
	return a, true
}

// engineError classifies a failed engine call as the docker executor
// does: the engine could not do what the pool asked (unreachable, or
// refusing while it stops or restarts, an image removed under us, a
// runtime failure), so the run is executor_unavailable, which a client
// may retry, never internal (issue 21's soak saw "failed to update store
// for object type *libnetwork.endpoint" from an engine shutting down). A
// cancelled call stays a context error.
func (b *localBackend) engineError(op string, err error) error {
	err = engineError(op, err)
	if errors.Is(err, executors.ErrUnavailable) {
		b.checked.Forget() // the engine may have lost the image: the next probe looks
	}
	return err
}

// engineError is the classification of localBackend.engineError.
func engineError(op string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("aio: %s: %w", op, err)
	}
	reason := op + " failed"
	if client.IsErrConnectionFailed(err) {
		reason = "docker engine unreachable"
	}
	return unavailable(reason, fmt.Errorf("%s: %w", op, err))
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
