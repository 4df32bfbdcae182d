package main

import (
	"context"
	"fmt"
	"os"
	"time"
)

// kernelCode is a data-analysis cell: pandas and a small aggregation. A
// stateless run pays the interpreter's start and the imports every time;
// a cell in the session's kernel pays them once.
const kernelCode = "import pandas as pd\n" +
	"df = pd.DataFrame({'k': [i % 7 for i in range(1000)], 'v': range(1000)})\n" +
	"print(int(df.groupby('k')['v'].sum().max()))"

// kernelWant is kernelCode's output.
const kernelWant = "71786\n"

// Labels of the kernel scenario's sides.
const (
	kernelCellLabel      = "stateful cell (session kernel, docker)"
	kernelStatelessLabel = "stateless run_code (docker, warm session)"
)

// e2bWarmRunMS is E2B code-interpreter's published figure for a second
// run in a warm sandbox (about 80–100 ms; its documentation and blog,
// measured on E2B's infrastructure, not here): a reference only.
const e2bWarmRunMS = "80–100 ms"

// scenarioKernel: the same cell as a stateful run in the session's
// kernel against a stateless run_code in a warm docker session, both
// through the gateway, both in the docker executor (DESIGN.md §11).
func scenarioKernel(ctx context.Context, g *gatewayProc, o opts) (abResult, error) {
	cell := timed(func(ctx context.Context) error { return g.runKernelCell(ctx, "bench-kernel", kernelCode) })
	stateless := timed(func(ctx context.Context) error {
		return g.runCodeWant(ctx, "bench-kernel-stateless", kernelCode, kernelWant)
	})
	// Warm-up: the kernel's start and first imports, the warm container.
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	for _, s := range []side{cell, cell, stateless, stateless} {
		if _, err := s(wctx); err != nil {
			return abResult{}, err
		}
	}
	r, err := ab(ctx, "kernel", "A pandas cell: stateful (session kernel) vs stateless run_code, both docker",
		[]named{{label: kernelCellLabel, s: cell}, {label: kernelStatelessLabel, s: stateless}}, 1, o.kernelN, o.dockerBlock)
	if err == nil {
		r.print(os.Stdout)
		fmt.Printf("reference only, not measured here: E2B code-interpreter's published warm second run, %s\n", e2bWarmRunMS)
	}
	return r, err
}

// runKernelCell posts a stateful cell and checks its output and that
// docker ran it.
func (g *gatewayProc) runKernelCell(ctx context.Context, session, code string) error {
	return g.runChecked(ctx, session, map[string]any{"code": code, "language": "python", "stateful": true, "timeout_s": 120}, kernelWant, "docker")
}

// runCodeWant posts a stateless run_code and checks its output and that
// docker ran it.
func (g *gatewayProc) runCodeWant(ctx context.Context, session, code, want string) error {
	return g.runChecked(ctx, session, map[string]any{"code": code, "language": "python", "timeout_s": 120}, want, "docker")
}
