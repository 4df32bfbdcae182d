package docker

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
)

// A restored kernel's CPU quota is applied after runsc has restored it,
// not by runsc while it restores. The restore itself (the sentry reading
// the checkpoint's kernel state and pages) runs inside the sandbox's
// cgroup, and under the session's quota of one CPU it took about 50 ms
// longer at p50 on this 2-core machine (bench -only pause): that is the
// gateway's work on the resume's path, not the session's. The quota is
// set before the restored kernel is handed to anyone, so no cell of the
// session runs without it; the kernel's own processes, which were
// stopped at the checkpoint, wait for their next request meanwhile. A
// quota that cannot be set fails the restore (the sandbox is deleted).

// cpuLimitFile holds a kept bundle's CPU quota, taken out of its
// config.json by standalone.
const cpuLimitFile = "cpu-limit.json"

// cpuLimit is an OCI linux.resources.cpu quota and period.
type cpuLimit struct {
	Quota  int64  `json:"quota"`
	Period uint64 `json:"period"`
}

// takeCPULimit removes the CPU quota and period from spec's resources
// and writes them into dir; a spec with no quota writes nothing.
func takeCPULimit(spec map[string]any, dir string) error {
	lx, _ := spec["linux"].(map[string]any)
	res, _ := lx["resources"].(map[string]any)
	cpu, _ := res["cpu"].(map[string]any)
	quota, _ := cpu["quota"].(float64)
	if quota <= 0 {
		return nil
	}
	period, _ := cpu["period"].(float64)
	delete(cpu, "quota")
	delete(cpu, "period")
	raw, err := json.Marshal(cpuLimit{Quota: int64(quota), Period: uint64(period)})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, cpuLimitFile), raw, 0o600)
}

// applyCPULimit sets the quota kept in bundle on the restored sandbox's
// cgroup (cgroupsPath /sandgate-restored/<bundle's name>, see
// standalone) under root (cgroupRoot), on cgroup v2 or v1. A bundle kept before quotas were
// taken out has no file: runsc applied its quota itself.
func applyCPULimit(root, bundle string) error {
	raw, err := readCPULimit(bundle)
	if raw == nil || err != nil {
		return err
	}
	var l cpuLimit
	if err := json.Unmarshal(raw, &l); err != nil {
		return fmt.Errorf("docker: %s: %w", cpuLimitFile, err)
	}
	if l.Period == 0 {
		l.Period = 100000 // the kernel's default CFS period
	}
	rel := filepath.Join("sandgate-restored", filepath.Base(bundle))
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		max := strconv.FormatInt(l.Quota, 10) + " " + strconv.FormatUint(l.Period, 10)
		return writeCgroup(filepath.Join(root, rel, "cpu.max"), max)
	}
	dir := filepath.Join(root, "cpu", rel)
	if err := writeCgroup(filepath.Join(dir, "cpu.cfs_period_us"), strconv.FormatUint(l.Period, 10)); err != nil {
		return err
	}
	return writeCgroup(filepath.Join(dir, "cpu.cfs_quota_us"), strconv.FormatInt(l.Quota, 10))
}

func writeCgroup(path, value string) error {
	if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
		return fmt.Errorf("docker: set the restored kernel's CPU quota: %w", err)
	}
	return nil
}

// carryCPULimit copies the quota kept beside the bundle a kernel was
// restored from (from) into the bundle kept of it now (to), when to's
// spec had none: a restored kernel's config.json no longer holds its
// quota, so a pause, fork or snapshot of a resumed kernel would
// otherwise restore without one.
func carryCPULimit(from, to string) error {
	if _, err := os.Stat(filepath.Join(to, cpuLimitFile)); err == nil {
		return nil
	}
	raw, err := readCPULimit(from)
	if raw == nil || err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(to, cpuLimitFile), raw, 0o600)
}

// readCPULimit is the quota kept beside bundle, nil when none was kept.
func readCPULimit(bundle string) ([]byte, error) {
	raw, err := os.ReadFile(filepath.Join(bundle, cpuLimitFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return raw, err
}
