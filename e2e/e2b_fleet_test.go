package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fleetReport is what fleet.mjs (e2b/ or daytona/) or failover.mjs prints.
type fleetReport struct {
	SandboxID string    `json:"sandbox_id"`
	PID       int       `json:"pid"`
	Steps     []e2bStep `json:"steps"`
}

// runFleetClient runs dir/fleet.mjs against the fleet's three replicas
// with env (the SDK's key), and returns its report by step.
func runFleetClient(ctx context.Context, t *testing.T, f *fleet, node, dir string, env ...string) (string, map[string]e2bStep) {
	t.Helper()
	rep := runFleetScript(ctx, t, f, node, dir, "fleet.mjs", env...)
	steps := map[string]e2bStep{}
	for _, s := range rep.Steps {
		steps[s.Step] = s
	}
	return rep.SandboxID, steps
}

func runFleetScript(ctx context.Context, t *testing.T, f *fleet, node, dir, script string, env ...string) fleetReport {
	t.Helper()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Dir = dir
	base := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "E2B_") || strings.HasPrefix(kv, "DAYTONA_")
	})
	cmd.Env = append(base, env...)
	cmd.Env = append(cmd.Env, "SANDGATE_A="+f.bases["a"], "SANDGATE_B="+f.bases["b"], "SANDGATE_C="+f.bases["c"])
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node %s/%s: %v\nstderr: %s\n%s", dir, script, err, stderr.String(), f.logTails())
	}
	var rep fleetReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("%s/%s output: %v: %.2000s", dir, script, err, stdout.String())
	}
	return rep
}

// checkSteps runs each check on its step's result; a step that threw,
// or is missing, fails.
func checkFleetSteps(t *testing.T, steps map[string]e2bStep, checks map[string]func(json.RawMessage) error) {
	t.Helper()
	for name, check := range checks {
		s, ok := steps[name]
		switch {
		case !ok:
			t.Errorf("step %s: missing", name)
		case len(s.Thrown) > 0:
			t.Errorf("step %s threw: %s", name, s.Thrown)
		default:
			if err := check(s.Result); err != nil {
				t.Errorf("step %s: %v: %s", name, err, s.Result)
			}
		}
	}
}

// equalJSON is a check that the result is want, as JSON.
func fleetEqual(want string) func(json.RawMessage) error {
	return func(raw json.RawMessage) error {
		var got, exp any
		if err := json.Unmarshal(raw, &got); err != nil {
			return err
		}
		if err := json.Unmarshal([]byte(want), &exp); err != nil {
			return err
		}
		g, _ := json.Marshal(got)
		e, _ := json.Marshal(exp)
		if !bytes.Equal(g, e) {
			return fmt.Errorf("want %s", e)
		}
		return nil
	}
}

// TestFleetE2BAndDaytona: three gateway replicas on one PostgreSQL. One
// E2B sandbox, created through A with the unmodified e2b SDK, is driven
// through B and C (each replica its own apiUrl and sandboxUrl): a
// command through B writes /tmp, one through C reads it (one session
// sandbox, fleet-wide); a file written through C is read through A and
// by a command through B; a background command started through B is
// listed through C and killed through A; pause through C (isRunning
// through B is then false), a pause
// through A answers false (already paused), connect through B resumes it
// and the workspace is there; fork through C gives a new sandbox with
// the file; kill through A ends it for B and C (isRunning false, a
// command fails). The session's containers are all on A's instance.
// Then one Daytona sandbox, created through A, runs code through B and a
// command through C, uploads through B and downloads through A, and is
// deleted through C (then 404 through B).
func TestFleetE2BAndDaytona(t *testing.T) {
	node, _ := requireE2BClient(t)
	requireDaytonaClient(t)
	f, ctx := startFleetTest(t, "fleete2b")
	instance := f.instance

	id, steps := runFleetClient(ctx, t, f, node, e2bClientDir, "E2B_API_KEY="+f.agent)
	checkFleetSteps(t, steps, map[string]func(json.RawMessage) error{
		"run_on_b":       fleetEqual(`"42\n"`),
		"tmp_on_c":       fleetEqual(`"42\n"`),
		"files_c_to_a_b": fleetFiles,
		"background":     fleetBackground,
		"pause_resume": fleetEqual(`{"paused":true,"state":"paused","runningWhilePaused":false,"pausedAgain":false,"stateAfter":"running",
			"file":"written through C\n"}`),
		"fork": fleetEqual(`{"read":"written through C\n","distinct":true}`),
		"kill": fleetEqual(`{"killedOnA":true,"runningOnB":false,"runningOnC":false}`),
	})
	if s := steps["run_after_kill"]; len(s.Thrown) == 0 {
		t.Errorf("a command through B after the kill ran: %s", s.Result)
	}
	if id == "" {
		t.Fatal("no sandbox id in the report")
	}
	// After the kill, none of the sandbox's containers is left anywhere.
	var list []string
	for range 30 {
		if list = containers(t, instance+"-", "env-agent~"+id); len(list) == 0 {
			break
		}
		time.Sleep(time.Second)
	}
	if len(list) != 0 {
		t.Errorf("containers of the killed sandbox remain 30 s after the kill: %v", list)
	}

	_, steps = runFleetClient(ctx, t, f, node, daytonaClientDir, "DAYTONA_API_KEY="+f.agent)
	checkFleetSteps(t, steps, map[string]func(json.RawMessage) error{
		"code_run_on_b": fleetEqual(`"hello from B\n"`),
		"execute_on_c":  fleetEqual(`"from-c\n"`),
		"files":         fleetDaytonaFiles,
		"delete_on_c":   fleetEqual(`{"gone":{"name":"DaytonaNotFoundError","statusCode":404}}`),
	})
}

