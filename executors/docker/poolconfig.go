package docker

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// PoolConfig sizes the pool of pre-started, never-used sandboxes
// (pool.go). The zero value takes the defaults below.
type PoolConfig struct {
	// Size is how many sandboxes each shape's pool keeps idle when
	// sessions arrive slowly; more are kept (up to Max) while they arrive
	// faster. Default DefaultPoolSize.
	Size int `yaml:"size"`
	// Max bounds the pooled sandboxes (idle and being started) across
	// shapes. Zero: what the machine's memory allows (defaultPoolMax);
	// negative disables the pool.
	Max int `yaml:"max"`
	// Shapes bounds the shapes (image, limits, layout) pooled at once,
	// the most recently claimed ones. Default DefaultPoolShapes.
	Shapes int `yaml:"shapes"`
	// Dir is the host directory of the pool's slots (made a shared
	// mount). It must be on the engine's host, in its mount namespace.
	// Default DefaultPoolDir.
	Dir string `yaml:"dir"`
}

// Pool defaults. An idle pooled sandbox costs what an idle warm container
// does (package doc, "Warm starts"): ~16 MiB under runc (its boot shell
// and containerd shim), ~76 MiB RSS under gVisor (shim, gofer, sentry),
// plus its Python boot step (poolboot.go): ~7 MiB RSS under runc, ~5 MiB
// under gVisor (measured against a shell waiting on stdin).
const (
	DefaultPoolSize   = 2
	DefaultPoolShapes = 4
	DefaultPoolDir    = "/var/lib/sandgate/pool"
	// poolMaxCap bounds the default Max whatever the memory: each
	// sandbox started is a container start on the engine, whose CPU a
	// small machine's runs share.
	poolMaxCap = 8
	// poolMemShare is the share of the machine's memory idle pooled
	// sandboxes may take by default: 1/64 (376 MiB of a 24 GiB machine).
	poolMemShare = 64
	// The memory an idle pooled sandbox costs, in MiB (measured, see
	// above), by runtime kind.
	poolCostRuncMiB   = 23
	poolCostGVisorMiB = 81
)

// withDefaults fills the zero fields; ownKernel selects the gVisor cost.
func (c PoolConfig) withDefaults(ownKernel bool) PoolConfig {
	c.Size = orInt(c.Size, DefaultPoolSize)
	c.Shapes = orInt(c.Shapes, DefaultPoolShapes)
	c.Dir = orString(c.Dir, DefaultPoolDir)
	if c.Max == 0 {
		c.Max = defaultPoolMax(memTotalMiB(), ownKernel)
	}
	if c.Max > 0 {
		c.Size = min(c.Size, c.Max)
	}
	return c
}

// defaultPoolMax is the pool cap for a machine of memMiB: its memory
// share divided by one sandbox's cost, at least one and at most
// poolMaxCap. On a 2-core, 24 GiB machine (MemTotal 24105 MiB, 1/64 of it
// 376 MiB): 8 under runc (376 / 23 = 16,
// capped), 4 under gVisor (376 / 81).
func defaultPoolMax(memMiB int, ownKernel bool) int {
	cost := poolCostRuncMiB
	if ownKernel {
		cost = poolCostGVisorMiB
	}
	return max(1, min(poolMaxCap, memMiB/poolMemShare/cost))
}

// memTotalMiB reads MemTotal from /proc/meminfo; 4 GiB when it cannot.
func memTotalMiB() int {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 4096
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			if err == nil {
				return kb / 1024
			}
		}
	}
	return 4096
}
