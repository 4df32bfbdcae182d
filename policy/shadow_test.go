package policy

import (
	"context"
	"testing"
	"time"
)

// denyBash is a candidate rule: no bash at all (the live policy allows
// it in PERMISSIVE mode).
const denyBash = `package sandgate.exec

deny_reasons contains reason("admin.no_bash", "bash is not allowed") if input.request.language == "bash"
`

func TestShadowCountsDisagreementsAndChangesNothing(t *testing.T) {
	candidate := treeWith(t, map[string]string{"sandgate/exec/nobash.rego": denyBash})
	plain := newEngine(t, Options{})
	e := newEngine(t, Options{ShadowFS: candidate})
	ctx := context.Background()

	python := baseInput("PERMISSIVE", "LOW", false)
	bash := baseInput("PERMISSIVE", "LOW", false)
	bash.Request.Language = "bash"
	var bashIDs []string
	for i := range 6 {
		in := python
		if i%2 == 1 {
			in = bash
		}
		d := e.Decide(ctx, in)
		want := plain.Decide(ctx, in)
		if d.Action != want.Action || d.Executor != want.Executor || d.PolicyRevision != want.PolicyRevision {
			t.Fatalf("the shadow changed an outcome: %+v, without it %+v", d, want)
		}
		if in.Request.Language == "bash" {
			bashIDs = append(bashIDs, d.DecisionID)
		}
	}
	e.DecideEgress(ctx, EgressInput{Mode: "PERMISSIVE", Host: "pypi.org", Port: 443, Scheme: "https"})

	st, ok := e.ShadowStatus()
	if !ok {
		t.Fatal("no shadow status")
	}
	if st.Evaluated[execLogPath] != 6 || st.Disagreements[execLogPath] != 3 || st.Evaluated[egressLogPath] != 1 || st.Disagreements[egressLogPath] != 0 {
		t.Fatalf("counts: evaluated %v disagreements %v", st.Evaluated, st.Disagreements)
	}
	if len(st.Recent) != 3 {
		t.Fatalf("recent: %+v", st.Recent)
	}
	for i, d := range st.Recent {
		if d.DecisionID != bashIDs[i] || d.Active.Action != ActionAllow || d.Candidate.Action != ActionDeny || len(d.InputSHA256) != 64 {
			t.Fatalf("disagreement %d: %+v", i, d)
		}
		if d.InputSHA256 != st.Recent[0].InputSHA256 {
			t.Fatal("equal inputs, different digests")
		}
	}
	if _, ok := plain.ShadowStatus(); ok {
		t.Fatal("a shadow status without a shadow")
	}
}

func TestShadowThatDoesNotCompileIsAnError(t *testing.T) {
	_, err := New(context.Background(), Options{ShadowFS: treeWith(t, map[string]string{"sandgate/exec/x.rego": "package sandgate.exec\n\nx := "})})
	if err == nil {
		t.Fatal("a broken shadow was accepted")
	}
}

// BenchmarkDecideShadowVsNone alternates a decision without and with a
// shadow policy; issue 32 asks for a ratio of at most 2.
func BenchmarkDecideShadowVsNone(b *testing.B) {
	plain := newEngine(b, Options{})
	shadowed := newEngine(b, Options{ShadowFS: treeWith(b, map[string]string{"sandgate/exec/nobash.rego": denyBash})})
	in := benchInput()
	ctx := context.Background()
	var a, s []time.Duration
	for b.Loop() {
		t0 := time.Now()
		plain.Decide(ctx, in)
		t1 := time.Now()
		shadowed.Decide(ctx, in)
		a, s = append(a, t1.Sub(t0)), append(s, time.Since(t1))
	}
	b.ReportMetric(float64(p50(a))/1e3, "none-p50-µs")
	b.ReportMetric(float64(p50(s))/1e3, "shadow-p50-µs")
	b.ReportMetric(float64(p50(s))/float64(p50(a)), "ratio")
}
