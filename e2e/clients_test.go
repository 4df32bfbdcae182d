package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
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
			g := startGateway(t, mode, "--config", ownInstances(t))
			env := append(os.Environ(),
				"SANDGATE_URL="+g.base, "SANDGATE_TOKEN="+g.agent, "SANDGATE_APPROVER_TOKEN="+g.approver,
				"SANDGATE_MODE="+mode, "SANDGATE_REQUIRE_NPM_CLIENTS=1")
			t.Run("typescript", func(t *testing.T) {
				t.Parallel()
				runSuite(t, g, tsClientDir, env, tapSummary, npm, "test")
			})
			t.Run("python", func(t *testing.T) {
				t.Parallel()
				runSuite(t, g, pyClientDir, append(env, "PYTHONPATH=src", "PYTHONDONTWRITEBYTECODE=1"), unittestSummary,
					python, "-m", "unittest", "discover", "-s", "tests", "-t", ".", "-v")
			})
		})
	}
}

// ownInstances writes a configuration that gives the gateway's docker,
// gvisor and aio executors instance labels of their own. At start an
// executor removes every container of its instance it did not create; two
// gateways sharing the default instance on one engine (these two, run side
// by side, or any other test's) would kill each other's running commands,
// which then end with exit code 137 and no output.
func ownInstances(t *testing.T) string {
	t.Helper()
	id := randomToken(t)[4:16]
	cfg := fmt.Sprintf("executors:\n  docker:\n    instance: e2e-%[1]s-d\n  gvisor:\n    instance: e2e-%[1]s-g\n  aio:\n    instance: e2e-%[1]s-a\n", id)
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

// runSuite runs a client suite in dir and fails the test, with its output
// and the gateway's log, when it fails, skips or runs nothing.
func runSuite(t *testing.T, g *gatewayProc, dir string, env []string, summary suiteSummary, name string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	sum, serr := summary(out.String())
	if err != nil || serr != nil {
		t.Fatalf("%s %s in %s: %v; %v\n%s\n%s", filepath.Base(name), strings.Join(args, " "), dir, err, serr, out.String(), g.logTail())
	}
	t.Logf("%s: %s in %s", dir, sum, time.Since(start).Round(100*time.Millisecond))
}
