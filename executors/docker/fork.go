package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/kernel"
)

// Fork (issue 30): the parent's kernel is checkpointed with
// --leave-running (it goes on at once) and the image is restored once per
// child, each in a bundle whose workspace mounts are the child's copy of
// the workspace (gVisor restores a mount's source from the new bundle).
// Each child's random generators are then reseeded, since a restored
// process draws what its parent would have drawn next.

// reseedCode reseeds, in a child's kernel, Python's random and NumPy's
// global and default generators from the OS pool (the sandbox's, which
// gVisor draws from the host's on every read, so it differs per child).
const reseedCode = "import os as _sg_os, random as _sg_random\n" +
	"_sg_random.seed(_sg_os.urandom(32))\n" +
	"try:\n    import numpy as _sg_np\n" +
	"    _sg_np.random.seed(int.from_bytes(_sg_os.urandom(4), 'little'))\n" +
	"except ImportError:\n    pass\n" +
	"del _sg_os, _sg_random"

// ForkSession implements executors.SessionForker: without memory to keep
// (not gVisor, or the parent has no kernel) it does nothing and the
// children start with the copied workspace only.
func (e *Executor) ForkSession(ctx context.Context, parent string, children []executors.ForkChild) (executors.Forked, error) {
	if e.snapshotMode() != executors.SnapshotMemory || len(children) == 0 {
		return executors.Forked{}, nil
	}
	e.reapRestored(ctx)
	ks := e.kernels
	ks.mu.Lock()
	k := ks.m[parent]
	ks.mu.Unlock()
	if k == nil || !k.conn.Alive() {
		return executors.Forked{}, nil
	}
	release, err := k.conn.Acquire(ctx)
	if err != nil {
		return executors.Forked{}, fmt.Errorf("docker: wait for the kernel: %w", err)
	}
	name := "fork-" + randomID()
	dir := filepath.Join(e.snapshotBase(), dirName(parent), name)
	began := time.Now()
	image, err := e.checkpointRunning(ctx, k, dir)
	release()
	if err != nil {
		return executors.Forked{}, err
	}
	checkpointed := time.Since(began)
	defer removeSnapshot(dir)
	// The children are restored side by side from the one image.
	errs := make([]error, len(children))
	var wg sync.WaitGroup
	for i, c := range children {
		wg.Go(func() {
			if err := e.forkChild(ctx, k.b.shape, dir, image, c, lazyPages); err != nil {
				errs[i] = fmt.Errorf("child %s: %w", c.SessionID, err)
			}
		})
	}
	wg.Wait()
	e.log.Info("kernel forked", "session_id", parent, "children", len(children),
		"checkpoint_ms", checkpointed.Milliseconds(), "restore_ms", (time.Since(began) - checkpointed).Milliseconds())
	failed := 0
	for _, err := range errs {
		if err != nil {
			failed++
		}
	}
	return executors.Forked{Memory: failed < len(children), Snapshot: name}, errors.Join(errs...)
}

// checkpointRunning writes the kernel's bundle and a --leave-running
// checkpoint into dir and returns the image path. extra are more
// checkpoint flags (a named snapshot's compression).
func (e *Executor) checkpointRunning(ctx context.Context, k *dkernel, dir string, extra ...string) (string, error) {
	rt, err := e.runscRuntime(ctx)
	if err != nil {
		return "", err
	}
	image := filepath.Join(dir, "image")
	if err := os.MkdirAll(image, 0o700); err != nil {
		return "", err
	}
	root, id := e.engineRunscRoot(), k.b.id
	ckState.mu.Lock()
	if rb := ckState.restored[k.b]; rb != nil {
		root, id = rb.root, rb.id
	}
	ckState.mu.Unlock()
	if err := e.keepBundle(ctx, rt, root, id, dir); err != nil {
		removeSnapshot(dir)
		return "", err
	}
	cctx, cancel := context.WithTimeout(ctx, checkpointTimeout)
	defer cancel()
	args := append([]string{"checkpoint", "--leave-running", "--image-path=" + image}, extra...)
	if err := rt.run(cctx, root, nil, append(args, id)...); err != nil {
		removeSnapshot(dir)
		return "", fmt.Errorf("docker: checkpoint the kernel: %w", err)
	}
	return image, nil
}

// forkChild restores image as child's kernel, on the child's workspace.
func (e *Executor) forkChild(ctx context.Context, parentShape shape, dir, image string, c executors.ForkChild, extra ...string) error {
	cdir := filepath.Join(e.snapshotBase(), dirName(c.SessionID), randomID())
	if err := os.MkdirAll(cdir, 0o700); err != nil {
		return err
	}
	if err := childBundle(dir, cdir, parentShape.dir, c.WorkspaceDir); err != nil {
		removeSnapshot(cdir)
		return err
	}
	sh := parentShape
	sh.dir = c.WorkspaceDir
	k, err := e.restoreFrom(ctx, c.SessionID, &checkpoint{dir: cdir, shape: sh}, image, extra...)
	if err != nil {
		removeSnapshot(cdir)
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if oc, err := k.conn.Run(rctx, kernel.Cell{Code: reseedCode, Timeout: 20 * time.Second}, io.Discard, io.Discard); err != nil || oc.ExitCode != 0 {
		e.discardKernel(k)
		return fmt.Errorf("docker: reseed the child's generators: exit %d: %w", oc.ExitCode, err)
	}
	ks := e.kernels
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if old := ks.m[c.SessionID]; old != nil {
		e.discardKernel(old)
	}
	ks.m[c.SessionID] = k
	ks.had[c.SessionID] = true
	k.idle = time.AfterFunc(kernelIdle, func() { ks.expire(c.SessionID, k) })
	return nil
}

// childBundle copies the parent's bundle from dir into cdir with every
// bind mount of the parent's workspace made the child's.
func childBundle(dir, cdir, parentWS, childWS string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, en := range entries {
		if !en.Type().IsRegular() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, en.Name()))
		if err != nil {
			return err
		}
		if en.Name() == "config.json" {
			if data, err = rebindWorkspace(data, dir, cdir, parentWS, childWS); err != nil {
				return err
			}
		}
		if err := os.WriteFile(filepath.Join(cdir, en.Name()), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// rebindWorkspace rewrites a bundle's mount sources: the parent's
// workspace (or a directory under it) becomes the child's, and files
// copied into the parent's bundle dir come from the child's. No other
// host bind of the parent can be carried: a kernel's container has only
// the workspace (twice with a layout root), the hosts and resolv.conf
// files standalone copies into the bundle, and a private /dev/shm tmpfs,
// never the egress socket directory, since a stateful run granted
// network is refused (executeCell) and its shape has no egress.
func rebindWorkspace(raw []byte, dir, cdir, parentWS, childWS string) ([]byte, error) {
	var spec map[string]any
	if err := json.Unmarshal(raw, &spec); err != nil {
		return nil, err
	}
	mounts, _ := spec["mounts"].([]any)
	for _, mv := range mounts {
		m, ok := mv.(map[string]any)
		if !ok {
			continue
		}
		src, _ := m["source"].(string)
		if rel, err := filepath.Rel(parentWS, src); err == nil && filepath.IsLocal(rel) || src == parentWS {
			m["source"] = filepath.Join(childWS, rel)
		} else if rel, err := filepath.Rel(dir, src); err == nil && filepath.IsLocal(rel) {
			m["source"] = filepath.Join(cdir, rel)
		}
	}
	if lx, ok := spec["linux"].(map[string]any); ok {
		lx["cgroupsPath"] = "/sandgate-restored/" + filepath.Base(cdir)
	}
	return json.Marshal(spec)
}
