package docker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sandgate/sandgate/executors"
)

// Named snapshots (issue 30): a --leave-running checkpoint of the
// session's kernel, with its standalone bundle and shape, written into a
// directory the manager owns inside the snapshot. Starting a session
// from it is a fork's restore (fork.go) on the new session's workspace,
// generators reseeded, from any replica: everything the restore needs is
// in that directory, and the image is never consumed.

// snapshotCompression is runsc's flag for a compressed image.
const snapshotCompression = "--compression=flate-best-speed"

// SaveSnapshot implements executors.SessionSnapshotter.
func (e *Executor) SaveSnapshot(ctx context.Context, session, dir string, o executors.SnapshotOptions) (executors.Paused, error) {
	if e.snapshotMode() != executors.SnapshotMemory {
		return executors.Paused{}, nil
	}
	e.reapRestored(ctx)
	ks := e.kernels
	ks.mu.Lock()
	k := ks.m[session]
	ks.mu.Unlock()
	if k == nil || !k.conn.Alive() {
		return executors.Paused{}, nil
	}
	release, err := k.conn.Acquire(ctx)
	if err != nil {
		return executors.Paused{}, fmt.Errorf("docker: wait for the kernel: %w", err)
	}
	defer release()
	var extra []string
	if o.Compress {
		extra = append(extra, snapshotCompression)
	}
	image, err := e.checkpointRunning(ctx, k, dir, extra...)
	if err != nil {
		return executors.Paused{}, err
	}
	if err := saveShape(&checkpoint{dir: dir, shape: k.b.shape}); err != nil {
		_ = os.RemoveAll(dir)
		return executors.Paused{}, err
	}
	return executors.Paused{Memory: true, Bytes: dirSize(image)}, nil
}

// RestoreSnapshot implements executors.SessionSnapshotter.
func (e *Executor) RestoreSnapshot(ctx context.Context, dir string, c executors.ForkChild) (bool, error) {
	if e.snapshotMode() != executors.SnapshotMemory {
		return false, nil
	}
	sh, ok := readShape(dir)
	if !ok {
		return false, nil
	}
	image := filepath.Join(dir, "image")
	if _, err := os.Stat(filepath.Join(image, "checkpoint.img")); err != nil {
		return false, nil
	}
	e.reapRestored(ctx)
	var extra []string
	if _, err := os.Stat(filepath.Join(image, "pages.img")); err == nil {
		extra = append(extra, lazyPages) // uncompressed: pages load after
	}
	if err := e.forkChild(ctx, sh, dir, image, c, extra...); err != nil {
		return false, err
	}
	return true, nil
}
