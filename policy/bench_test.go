package policy

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/rego"
)

// trivialAllow prepares OPA's trivial policy with the same input, as the
// baseline DESIGN.md asks decision benchmarks to be measured against.
func trivialAllow(b *testing.B) rego.PreparedEvalQuery {
	b.Helper()
	pq, err := rego.New(rego.Query("data.trivial.allow"),
		rego.Module("trivial.rego", "package trivial\n\nallow := true\n")).PrepareForEval(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	return pq
}

func benchInput() Input {
	in := baseInput("STRICT", "MEDIUM", false)
	in.Risk.Patterns = []RiskPattern{
		{ID: "python.fs.write_outside", Level: "MEDIUM", Line: 3},
		{ID: "python.net.http_client", Level: "MEDIUM", Line: 9},
	}
	return in
}

func BenchmarkDecide(b *testing.B) {
	e := newEngine(b, Options{})
	in := benchInput()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if d := e.Decide(ctx, in); d.Action != ActionAllow {
			b.Fatalf("unexpected %+v", d)
		}
	}
}

func BenchmarkTrivialAllow(b *testing.B) {
	pq := trivialAllow(b)
	m := benchInput().Map()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := pq.Eval(ctx, rego.EvalInput(m)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecideVsTrivial alternates the two in one loop so machine drift
// hits both equally, and reports the p50 of each and their ratio.
func BenchmarkDecideVsTrivial(b *testing.B) {
	e := newEngine(b, Options{})
	pq := trivialAllow(b)
	in := benchInput()
	ctx := context.Background()
	var dec, triv []time.Duration
	for b.Loop() {
		t0 := time.Now()
		e.Decide(ctx, in)
		t1 := time.Now()
		if _, err := pq.Eval(ctx, rego.EvalInput(in.Map())); err != nil {
			b.Fatal(err)
		}
		dec, triv = append(dec, t1.Sub(t0)), append(triv, time.Since(t1))
	}
	pd, pt := p50(dec), p50(triv)
	b.ReportMetric(float64(pd)/1e3, "decide-p50-µs")
	b.ReportMetric(float64(pt)/1e3, "trivial-p50-µs")
	b.ReportMetric(float64(pd)/float64(pt), "ratio")
}

func p50(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
