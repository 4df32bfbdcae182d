package main

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/rego"

	"github.com/sandgate/sandgate/executors/executortest"
	"github.com/sandgate/sandgate/internal/policytest"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/risk"
)

// BenchmarkAssessDecide is steps 2 and 3 of the pipeline on 4 KiB of Python:
// risk.Assess, then the prepared policy decision. It reports the p50 per
// request (target <= 150 µs on the 2-core reference machine), and OPA's
// trivial-allow policy measured in the same loop as the baseline.
func BenchmarkAssessDecide(b *testing.B) {
	code, err := os.ReadFile("../risk/testdata/bench_4k.py")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	eng, err := policy.New(ctx, policy.Options{EvalTimeout: policytest.EvalTimeout})
	if err != nil {
		b.Fatal(err)
	}
	trivial, err := rego.New(rego.Query("data.t.allow"), rego.Module("t.rego", "package t\n\nallow := true\n")).PrepareForEval(ctx)
	if err != nil {
		b.Fatal(err)
	}
	assessor := risk.NewAssessor(nil, nil)
	var both, triv []time.Duration
	b.ReportAllocs()
	for b.Loop() {
		t0 := time.Now()
		a, err := assessor.Assess(string(code), "python")
		if err != nil {
			b.Fatal(err)
		}
		in := policy.Input{
			Mode: "STRICT",
			Request: policy.Request{Kind: "run_code", SessionID: "bench", Language: "python", CodeBytes: len(code),
				CodeSHA256: policy.SHA256Hex(code), TimeoutS: 30},
			Risk:      policy.Risk{Level: a.Level.String(), ProvenSafe: a.ProvenSafe},
			Principal: policy.Principal{Role: "agent", Name: "bench"},
			Executors: map[string]policy.ExecutorState{
				"subprocess": {Available: true, Capabilities: executortest.FullCapabilities().Map()},
				"docker":     {Available: true, Capabilities: executortest.FullCapabilities().Map()},
			},
		}
		for _, p := range a.Patterns {
			in.Risk.Patterns = append(in.Risk.Patterns, policy.RiskPattern{ID: p.ID, Level: p.Level.String(), Line: p.Line})
		}
		if d := eng.Decide(ctx, in); d.Action == "" {
			b.Fatal("no decision")
		}
		t1 := time.Now()
		if _, err := trivial.Eval(ctx, rego.EvalInput(in.Map())); err != nil {
			b.Fatal(err)
		}
		both, triv = append(both, t1.Sub(t0)), append(triv, time.Since(t1))
	}
	p50 := func(ds []time.Duration) float64 {
		s := slices.Clone(ds)
		slices.Sort(s)
		return float64(s[len(s)/2]) / 1e3
	}
	b.ReportMetric(p50(both), "assess+decide-p50-µs")
	b.ReportMetric(p50(triv), "trivial-p50-µs")
}
