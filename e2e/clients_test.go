package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The packages this repository publishes (clients/*), each with its own
// test suite in its own language, run here against a real gateway.
const (
	tsClientDir = "../clients/typescript"
	pyClientDir = "../clients/python"
)

// systemPath is where the Python suite's interpreter is looked up: the
// system python3 that scripts/ensure-deps.sh installs, not a per-user
// one, since the package promises to need nothing but the standard
// library of an ordinary python3.
const systemPath = "/usr/local/bin:/usr/bin:/bin"

// TestClients runs the TypeScript package's `npm test` (node:test, with
// the real npm deepagents) and the Python package's unittest suite
// (system python3, standard library only) against one gateway process per
// security mode, the two suites side by side. The suites read the
// gateway's URL and tokens from SANDGATE_* variables, and fail rather
// than skip without them when SANDGATE_REQUIRE_NPM_CLIENTS=1 (make test).
func TestClients(t *testing.T) {
	requireNode(t)
	npm := requireTool(t, "npm", os.Getenv("PATH"))
	python := requireTool(t, "python3", systemPath)
	requireInstalled(t, tsClientDir)
	for _, mode := range []string{"STRICT", "PERMISSIVE"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			g := startGateway(t, mode, "--config", sharedMachineConfig(t, ""))
			env := append(os.Environ(),
				"SANDGATE_URL="+g.base, "SANDGATE_TOKEN="+g.agent, "SANDGATE_APPROVER_TOKEN="+g.approver,
				"SANDGATE_MODE="+mode, "SANDGATE_REQUIRE_NPM_CLIENTS=1")
			// The suites mostly wait on the gateway and the engine, so
			// they run at once rather than in turn (or in a parallel
			// subtest slot, of which go test has only GOMAXPROCS).
			suites := []suite{
				{name: "typescript", dir: tsClientDir, env: env, summary: tapSummary, cmd: []string{npm, "test"}},
				{name: "python", dir: pyClientDir, env: slices.Concat(env, []string{"PYTHONPATH=src", "PYTHONDONTWRITEBYTECODE=1"}),
					summary: unittestSummary, cmd: []string{python, "-m", "unittest", "discover", "-s", "tests", "-t", ".", "-v"}},
			}
			var wg sync.WaitGroup
			for i := range suites {
				wg.Go(func() { suites[i].run(t.Context()) })
			}
			wg.Wait()
			for i := range suites {
				s := &suites[i]
				t.Run(s.name, func(t *testing.T) { s.check(t, g) })
			}
		})
	}
}

// sharedMachineConfig writes the configuration of a gateway that shares the
// machine with other tests:
//   - its docker, gvisor and aio executors get instance labels of their
//     own. At start an executor removes every container of its instance it
//     did not create; two gateways sharing the default instance on one
//     engine (these two, run side by side, or any other test's) would kill
//     each other's running commands, which then end with exit code 137 and
//     no output;
//   - the policy's evaluation budget is 10 s instead of 500 ms: a -race
//     build on a machine busy with the rest of make test can take longer,
//     and then fails closed (policy_denied), which is right in production
//     and not what these suites examine.
//
// extra is more of the configuration (other top-level keys), or "".
// Every test of this package that starts a gateway uses it.
func sharedMachineConfig(t *testing.T, extra string) string {
	t.Helper()
	id := randomToken(t)[4:16]
	cfg := fmt.Sprintf("policy:\n  eval_timeout: 10s\nexecutors:\n  docker:\n    instance: e2e-%[1]s-d\n"+
		"  gvisor:\n    instance: e2e-%[1]s-g\n  aio:\n    instance: e2e-%[1]s-a\n", id) + extra
	path := filepath.Join(t.TempDir(), "instances.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func requireTool(t *testing.T, name, path string) string {
	t.Helper()
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	skipOrFail(t, requireNPMEnv, "%s not found on %s (scripts/ensure-deps.sh installs it)", name, path)
	return ""
}

// requireNode wants a node new enough for the pinned deepagents.
func requireNode(t *testing.T) {
	t.Helper()
	node := requireTool(t, "node", os.Getenv("PATH"))
	if v, err := exec.Command(node, "-p", "process.versions.node").Output(); err != nil || nodeMajor(string(v)) < minNode {
		skipOrFail(t, requireNPMEnv, "the TypeScript client needs node >= %d; %s is %q (%v)", minNode, node, strings.TrimSpace(string(v)), err)
	}
}

// requireInstalled wants the package's dev dependencies installed exactly
// as its package.json pins them (make npm-deps runs npm ci from the
// lockfile); a stale node_modules would test another deepagents.
func requireInstalled(t *testing.T, dir string) {
	t.Helper()
	var pkg struct {
		DevDependencies map[string]string `json:"devDependencies"`
	}
	if err := readJSON(filepath.Join(dir, "package.json"), &pkg); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"deepagents", "typescript"} {
		var installed struct {
			Version string `json:"version"`
		}
		err := readJSON(filepath.Join(dir, "node_modules", name, "package.json"), &installed)
		if err != nil || installed.Version != pkg.DevDependencies[name] {
			skipOrFail(t, requireNPMEnv, "%s: %s %q installed, package.json pins %q (make npm-deps): %v",
				dir, name, installed.Version, pkg.DevDependencies[name], err)
		}
	}
}

// A suite's closing counts: node:test's summary (TAP "# pass 3" or the
// spec reporter's "ℹ pass 3", whichever the node version defaults to off
// a terminal), unittest's last lines.
var (
	tapCounts      = regexp.MustCompile(`(?m)^(?:#|ℹ) (pass|fail|skipped|skip|todo|cancelled) (\d+)$`)
	unittestRan    = regexp.MustCompile(`(?m)^Ran (\d+) tests? in`)
	unittestResult = regexp.MustCompile(`(?m)^(OK|FAILED)(?: \((.*)\))?$`)
)

// suiteSummary checks a finished suite's output and returns a one-line
// summary, or an error when the suite skipped or ran nothing.
type suiteSummary func(out string) (string, error)

func tapSummary(out string) (string, error) {
	counts := map[string]string{}
	for _, m := range tapCounts.FindAllStringSubmatch(out, -1) {
		counts[m[1]] = m[2]
	}
	if counts["pass"] == "" || counts["pass"] == "0" {
		return "", fmt.Errorf("no test passed (summary %v)", counts)
	}
	for _, k := range []string{"fail", "skip", "skipped", "todo", "cancelled"} {
		if n := counts[k]; n != "" && n != "0" {
			return "", fmt.Errorf("%s %s (summary %v)", k, n, counts)
		}
	}
	return fmt.Sprintf("%s passed", counts["pass"]), nil
}

func unittestSummary(out string) (string, error) {
	ran := unittestRan.FindStringSubmatch(out)
	res := unittestResult.FindStringSubmatch(out)
	if ran == nil || res == nil || res[1] != "OK" || ran[1] == "0" {
		return "", fmt.Errorf("suite did not pass: ran %v, result %v", ran, res)
	}
	if strings.Contains(res[2], "skipped") {
		return "", fmt.Errorf("skipped tests: %s", res[2])
	}
	return ran[1] + " passed", nil
}

// suite is one client package's test command and what it printed.
type suite struct {
	name, dir string
	env       []string
	summary   suiteSummary
	cmd       []string

	out     bytes.Buffer
	err     error
	elapsed time.Duration
}

func (s *suite) run(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.cmd[0], s.cmd[1:]...)
	cmd.Dir = s.dir
	cmd.Env = s.env
	cmd.Stdout, cmd.Stderr = &s.out, &s.out
	start := time.Now()
	s.err = cmd.Run()
	s.elapsed = time.Since(start)
}

// check fails the test, with the suite's output and the gateway's log,
// when the suite failed, skipped or ran nothing.
func (s *suite) check(t *testing.T, g *gatewayProc) {
	t.Helper()
	sum, err := s.summary(s.out.String())
	if s.err != nil || err != nil {
		t.Fatalf("%s in %s: %v; %v\n%s\n%s", strings.Join(s.cmd, " "), s.dir, s.err, err, s.out.String(), g.logTail())
	}
	t.Logf("%s: %s in %s", s.dir, sum, s.elapsed.Round(100*time.Millisecond))
}
