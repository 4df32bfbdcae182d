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
	node, _ := requireDeepagents(t)
	npm := requireTool(t, "npm", os.Getenv("PATH"))
	python := requireTool(t, "python3", systemPath)
	requireInstalled(t, tsClientDir)
	for _, mode := range []string{"STRICT", "PERMISSIVE"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			g := startGateway(t, mode)
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
			_ = node
		})
	}
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

// requireInstalled wants the directory's node_modules installed from its
// lockfile (make npm-deps).
func requireInstalled(t *testing.T, dir string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json")); err != nil {
		skipOrFail(t, requireNPMEnv, "%s: dependencies not installed (make npm-deps): %v", dir, err)
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
