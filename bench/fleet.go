package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandgate/sandgate/policy"
)

// The fleet scenario (issue 15): the mixed workload at 8 sessions against
// one gateway on SQLite, one on PostgreSQL, and three replicas on
// PostgreSQL behind a round-robin client (every session's requests
// spread over the three, so two in three are forwarded to the session's
// owner). On one machine the replicas share its cores: the point of a
// fleet is surviving the loss of a replica, not throughput here.

// fleetSessions is the mixed workload's concurrency in the fleet runs.
const fleetSessions = 8

type fleetRun struct {
	Label    string      `json:"label"`
	Driver   string      `json:"driver"`
	Replicas int         `json:"replicas"`
	Mixed    mixedResult `json:"mixed"`
}

type fleetResult struct {
	Runs []fleetRun `json:"runs"`
	// Release is the cross-replica approval release, end to end
	// (releaseLatency), on the three replicas.
	Release *stats `json:"release,omitempty"`
}

func scenarioFleet(ctx context.Context, o opts) (fleetResult, error) {
	dsn, stopPG, err := benchPostgres(ctx)
	if err != nil {
		return fleetResult{}, err
	}
	defer stopPG()
	dir, bin, err := buildGateway(ctx)
	if err != nil {
		return fleetResult{}, err
	}
	defer os.RemoveAll(dir)
	var res fleetResult
	for _, run := range []struct {
		label, driver string
		replicas      int
	}{{"1 gateway, SQLite", "sqlite", 1}, {"1 replica, PostgreSQL", "postgres", 1}, {"3 replicas, PostgreSQL", "postgres", 3}} {
		m, rel, err := fleetMixed(ctx, o, dir, bin, dsn, run.driver, run.replicas)
		if err != nil {
			return res, fmt.Errorf("%s: %w", run.label, err)
		}
		if rel != nil {
			fmt.Printf("fleet: approval release, decision on one replica to the response on another: p50 %.2f ms p99 %.2f ms n=%d\n", rel.P50, rel.P99, rel.N)
			res.Release = rel
		}
		fmt.Printf("fleet: %s\n", run.label)
		m.print()
		m.All.LatMS = nil
		res.Runs = append(res.Runs, fleetRun{Label: run.label, Driver: run.driver, Replicas: run.replicas, Mixed: m})
	}
	return res, nil
}

// fleetMixed starts n replicas (a fresh schema, one shared data
// directory) and runs the mixed workload through them round-robin; with
// several replicas it then times the approval release across two.
func fleetMixed(ctx context.Context, o opts, dir, bin, dsn, driver string, n int) (mixedResult, *stats, error) {
	runDir, err := os.MkdirTemp(dir, driver)
	if err != nil {
		return mixedResult{}, nil, err
	}
	if err := os.Chmod(runDir, 0o711); err != nil {
		return mixedResult{}, nil, err
	}
	policyDir := filepath.Join(runDir, "policy")
	if err := approvalPolicy(policyDir); err != nil {
		return mixedResult{}, nil, err
	}
	yaml := "mode: PERMISSIVE\npolicy: {dir: " + policyDir + "}\nexecutors: {docker: {enabled: false}, gvisor: {enabled: false}, aio: {enabled: false}}\nbrowser: {enabled: false}\nmcp: {enabled: false}\n"
	var env []string
	if driver == "postgres" {
		schema := "bench_" + randHex()
		if err := pgExec(ctx, dsn, "CREATE SCHEMA "+schema); err != nil {
			return mixedResult{}, nil, err
		}
		defer func() { _ = pgExec(context.WithoutCancel(ctx), dsn, "DROP SCHEMA "+schema+" CASCADE") }()
		yaml += "storage: {driver: postgres}\n"
		env = append(env, "SANDGATE_STORAGE_DSN="+dsn+" search_path="+schema)
	}
	var procs []*gatewayProc
	defer func() {
		for _, g := range procs {
			g.stopKeep()
		}
	}()
	for i := range n {
		g, err := launchGatewayEnv(runDir, bin, yaml, fmt.Sprintf("sandgate-bench-fleet-%d.log", i),
			append(env, fmt.Sprintf("SANDGATE_REPLICA=r%d", i)))
		if err != nil {
			return mixedResult{}, nil, err
		}
		procs = append(procs, g)
	}
	front := &gatewayProc{cmd: procs[0].cmd, base: procs[0].base, client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128}}}
	for _, g := range procs {
		front.bases = append(front.bases, g.base)
	}
	runMixed(ctx, front, fleetSessions, 3*time.Second, false, false, nil) // warm-up: interpreters, connections, ownership
	m := runMixed(ctx, front, fleetSessions, o.mixedDur, false, true, nil)
	if n < 2 {
		return m, nil, nil
	}
	rel, err := releaseLatency(ctx, procs[0], procs[1])
	if err != nil {
		return m, nil, fmt.Errorf("approval release: %w", err)
	}
	return m, &rel, nil
}