func fleetFiles(raw json.RawMessage) error {
	r, err := decodeAs[struct {
		ReadOnA   string   `json:"readOnA"`
		CatOnB    string   `json:"catOnB"`
		ListedOnB []string `json:"listedOnB"`
	}](raw)
	if err != nil || r.ReadOnA != "written through C\n" || r.CatOnB != "written through C\n" || !slices.Contains(r.ListedOnB, "fleet.txt") {
		return fmt.Errorf("want the file written through C read through A and B (%v)", err)
	}
	return nil
}

func fleetBackground(raw json.RawMessage) error {
	r, err := decodeAs[struct {
		PID         int  `json:"pid"`
		ListedOnC   bool `json:"listedOnC"`
		KilledOnA   bool `json:"killedOnA"`
		ListedAfter bool `json:"listedAfter"`
	}](raw)
	if err != nil || r.PID == 0 || !r.ListedOnC || !r.KilledOnA || r.ListedAfter {
		return fmt.Errorf("want the process started through B listed through C, killed through A, then gone (%v)", err)
	}
	return nil
}

func fleetDaytonaFiles(raw json.RawMessage) error {
	r, err := decodeAs[struct {
		DownloadOnA string   `json:"downloadOnA"`
		CatOnC      string   `json:"catOnC"`
		ListedOnA   []string `json:"listedOnA"`
		MadeOnC     string   `json:"madeOnC"`
	}](raw)
	if err != nil || r.DownloadOnA != "uploaded through B\n" || !strings.HasPrefix(r.CatOnC, "uploaded through B") ||
		!slices.Contains(r.ListedOnA, "b.txt") || r.MadeOnC != "from-c\n" {
		return fmt.Errorf("want the upload through B downloaded through A and read through C (%v)", err)
	}
	return nil
}

// TestFleetE2BFailover: an E2B sandbox made on replica A, with a file and
// a background command, outlives A's death (SIGKILL): connecting through
// B adopts its session (its record is in the store), the file is there
// and commands run; the background command, which lived in A's memory,
// is not listed and connecting to it fails with the SDK's not-found
// error, never a second copy. A kill through C ends it.
func TestFleetE2BFailover(t *testing.T) {
	node, _ := requireE2BClient(t)
	f, ctx := startFleetTest(t, "fleetfo")
	instance := f.instance
	key := "E2B_API_KEY=" + f.agent
	start := runFleetScript(ctx, t, f, node, e2bClientDir, "failover.mjs", key, "FAILOVER_PHASE=start")
	if start.SandboxID == "" || start.PID == 0 {
		t.Fatalf("start: %+v", start)
	}
	_ = f.procs["a"].Process.Signal(syscall.SIGKILL)
	t.Cleanup(func() { removeInstance(t, instance+"-a") })
	after := runFleetScript(ctx, t, f, node, e2bClientDir, "failover.mjs", key, "FAILOVER_PHASE=after",
		"SANDBOX_ID="+start.SandboxID, "PID="+strconv.Itoa(start.PID))
	steps := map[string]e2bStep{}
	for _, s := range after.Steps {
		steps[s.Step] = s
	}
	checkFleetSteps(t, steps, map[string]func(json.RawMessage) error{
		"file_survives": fleetEqual(`"written before the failover\n"`),
		"command_runs":  fleetEqual(`"written before the failover\n"`),
		"process_gone": func(raw json.RawMessage) error {
			r, err := decodeAs[struct {
				Listed  bool `json:"listed"`
				Connect *struct {
					Name    string `json:"name"`
					Message string `json:"message"`
				} `json:"connect"`
			}](raw)
			if err != nil || r.Listed || r.Connect == nil || r.Connect.Name != "NotFoundError" {
				return fmt.Errorf("want the process not listed and connect raising NotFoundError (%v)", err)
			}
			return nil
		},
		"kill": fleetEqual(`true`),
	})
}
