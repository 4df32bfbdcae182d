package manager

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/subprocess"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/risk"
	"github.com/sandgate/sandgate/workspace"
)

// BenchmarkTenancyOverhead: what authorization (resolving the caller's
// session) and the tenant's quota checks add to a SAFE print(1), the
// pipeline's fastest request, measured against itself in the same run.
//
// Each iteration does, interleaved so both see the same machine: a Run on
// a manager with every quota set (finite limits that do not bind: each
// check does its work), a Run on a manager with no quotas (the checks find
// nothing to check), and the resolution plus admission alone. Both managers
// use the real policy, the real subprocess executor (zygotes on), real
// workspaces and a SQLite audit log, as the gateway does, the log with
// synchronous=normal so that an fsync per record does not inflate the run
// the checks are compared with. Reported:
//
//	run-p50-µs         Run with every check
//	run-noquota-p50-µs Run with no quota configured
//	checks-p50-µs      ResolveSession + admit + release alone
//	checks-%           checks-p50 / (run-p50 - checks-p50): what the checks
//	                   add to a run without them (issue 14: at most 2 %)
//	quota-ratio        run-p50 / run-noquota-p50
//
//	go test -run '^$' -bench TenancyOverhead -benchtime 400x ./manager/
func BenchmarkTenancyOverhead(b *testing.B) {
	ctx := context.Background()
	sp, err := subprocess.New(ctx, subprocess.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer sp.Close(ctx)
	if err := sp.Available(ctx); err != nil {
		b.Skipf("subprocess executor unavailable: %v", err)
	}
	eng, err := policy.New(ctx, policy.Options{})
	if err != nil {
		b.Fatal(err)
	}
	limits := Quota{MaxSessions: 1000, MaxConcurrentRuns: 64, MaxWorkspaceBytes: 10 << 30, RequestsPerSecond: 1e9, Burst: 1 << 30}
	on := benchManager(b, eng, sp, QuotaConfig{Default: limits})
	off := benchManager(b, eng, sp, QuotaConfig{})
	p := Principal{Role: "agent", Name: "bench", Tenant: "team-a"}
	req := RunRequest{Kind: KindRunCode, Principal: p, SessionID: "bench", Language: "python", Code: "print(1)"}
	for _, m := range []*Manager{on, off} { // warm both sessions' zygotes
		for range 5 {
			if _, err := m.Run(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	}
	var runOn, runOff, checks []time.Duration
	for b.Loop() {
		t0 := time.Now()
		res, err := on.Run(ctx, req)
		t1 := time.Now()
		if err != nil || res.Result.Stdout != "1\n" {
			b.Fatalf("run: %+v %v", res, err)
		}
		if _, err := off.Run(ctx, req); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		ref, err := on.ResolveSession(p, req.SessionID)
		if err != nil {
			b.Fatal(err)
		}
		release, err := on.admit(ctx, ref, opRun)
		release()
		if err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		runOn, runOff, checks = append(runOn, t1.Sub(t0)), append(runOff, t2.Sub(t1)), append(checks, t3.Sub(t2))
	}
	pOn, pOff, pChecks := p50(runOn), p50(runOff), p50(checks)
	b.ReportMetric(us(pOn), "run-p50-µs")
	b.ReportMetric(us(pOff), "run-noquota-p50-µs")
	b.ReportMetric(us(pChecks), "checks-p50-µs")
	b.ReportMetric(100*float64(pChecks)/float64(pOn-pChecks), "checks-%")
	b.ReportMetric(float64(pOn)/float64(pOff), "quota-ratio")
}

func benchManager(b *testing.B, eng *policy.Engine, sp executors.Executor, q QuotaConfig) *Manager {
	b.Helper()
	dir := b.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} { // the sandbox uid must reach its workspace
		if err := os.Chmod(d, 0o711); err != nil {
			b.Fatal(err)
		}
	}
	ws, err := workspace.New(filepath.Join(dir, "ws"), workspace.Options{
		TenantQuotaBytes: func(t string) int64 { return q.For(t).MaxWorkspaceBytes },
	})
	if err != nil {
		b.Fatal(err)
	}
	st, err := audit.Open(context.Background(), filepath.Join(dir, "audit.db"), audit.Options{Synchronous: "normal"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	m, err := New(Config{Mode: "STRICT", Quotas: q}, Deps{Assessor: risk.NewAssessor(nil, nil), Policy: eng,
		Executors: []executors.Executor{sp}, Workspaces: ws, Audit: st})
	if err != nil {
		b.Fatal(err)
	}
	return m
}

func p50(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