// benchPostgres is the cluster of SANDGATE_BENCH_POSTGRES_DSN or
// SANDGATE_TEST_POSTGRES_DSN, or a private one scripts/postgres.sh starts
// (and stop removes).
func benchPostgres(ctx context.Context) (dsn string, stop func(), err error) {
	for _, k := range []string{"SANDGATE_BENCH_POSTGRES_DSN", "SANDGATE_TEST_POSTGRES_DSN"} {
		if v := os.Getenv(k); v != "" {
			return v, func() {}, nil
		}
	}
	pgdir := filepath.Join(os.TempDir(), "sgbench-pg-"+randHex())
	out, err := exec.CommandContext(ctx, "./scripts/postgres.sh", "start", pgdir).Output()
	if err != nil {
		return "", nil, fmt.Errorf("start PostgreSQL (scripts/postgres.sh): %w", err)
	}
	return strings.TrimSpace(string(out)), func() { _ = exec.Command("./scripts/postgres.sh", "stop", pgdir).Run() }, nil
}

func pgExec(ctx context.Context, dsn, stmt string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, stmt)
	return err
}

// releaseRuns is how many held requests the release measurement times.
const releaseRuns = 60

// releaseLatency times the cross-replica approval release end to end: a
// streamed run_code of HIGH-risk code held on a, approved through b's
// REST API, timed from sending the decision on b to the approval_resolved
// event arriving in a's response (b's handler, the conditional update and
// NOTIFY, a's LISTEN and row read, a's stream). The run that follows is
// not timed.
func releaseLatency(ctx context.Context, a, b *gatewayProc) (stats, error) {
	var lat []time.Duration
	for i := range releaseRuns + 5 { // the first five warm up
		d, err := releaseOnce(ctx, a, b)
		if err != nil {
			return stats{}, err
		}
		if i >= 5 {
			lat = append(lat, d)
		}
	}
	return summarize(lat, 0), nil
}

func releaseOnce(ctx context.Context, a, b *gatewayProc) (time.Duration, error) {
	req, _ := http.NewRequestWithContext(ctx, "POST", a.base+"/v1/sessions/release/run_code",
		strings.NewReader(`{"code":"import subprocess\nprint(1)","language":"python"}`))
	req.Header.Set("Authorization", "Bearer "+agentToken)
	req.Header.Set("Accept", "application/x-ndjson")
	res, err := a.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	dec := json.NewDecoder(res.Body)
	var t0 time.Time
	for {
		var ev struct {
			Event    string `json:"event"`
			Approval struct {
				ID string `json:"id"`
			} `json:"approval"`
		}
		if err := dec.Decode(&ev); err != nil {
			return 0, fmt.Errorf("held run's stream: %w", err)
		}
		switch ev.Event {
		case "approval_pending":
			t0 = time.Now()
			dreq, _ := http.NewRequestWithContext(ctx, "POST", b.base+"/v1/approvals/"+ev.Approval.ID+"/decision",
				strings.NewReader(`{"decision":"approve"}`))
			dreq.Header.Set("Authorization", "Bearer "+adminToken)
			dres, err := b.client.Do(dreq)
			if err != nil {
				return 0, err
			}
			_, _ = io.Copy(io.Discard, dres.Body)
			dres.Body.Close()
			if dres.StatusCode != 200 {
				return 0, fmt.Errorf("decision on b: %d", dres.StatusCode)
			}
		case "approval_resolved":
			d := time.Since(t0)
			_, _ = io.Copy(io.Discard, res.Body) // the run
			return d, nil
		case "error":
			return 0, errors.New("held run ended with an error event")
		}
	}
}

// approvalPolicy writes the embedded policy into dir with PERMISSIVE's
// HIGH approvals run by the subprocess executor (no Docker needed).
func approvalPolicy(dir string) error {
	return fs.WalkDir(policy.DefaultFS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(policy.DefaultFS(), p)
		if err != nil {
			return err
		}
		if p == "sandgate/config/data.json" {
			var data map[string]any
			if err := json.Unmarshal(b, &data); err != nil {
				return err
			}
			data["modes"].(map[string]any)["PERMISSIVE"].(map[string]any)["HIGH"].(map[string]any)["executor"] = "subprocess"
			if b, err = json.Marshal(data); err != nil {
				return err
			}
		}
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, p), b, 0o644)
	})
}
