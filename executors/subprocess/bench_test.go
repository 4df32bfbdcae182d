package subprocess

import (
	"context"
	"log/slog"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/executortest"
)

// BenchmarkStartCost compares a one-line program spawned directly (same
// binary, same minimal environment; for python `python3 -I -u -c
// 'print(1)'`) with the same program run through the executor cold (warm
// interpreters disabled) and warm (a session's run served by the
// interpreter its previous run left or, for python as root, by the
// session's zygote), per language. Each iteration runs
// one of each, back to back, so all three see the same machine load.
// Before the warm run and before the raw one it waits, untimed, until the
// session's next interpreter is ready: the warm run then measures a
// session whose requests are not back to back (an agent thinks between
// them), and that interpreter's start-up does not slow the other two. It
// reports the three p50s, the overheads over raw and the ratios. The
// product target is gateway p50 ≤ raw p50 + 5 ms.
//
//	go test -run '^$' -bench 'StartCost/python' -benchtime 300x ./executors/subprocess/
func BenchmarkStartCost(b *testing.B) {
	// warmUID, not the default uid: RLIMIT_NPROC is per uid, and other
	// tests' fork bombs must not starve the benchmark's node threads.
	cfg := Config{Logger: slog.New(slog.DiscardHandler), SandboxUID: warmUID, SandboxGID: warmUID}
	cold, err := New(b.Context(), Config{Logger: cfg.Logger, SandboxUID: warmUID, SandboxGID: warmUID, DisableWarm: true})
	if err != nil {
		b.Fatal(err)
	}
	warm, err := New(b.Context(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer warm.Close(context.Background())
	b.Logf("isolation: %s", cold.Isolation())
	for _, tc := range []struct {
		lang, interp string
		rawArgs      []string
		code         string
	}{
		{executors.LangPython, "python3", []string{"-I", "-u", "-c", "print(1)"}, "print(1)"},
		{executors.LangJavaScript, "node", []string{"-e", "console.log(1)"}, "console.log(1)"},
		{executors.LangBash, "bash", []string{"--noprofile", "--norc", "-c", "echo 1"}, "echo 1"},
	} {
		b.Run(tc.lang, func(b *testing.B) {
			interp, err := lookPath("/", tc.interp, DefaultSandboxPATH)
			if err != nil {
				b.Skip(err)
			}
			benchStartCost(b, cold, warm, tc.lang, append([]string{interp}, tc.rawArgs...), tc.code)
		})
	}
}

func benchStartCost(b *testing.B, cold, warm *Executor, lang string, rawArgv []string, code string) {
	env := []string{"PATH=" + DefaultSandboxPATH, "HOME=/tmp", "LANG=" + DefaultLang}
	raw := func() {
		cmd := exec.Command(rawArgv[0], rawArgv[1:]...)
		cmd.Env = env
		if out, err := cmd.Output(); err != nil || string(out) != "1\n" {
			b.Fatalf("%q %v", out, err)
		}
	}
	spec := executors.Spec{SessionID: "bench-" + executortest.Nonce(), Language: lang,
		Code: code, WorkspaceDir: newBenchWorkspace(b)}
	via := func(e *Executor) func() {
		return func() {
			spec.RequestID = "bench-" + executortest.Nonce()
			res, err := e.Execute(b.Context(), spec)
			if err != nil || res.Stdout != "1\n" {
				b.Fatalf("%+v %v", res, err)
			}
		}
	}
	if err := warm.Prewarm(b.Context(), spec); err != nil {
		b.Fatal(err)
	}
	ready := func() {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			var ok bool
			if warm.useZygote(lang) {
				z := zygoteOf(warm, spec.SessionID)
				ok = z != nil && closed(z.ready)
			} else {
				warm.warm.mu.Lock()
				s := warm.warm.sessions[spec.SessionID]
				ok = s != nil && s.warm != nil && closed(s.warm.ready)
				warm.warm.mu.Unlock()
			}
			if ok {
				return
			}
			time.Sleep(100 * time.Microsecond)
		}
		b.Fatal("no warm interpreter became ready")
	}
	hits := warm.WarmStats().Hits
	var rawDurs, coldDurs, warmDurs []time.Duration
	for b.Loop() {
		ready()
		warmDurs = append(warmDurs, timed(via(warm)))
		ready()
		rawDurs = append(rawDurs, timed(raw))
		coldDurs = append(coldDurs, timed(via(cold)))
	}
	if got := warm.WarmStats().Hits - hits; got != uint64(len(warmDurs)) {
		b.Fatalf("%d of %d warm runs were served warm", got, len(warmDurs))
	}
	if err := warm.ReleaseSession(context.Background(), spec.SessionID); err != nil {
		b.Fatal(err)
	}
	rawP50, coldP50, warmP50 := median(rawDurs), median(coldDurs), median(warmDurs)
	b.ReportMetric(ms(rawP50), "raw-p50-ms")
	b.ReportMetric(ms(coldP50), "cold-p50-ms")
	b.ReportMetric(ms(warmP50), "warm-p50-ms")
	b.ReportMetric(ms(coldP50-rawP50), "cold-overhead-p50-ms")
	b.ReportMetric(ms(warmP50-rawP50), "warm-overhead-p50-ms")
	b.ReportMetric(float64(coldP50)/float64(rawP50), "cold/raw")
	b.ReportMetric(float64(warmP50)/float64(rawP50), "warm/raw")
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
