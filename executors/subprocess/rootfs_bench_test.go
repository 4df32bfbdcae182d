package subprocess

import (
	"bytes"
	"log/slog"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
)

// BenchmarkRootCost measures what the minimal root adds to one cold launch
// (namespaces mode): the launch chain running `true` with the run's root
// built on its own thread (startInRoot) against the same chain started
// from the shared spawner in the host's root, alternating in one loop so
// both see the same load. Zygote and warm runs pay it off the request's
// path (when the zygote or interpreter starts); a zygote run pays one
// tmpfs mount for its /tmp instead.
//
//	go test -run '^$' -bench RootCost -benchtime 300x ./executors/subprocess/
func BenchmarkRootCost(b *testing.B) {
	requireRoot(b)
	e, err := New(b.Context(), Config{Logger: slog.New(slog.DiscardHandler), DisableWarm: true, RootDir: runtimeRoot(b)})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close(b.Context())
	if e.Isolation() != IsolationNamespaces {
		b.Skipf("isolation %s", e.Isolation())
	}
	ws := newBenchWorkspace(b)
	launchOnce := func(rooted bool) time.Duration {
		l := launch{argv: []string{"/bin/true"}, limits: e.limitsFor("", e.cfg.Limits), dir: ws,
			env: e.env(executors.Layout{}), uid: e.cfg.SandboxUID, gid: e.cfg.SandboxGID}
		if rooted {
			l.root = e.rootFor(ws, executors.Layout{})
		}
		cmd := e.command(l)
		if !rooted {
			cmd.Dir = ws
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		began := time.Now()
		p, err := e.startLaunch(cmd, l)
		if err != nil {
			b.Fatal(err)
		}
		<-p.done
		if p.err != nil {
			b.Fatalf("%v: %s", p.err, stderr.String())
		}
		return time.Since(began)
	}
	var with, without []time.Duration
	for b.Loop() {
		with = append(with, launchOnce(true))
		without = append(without, launchOnce(false))
	}
	w, wo := median(with), median(without)
	b.ReportMetric(ms(wo), "host-root-p50-ms")
	b.ReportMetric(ms(w), "minimal-root-p50-ms")
	b.ReportMetric(ms(w-wo), "root-cost-p50-ms")
	b.ReportMetric(float64(w)/float64(wo), "minimal/host")
}
