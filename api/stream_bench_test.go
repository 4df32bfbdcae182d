package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/subprocess"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/risk"
	"github.com/sandgate/sandgate/workspace"
)

// streamBenchGateway is newStreamEnv's gateway for a benchmark: real
// SQLite audit (the gateway's default durability), workspaces, OPA with
// every PERMISSIVE level routed to backend, the subprocess executor and
// backend's, behind a real listener.
func streamBenchGateway(b *testing.B, backend string) *httptest.Server {
	b.Helper()
	ctx := context.Background()
	dir := b.TempDir()
	traversable(b, dir)
	st, err := audit.Open(ctx, filepath.Join(dir, "audit.db"), audit.Options{})
	if err != nil {
		b.Fatal(err)
	}
	ws, err := workspace.New(filepath.Join(dir, "workspaces"), workspace.Options{})
	if err != nil {
		b.Fatal(err)
	}
	eng, err := policy.New(ctx, policy.Options{EvalTimeout: testEvalTimeout, FS: routedPolicy(b, backend)})
	if err != nil {
		b.Fatal(err)
	}
	sp, err := subprocess.New(ctx, subprocess.Config{})
	if err != nil {
		b.Fatal(err)
	}
	execs := []executors.Executor{sp}
	switch backend {
	case "docker":
		execs = append(execs, newDockerExecutor(b))
	case "aio":
		execs = append(execs, newAIOExecutor(b))
	}
	reg := prometheus.NewRegistry()
	mgr, err := manager.New(manager.Config{Mode: "PERMISSIVE"}, manager.Deps{
		Assessor: risk.NewAssessor(nil, nil), Policy: eng, Executors: execs,
		Workspaces: ws, Audit: st, Metrics: manager.NewMetrics(reg),
	})
	if err != nil {
		b.Fatal(err)
	}
	auth, err := NewAuth([]Token{NewToken("a", RoleAgent, agentTok)})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(New(Config{}, Deps{Manager: mgr, Policy: eng, Audit: st, Auth: auth, Gatherer: reg}))
	b.Cleanup(func() {
		srv.Close()
		_ = mgr.Close(context.Background())
		_ = st.Close()
	})
	return srv
}

// benchRun posts code to run_code, as JSON or as a stream, and returns
// when the first stdout event came (streams only) and when the answer
// was complete. It fails b unless stdout is want.
func benchRun(b *testing.B, srv *httptest.Server, code, want string, stream bool) (first, total time.Duration) {
	body, _ := json.Marshal(runCode(code, "python"))
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/sessions/bench/run_code", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+agentTok)
	if stream {
		req.Header.Set("Accept", mediaNDJSON)
	}
	start := time.Now()
	res, err := srv.Client().Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer res.Body.Close()
	if !stream {
		var out map[string]any
		raw, _ := io.ReadAll(res.Body)
		if err := json.Unmarshal(raw, &out); err != nil || out["stdout"] != want {
			b.Fatalf("run_code: %d %s", res.StatusCode, raw)
		}
		return 0, time.Since(start)
	}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var ev struct {
			Event string         `json:"event"`
			Body  map[string]any `json:"body"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			b.Fatal(err)
		}
		switch ev.Event {
		case "stdout":
			if first == 0 {
				first = time.Since(start)
			}
		case "exit":
			if ev.Body["stdout"] != want {
				b.Fatalf("exit %v", ev.Body)
			}
			return first, time.Since(start)
		case "error":
			b.Fatalf("error event %s", sc.Bytes())
		}
	}
	b.Fatalf("the stream ended without exit: %v", sc.Err())
	return 0, 0
}

// BenchmarkStreamFirstByte: the time until the first stdout byte of the
// five-line program (five lines 300 ms apart) reaches a streaming client,
// against the p50 of the same program answered as JSON, interleaved in
// the same run. It reports both p50s and their ratio.
//
//	SANDGATE_REQUIRE_DOCKER=1 go test -run '^$' -bench StreamFirstByte -benchtime 10x ./api/
func BenchmarkStreamFirstByte(b *testing.B) {
	const want = "line 1\nline 2\nline 3\nline 4\nline 5\n"
	for _, backend := range []string{"subprocess", "docker", "aio"} {
		b.Run(backend, func(b *testing.B) {
			srv := streamBenchGateway(b, backend)
			for range 2 { // warm both paths
				benchRun(b, srv, fiveLines, want, true)
				benchRun(b, srv, fiveLines, want, false)
			}
			var firsts, plains []time.Duration
			for b.Loop() {
				first, _ := benchRun(b, srv, fiveLines, want, true)
				_, plain := benchRun(b, srv, fiveLines, want, false)
				firsts, plains = append(firsts, first), append(plains, plain)
			}
			f, p := median(firsts), median(plains)
			b.ReportMetric(float64(f.Microseconds())/1000, "stream_first_stdout_p50_ms")
			b.ReportMetric(float64(p.Microseconds())/1000, "json_p50_ms")
			b.ReportMetric(float64(f)/float64(p), "first_over_json")
		})
	}
}

// BenchmarkStreamOverhead: print(1) streamed against print(1) as plain
// JSON, interleaved (alternating which goes first) in the same run: the
// p50 ratio is what streaming costs a short run (target ≤ 1.1).
//
//	SANDGATE_REQUIRE_DOCKER=1 go test -run '^$' -bench StreamOverhead -benchtime 200x ./api/
func BenchmarkStreamOverhead(b *testing.B) {
	for _, backend := range []string{"subprocess", "docker", "aio"} {
		b.Run(backend, func(b *testing.B) {
			srv := streamBenchGateway(b, backend)
			for range 5 {
				benchRun(b, srv, "print(1)", "1\n", true)
				benchRun(b, srv, "print(1)", "1\n", false)
			}
			var streams, plains []time.Duration
			for i := 0; b.Loop(); i++ {
				if i%2 == 0 {
					_, s := benchRun(b, srv, "print(1)", "1\n", true)
					_, p := benchRun(b, srv, "print(1)", "1\n", false)
					streams, plains = append(streams, s), append(plains, p)
				} else {
					_, p := benchRun(b, srv, "print(1)", "1\n", false)
					_, s := benchRun(b, srv, "print(1)", "1\n", true)
					streams, plains = append(streams, s), append(plains, p)
				}
			}
			s, p := median(streams), median(plains)
			b.ReportMetric(float64(s.Microseconds())/1000, "stream_p50_ms")
			b.ReportMetric(float64(p.Microseconds())/1000, "json_p50_ms")
			b.ReportMetric(float64(s)/float64(p), "p50_ratio")
		})
	}
}
