package subprocess

import (
	"log/slog"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/executortest"
)

// BenchmarkStartCost compares `python3 -c 'print(1)'` spawned directly
// (same binary, same minimal environment) with the same program run through
// the executor, in the same process, and reports each one's p50. The
// product target is executor p50 ≤ raw p50 + 5 ms.
//
//	go test -run '^$' -bench StartCost -benchtime 200x ./executors/subprocess/
func BenchmarkStartCost(b *testing.B) {
	python, err := lookPath("python3", DefaultSandboxPATH)
	if err != nil {
		b.Skip(err)
	}
	env := []string{"PATH=" + DefaultSandboxPATH, "HOME=/tmp", "LANG=" + DefaultLang}
	b.Run("raw", func(b *testing.B) {
		measure(b, func() {
			cmd := exec.Command(python, "-I", "-u", "-c", "print(1)")
			cmd.Env = env
			if out, err := cmd.Output(); err != nil || string(out) != "1\n" {
				b.Fatalf("%q %v", out, err)
			}
		})
	})
	b.Run("executor", func(b *testing.B) {
		e, err := New(b.Context(), Config{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("isolation: %s", e.Isolation())
		spec := executors.Spec{Language: executors.LangPython, Code: "print(1)",
			WorkspaceDir: newBenchWorkspace(b), Network: e.Isolation() != IsolationNamespaces}
		measure(b, func() {
			spec.RequestID = "bench-" + executortest.Nonce()
			res, err := e.Execute(b.Context(), spec)
			if err != nil || res.Stdout != "1\n" {
				b.Fatalf("%+v %v", res, err)
			}
		})
	})
}

// newBenchWorkspace is executortest.NewWorkspace for a *testing.B.
func newBenchWorkspace(b *testing.B) string {
	dir := b.TempDir()
	if err := chmod711(dir); err != nil {
		b.Fatal(err)
	}
	return dir
}

// measure runs f b.N times and reports the median duration in ms.
func measure(b *testing.B, f func()) {
	durs := make([]time.Duration, 0, b.N)
	for b.Loop() {
		began := time.Now()
		f()
		durs = append(durs, time.Since(began))
	}
	slices.Sort(durs)
	b.ReportMetric(float64(durs[len(durs)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(durs[len(durs)*9/10].Microseconds())/1000, "p90-ms")
}
