package docker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/moby/moby/api/types/mount"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/internal/ctrfile"
	"github.com/sandgate/sandgate/executors/internal/ownerdir"
	"github.com/sandgate/sandgate/executors/internal/unixsock"
)

// egressScriptStart and egressScriptReady are the boot script's part of
// the bridge for a container granted network ($2 = "egress"): the shared
// forwarder (executors.EgressForwarderStart) started before the script
// waits for its program, so a warm container has it running, and its
// readiness check before the program runs.
//
// The start keeps $2 in egress_grant: by the readiness check the script
// has replaced its positional parameters with the interpreter's argv
// (set -- python3 -I -u), so "$2" there is an interpreter flag. Testing
// "$2" again skipped the check in every run, and a run whose socat had
// not bound yet found nothing on 127.0.0.1:3128 (seen in CI: "plain
// failed", then the next request went through).
var (
	egressScriptStart = "egress_grant=$2\nif [ \"$egress_grant\" = egress ]; then\n" + executors.EgressForwarderStart + "fi\n"
	egressScriptReady = "if [ \"$egress_grant\" = egress ]; then\n" + executors.EgressForwarderReady + "fi\n"
)

// egressBox is one container's end of the bridge: a host directory of
// its own, bind-mounted read-only at executors.EgressDir, holding the
// listening socket the container's socat connects to and, when the run
// trusts a gateway CA, the combined bundle. The socket is accepted by the
// executor and each connection handed to the Egress of the run the
// container serves (a container serves exactly one run, so a warm one
// gets its run's Egress at hand-off). The directory's name is random
// in a 0711 directory, so no other container or local user can find
// the socket; nothing but this container mounts it.
type egressBox struct {
	dir string
	ln  net.Listener
}

// newEgressBox makes the directory and the socket. ca is the PEM the
// bundle adds ("" for none); the bundle is written once the container
// exists (writeBundle), since it starts with the image's own roots.
func (e *Executor) newEgressBox() (*egressBox, error) {
	root, err := e.egressRoot()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(root, "c-")
	if err != nil {
		return nil, fmt.Errorf("docker: egress dir: %w", err)
	}
	sock := filepath.Join(dir, executors.EgressSocketName)
	ln, err := unixsock.Listen(dir, executors.EgressSocketName)
	if err == nil {
		// The container's uid connects; under gVisor its sentry does.
		err = errors.Join(os.Chmod(dir, 0o755), os.Chmod(sock, 0o666))
	}
	if err != nil {
		if ln != nil {
			ln.Close()
		}
		os.RemoveAll(dir)
		return nil, fmt.Errorf("docker: egress socket: %w", err)
	}
	return &egressBox{dir: dir, ln: ln}, nil
}

// close stops accepting and removes the directory.
func (b *egressBox) close() {
	_ = b.ln.Close()
	_ = os.RemoveAll(b.dir)
}

// mount is the read-only bind of the directory at executors.EgressDir.
// Connecting to a socket needs no write access to its file system.
func (b *egressBox) mount() mount.Mount {
	return mount.Mount{Type: mount.TypeBind, Source: b.dir, Target: executors.EgressDir, ReadOnly: true,
		BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}}
}

// egressRoot is the executor's directory of egress directories, made on
// first use (0711: traversable, not listable) and removed by Close. It is
// named by its owner (ownerdir), so that the next start removes it if
// this process dies without Close (removeStaleDirs).
func (e *Executor) egressRoot() (string, error) {
	e.egress.mu.Lock()
	defer e.egress.mu.Unlock()
	if e.egress.root != "" {
		return e.egress.root, nil
	}
	dir, err := ownerdir.Make(e.cfg.EgressDir, e.egressPrefix(), 0o711)
	if err != nil {
		return "", fmt.Errorf("docker: egress root: %w", err)
	}
	e.egress.root = dir
	return dir, nil
}

// egressPrefix names the egress roots of this executor's kind.
func (e *Executor) egressPrefix() string { return "sandgate-" + string(e.cfg.Kind) + "-egress-" }

// egressState is the executor's egress bookkeeping.
type egressState struct {
	mu      sync.Mutex
	root    string
	bundles map[string][]byte // image → its system CA bundle
}

// removeEgressRoot removes the directory of egress directories (Close).
func (e *Executor) removeEgressRoot() {
	e.egress.mu.Lock()
	defer e.egress.mu.Unlock()
	if e.egress.root != "" {
		_ = os.RemoveAll(e.egress.root)
		e.egress.root = ""
	}
}

// writeBundle writes the combined CA bundle for container id (created,
// not yet started) into b: the image's system bundle, read once per image
// from a container of it, plus ca.
func (e *Executor) writeBundle(ctx context.Context, b *egressBox, id, image, ca string) error {
	system, err := e.systemBundle(ctx, id, image)
	if err != nil {
		return err
	}
	p := filepath.Join(b.dir, executors.EgressBundleName)
	if err := os.WriteFile(p, executors.EgressBundle(system, []byte(ca)), 0o644); err != nil {
		return fmt.Errorf("docker: egress bundle: %w", err)
	}
	return os.Chmod(p, 0o644)
}

// systemBundle is image's executors.SystemCABundle (empty when the image
// has none), read from container id through the engine's archive API.
func (e *Executor) systemBundle(ctx context.Context, id, image string) ([]byte, error) {
	e.egress.mu.Lock()
	if b, ok := e.egress.bundles[image]; ok {
		e.egress.mu.Unlock()
		return b, nil
	}
	e.egress.mu.Unlock()
	system, err := ctrfile.Read(ctx, e.cli, id, executors.SystemCABundle)
	if err != nil {
		return nil, fmt.Errorf("docker: system CA bundle: %w", err)
	}
	e.egress.mu.Lock()
	if e.egress.bundles == nil {
		e.egress.bundles = map[string][]byte{}
	}
	e.egress.bundles[image] = system
	e.egress.mu.Unlock()
	return system, nil
}

// hostUDSArgs are runsc flags under which a container may connect to a
// host Unix socket bind-mounted into it: what the bridge needs under
// gVisor.
var hostUDSArgs = []string{"--host-uds=open", "--host-uds=all", "-host-uds=open", "-host-uds=all"}

// runtimeAllowsHostUDS reports whether the engine's registration of the
// runtime (its runtimeArgs) lets a gVisor sandbox connect to a host
// socket. A runtime with the host's kernel always can.
func runtimeAllowsHostUDS(args []string) bool {
	for _, a := range args {
		if slices.Contains(hostUDSArgs, a) {
			return true
		}
	}
	return false
}
