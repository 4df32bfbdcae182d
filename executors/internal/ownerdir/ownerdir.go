// Package ownerdir makes the per-process directories of executors in a
// shared temporary directory (the subprocess executor's run directory,
// the container executors' /etc files) and removes those of processes
// that died without cleaning up. Each directory names its owner; a
// gateway killed with SIGKILL (or OOM-killed) leaves its directories
// behind, and without this every restart would leave more (issue 21's
// soak counted them).
package ownerdir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sandgate/sandgate/internal/procfs"
)

// ownerFile, in a directory, names the process that made it: its
// pid and its start time (clock ticks since boot, /proc/PID/stat field
// 22), so that a recycled pid is not mistaken for the owner.
const ownerFile = "owner"

// Make removes the stale directories named prefix* in parent (see
// RemoveStale), then makes a new one owned by this process, mode perm.
func Make(parent, prefix string, perm os.FileMode) (string, error) {
	RemoveStale(parent, prefix)
	dir, err := os.MkdirTemp(parent, prefix)
	if err != nil {
		return "", err
	}
	if err := errors.Join(writeOwner(dir), os.Chmod(dir, perm)); err != nil {
		_ = os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// writeOwner records this process as the owner of dir.
func writeOwner(dir string) error {
	st, err := procStart(os.Getpid())
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, ownerFile), fmt.Appendf(nil, "%d %d\n", os.Getpid(), st), 0o600)
}

// RemoveStale removes the directories named prefix* in parent whose
// owner is gone. A directory without an owner file, or whose owner still
// runs (another gateway sharing the temporary directory), is left alone.
func RemoveStale(parent, prefix string) {
	ents, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, d := range ents {
		if !d.IsDir() || !strings.HasPrefix(d.Name(), prefix) {
			continue
		}
		dir := filepath.Join(parent, d.Name())
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue
		}
		var pid int
		var start uint64
		if _, err := fmt.Sscan(string(b), &pid, &start); err != nil || pid <= 0 {
			continue
		}
		if now, err := procStart(pid); err == nil && now == start {
			continue // the owner runs
		}
		_ = os.RemoveAll(dir)
	}
}

// procStart is the start time of process pid, in clock ticks since boot.
func procStart(pid int) (uint64, error) {
	s, err := procfs.ReadStat(pid)
	return s.Start, err
}
