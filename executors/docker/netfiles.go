package docker

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/moby/moby/api/types/mount"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/internal/etcmount"
	"github.com/sandgate/sandgate/executors/internal/ownerdir"
)

// A container has no network, so the engine's network machinery has
// nothing to give it. With Config.NetworkDisabled the engine skips it:
// no libnetwork sandbox, no prestart hook and no set-ipv6 helper, each of
// which re-executes dockerd (about 0.1 CPU-second and 0.1 s of a cold
// start per container, runc and runsc alike, measured on Docker 20.10).
// The container still gets a network namespace of its own with only lo
// up: runc brings lo up in a new namespace, and runsc does when it is
// registered with --network=none (scripts/dockerd.sh). A runsc registered
// without that flag would give a sandbox with no loopback at all, so such
// a runtime keeps the engine's NetworkMode none (runtimeDisablesNetwork).
//
// Without the engine's network files, /etc/hosts and /etc/resolv.conf
// would be the image's empty placeholders, so every container gets the
// executor's own, read-only: the same as the exported runtime root's
// (executors.HostsFile, executors.ResolvConf), whichever way its network
// was set up.

// netFiles is the executor's directory of /etc files, made on first use
// and made again if something removed it (a temporary-file cleaner). Its
// name is unpredictable and it is this process's: a path another user of
// the temporary directory could make first would let them choose what
// the engine bind-mounts into sandboxes.
type netFiles struct {
	mu  sync.Mutex
	dir string
}

// netFilesMounts returns the read-only bind mounts of /etc/hosts and
// /etc/resolv.conf.
func (e *Executor) netFilesMounts() ([]mount.Mount, error) {
	dir, err := e.netFilesDir()
	if err != nil {
		return nil, err
	}
	return etcmount.Mounts(dir), nil
}

func (e *Executor) netFilesDir() (string, error) {
	e.netFiles.mu.Lock()
	defer e.netFiles.mu.Unlock()
	if e.netFiles.dir != "" {
		if _, err := os.Stat(filepath.Join(e.netFiles.dir, "hosts")); err == nil {
			return e.netFiles.dir, nil
		}
		_ = os.RemoveAll(e.netFiles.dir)
		e.netFiles.dir = ""
	}
	// Named by its owner, so that the next start removes it if this
	// process dies without Close.
	dir, err := ownerdir.Make(e.cfg.EgressDir, e.netFilesPrefix(), 0o755)
	if err == nil {
		err = executors.WriteNetworkFiles(dir)
	}
	if err != nil {
		if dir != "" {
			_ = os.RemoveAll(dir)
		}
		return "", fmt.Errorf("docker: network files: %w", err)
	}
	e.netFiles.dir = dir
	return dir, nil
}

// netFilesPrefix names the directories of this executor's kind.
func (e *Executor) netFilesPrefix() string { return "sandgate-" + string(e.cfg.Kind) + "-etc-" }

// removeStaleDirs removes the /etc files and egress directories of
// gateways that died without Close (New): the first container of this
// one may be long in coming.
func (e *Executor) removeStaleDirs() {
	ownerdir.RemoveStale(e.cfg.EgressDir, e.netFilesPrefix())
	ownerdir.RemoveStale(e.cfg.EgressDir, e.egressPrefix())
}

// removeNetFiles removes the directory (Close).
func (e *Executor) removeNetFiles() {
	e.netFiles.mu.Lock()
	defer e.netFiles.mu.Unlock()
	if e.netFiles.dir != "" {
		_ = os.RemoveAll(e.netFiles.dir)
		e.netFiles.dir = ""
	}
}

// runtimeDisablesNetwork reports whether the engine's registration of a
// runtime with its own kernel gives a sandbox a loopback of its own
// without the engine's network setup (runsc --network=none).
func runtimeDisablesNetwork(args []string) bool {
	for i, a := range args {
		if a == "--network=none" || a == "-network=none" ||
			((a == "--network" || a == "-network") && i+1 < len(args) && args[i+1] == "none") {
			return true
		}
	}
	return false
}
