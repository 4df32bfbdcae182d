package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
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
		m, err := fleetMixed(ctx, o, dir, bin, dsn, run.driver, run.replicas)
		if err != nil {
			return res, fmt.Errorf("%s: %w", run.label, err)
		}
		fmt.Printf("fleet: %s\n", run.label)
		m.print()
		m.All.LatMS = nil
		res.Runs = append(res.Runs, fleetRun{Label: run.label, Driver: run.driver, Replicas: run.replicas, Mixed: m})
	}
	return res, nil
}

// fleetMixed starts n replicas (a fresh schema, one shared data
// directory) and runs the mixed workload through them round-robin.
func fleetMixed(ctx context.Context, o opts, dir, bin, dsn, driver string, n int) (mixedResult, error) {
	runDir, err := os.MkdirTemp(dir, driver)
	if err != nil {
		return mixedResult{}, err
	}
	if err := os.Chmod(runDir, 0o711); err != nil {
		return mixedResult{}, err
	}
	yaml := "mode: PERMISSIVE\nexecutors: {docker: {enabled: false}, gvisor: {enabled: false}, aio: {enabled: false}}\nbrowser: {enabled: false}\nmcp: {enabled: false}\n"
	var env []string
	if driver == "postgres" {
		schema := "bench_" + randHex()
		if err := pgExec(ctx, dsn, "CREATE SCHEMA "+schema); err != nil {
			return mixedResult{}, err
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
			return mixedResult{}, err
		}
		procs = append(procs, g)
	}
	front := &gatewayProc{cmd: procs[0].cmd, base: procs[0].base, client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128}}}
	for _, g := range procs {
		front.bases = append(front.bases, g.base)
	}
	runMixed(ctx, front, fleetSessions, 3*time.Second, false, false, nil) // warm-up: interpreters, connections, ownership
	return runMixed(ctx, front, fleetSessions, o.mixedDur, false, true, nil), nil
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
