package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
)

// startGVisorGateway starts a second gateway for the gVisor scenario. Its
// policy is the default one with the README's one data change
// (isolation_upgrade.min_level LOW: everything not SAFE goes to gVisor),
// so the scenario's code runs in gVisor without an approval in the loop.
// Only its gvisor executor runs containers, under an instance of its own:
// neither gateway reaps the other's containers.
func startGVisorGateway(ctx context.Context) (*gatewayProc, error) {
	dir, bin, err := buildGateway(ctx)
	if err != nil {
		return nil, err
	}
	pol := filepath.Join(dir, "policy")
	if err := copyPolicy("policy/rego", pol); err != nil {
		return nil, err
	}
	yaml := fmt.Sprintf(`policy:
  dir: %s
browser:
  enabled: false
executors:
  docker:
    enabled: false
  aio:
    enabled: false
  gvisor:
    enabled: true
    instance: sgbench-gv%s
`, pol, randHex())
	return launchGateway(dir, bin, yaml, "sandgate-bench-gvisor-gateway.log")
}

// copyPolicy copies the default Rego tree to dst with min_level LOW.
func copyPolicy(src, dst string) error {
	if err := copyTree(src, dst); err != nil {
		return err
	}
	data := filepath.Join(dst, "sandgate", "config", "data.json")
	b, err := os.ReadFile(data)
	if err != nil {
		return err
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		return err
	}
	up, ok := cfg["isolation_upgrade"].(map[string]any)
	if !ok {
		return fmt.Errorf("%s has no isolation_upgrade", data)
	}
	up["min_level"] = "LOW"
	b, err = json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(data, b, 0o644)
}

// gvisorCLILabel and the other labels name the scenario's sides (the
// report looks them up).
const (
	gvisorFreshLabel = "gateway fresh (gVisor)"
	gvisorB2BLabel   = "gateway warm, back to back (gVisor)"
	runscCLILabel    = "docker run --runtime=runsc CLI"
	runcCLILabel     = "docker run CLI (runc)"
)

func gvisorPacedLabel(o opts) string { return warmPacedLabel(o.think) + " (gVisor)" }

// scenarioGVisor: STRICT Python via gVisor, fresh, warm with think time
// and warm back to back, against `docker run --rm --runtime=runsc
// --network none` and the same under runc, in one run.
func scenarioGVisor(ctx context.Context, o opts) (abResult, error) {
	g, err := startGVisorGateway(ctx)
	if err != nil {
		return abResult{}, err
	}
	defer g.stop()
	var seq atomic.Int64
	prefix := "gv-fresh-" + randHex()
	fresh := func(ctx context.Context) (time.Duration, error) {
		id := fmt.Sprintf("%s-%d", prefix, seq.Add(1))
		t0 := time.Now()
		err := g.runCode(ctx, id, strictCode, false, "gvisor")
		d := time.Since(t0)
		if derr := g.deleteSession(ctx, id); err == nil && derr != nil {
			err = fmt.Errorf("delete session: %w", derr)
		}
		return d, err
	}
	warm := g.runCodeSide("bench-gvisor", strictCode, false, "gvisor")
	paced := g.runCodeSide("bench-gvisor-paced", strictCode, false, "gvisor")
	think := o.think
	pacedSide := func(ctx context.Context) (time.Duration, error) {
		time.Sleep(think)
		return paced(ctx)
	}
	runsc := rawSide("docker", "run", "--rm", "--runtime=runsc", "--network", "none", o.image, "python3", "-c", "print(1)")
	runc := rawSide("docker", "run", "--rm", "--network", "none", o.image, "python3", "-c", "print(1)")
	for _, s := range []side{warm, warm, paced, runsc, runc, fresh} { // warm-up
		if _, err := s(ctx); err != nil {
			return abResult{}, err
		}
	}
	r, err := ab(ctx, "gvisor", "STRICT Python via gVisor: gateway fresh and warm vs docker run under runsc and runc",
		[]named{{label: gvisorFreshLabel, s: fresh}, {label: gvisorB2BLabel, s: warm},
			{label: gvisorPacedLabel(o), s: pacedSide}, {label: runscCLILabel, s: runsc}, {label: runcCLILabel, s: runc}},
		1, o.dockerN, o.dockerBlock)
	if err == nil {
		r.print(os.Stdout)
	}
	return r, err
}
