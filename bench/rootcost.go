package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
)

// rootCostResult is what the subprocess executor's minimal root adds to a
// launch (DESIGN.md §6), from its own benchmark: the launch chain running
// `true` with the run's root against the same chain in the host's root,
// alternating in one process, so both see the same load.
type rootCostResult struct {
	HostP50MS    float64 `json:"host_root_p50_ms"`
	MinimalP50MS float64 `json:"minimal_root_p50_ms"`
	CostP50MS    float64 `json:"root_cost_p50_ms"`
	Ratio        float64 `json:"minimal_over_host"`
	N            int     `json:"n"`
}

var benchMetric = regexp.MustCompile(`([0-9.-]+) (host-root-p50-ms|minimal-root-p50-ms|root-cost-p50-ms|minimal/host)`)

// scenarioRootCost runs BenchmarkRootCost (the launch path is internal to
// the executor, so it cannot be timed from outside the process) with the
// runtime root when SANDGATE_RUNTIME_ROOT names one.
func scenarioRootCost(ctx context.Context, n int) (rootCostResult, error) {
	cmd := exec.CommandContext(ctx, "go", "test", "-run", "^$", "-bench", "RootCost",
		"-benchtime", strconv.Itoa(n)+"x", "./executors/subprocess/")
	cmd.Env = os.Environ()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return rootCostResult{}, fmt.Errorf("BenchmarkRootCost: %w: %s", err, firstLine(string(out)))
	}
	r := rootCostResult{N: n}
	for _, m := range benchMetric.FindAllStringSubmatch(string(out), -1) {
		v, _ := strconv.ParseFloat(m[1], 64)
		switch m[2] {
		case "host-root-p50-ms":
			r.HostP50MS = v
		case "minimal-root-p50-ms":
			r.MinimalP50MS = v
		case "root-cost-p50-ms":
			r.CostP50MS = v
		case "minimal/host":
			r.Ratio = v
		}
	}
	if r.Ratio == 0 {
		return r, fmt.Errorf("BenchmarkRootCost reported nothing (not root?): %s", firstLine(string(out)))
	}
	fmt.Printf("minimal root: cold launch p50 %.2f ms vs %.2f ms in the host's root (%.2f×, %+.2f ms), n=%d\n",
		r.MinimalP50MS, r.HostP50MS, r.Ratio, r.CostP50MS, n)
	return r, nil
}
