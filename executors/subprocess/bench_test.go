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
// the executor. Each iteration runs one of each, back to back, so both see
// the same machine load; it reports both p50s and their difference. The
// product target is executor p50 ≤ raw p50 + 5 ms.
//
//	go test -run '^$' -bench StartCost -benchtime 300x ./executors/subprocess/
func BenchmarkStartCost(b *testing.B) {
	python, err := lookPath("python3", DefaultSandboxPATH)
	if err != nil {
		b.Skip(err)
	}
	env := []string{"PATH=" + DefaultSandboxPATH, "HOME=/tmp", "LANG=" + DefaultLang}
	raw := func() {
		cmd := exec.Command(python, "-I", "-u", "-c", "print(1)")
		cmd.Env = env
		if out, err := cmd.Output(); err != nil || string(out) != "1\n" {
			b.Fatalf("%q %v", out, err)
		}
	}
	e, err := New(b.Context(), Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("isolation: %s", e.Isolation())
	spec := executors.Spec{Language: executors.LangPython, Code: "print(1)",
		WorkspaceDir: newBenchWorkspace(b), Network: e.Isolation() != IsolationNamespaces}
	viaExecutor := func() {
		spec.RequestID = "bench-" + executortest.Nonce()
		res, err := e.Execute(b.Context(), spec)
		if err != nil || res.Stdout != "1\n" {
			b.Fatalf("%+v %v", res, err)
		}
	}
	var rawDurs, execDurs []time.Duration
	for b.Loop() {
		rawDurs = append(rawDurs, timed(raw))
		execDurs = append(execDurs, timed(viaExecutor))
	}
	rawP50, execP50 := median(rawDurs), median(execDurs)
	b.ReportMetric(ms(rawP50), "raw-p50-ms")
	b.ReportMetric(ms(execP50), "executor-p50-ms")
	b.ReportMetric(ms(execP50-rawP50), "overhead-p50-ms")
}

func timed(f func()) time.Duration {
	began := time.Now()
	f()
	return time.Since(began)
}

func median(d []time.Duration) time.Duration {
	d = slices.Clone(d)
	slices.Sort(d)
	return d[len(d)/2]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// newBenchWorkspace is executortest.NewWorkspace for a *testing.B.
func newBenchWorkspace(b *testing.B) string {
	dir := b.TempDir()
	if err := chmod711(dir); err != nil {
		b.Fatal(err)
	}
	return dir
}
