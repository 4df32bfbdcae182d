package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// clientDir holds the npm package the test drives and its lockfile.
const clientDir = "deepagents"

// The files run.mjs writes and edits; keep them in step with it.
const (
	appSource = "import os\nprint(\"hello from app\")\nprint(os.getcwd())\n"
	appEdited = "import os\nprint(\"hello from sandgate\")\nprint(os.getcwd())\n"
)

// TestDeepagentsBaseSandbox drives the npm deepagents package's BaseSandbox,
// subclassed over POST /execute and the files API as its docs describe for
// a custom sandbox (deepagents/sandgate-sandbox.mjs), against a real gateway
// process in each security mode. Every method deepagents' file and execute
// tools call is exercised; a failing check names the mode, the operation
// and the executors that served it.
func TestDeepagentsBaseSandbox(t *testing.T) {
	node, pinned := requireDeepagents(t)
	for _, mode := range []string{"STRICT", "PERMISSIVE"} {
		t.Run(mode, func(t *testing.T) {
			g := startGateway(t, mode, "--config", sharedMachineConfig(t, ""))
			rep := runClient(t, node, g, "deepagents-"+strings.ToLower(mode))
			if rep.Deepagents != pinned {
				t.Fatalf("ran deepagents %s, the lockfile pins %s (run make npm-deps)", rep.Deepagents, pinned)
			}
			checkSteps(t, mode, rep.Steps)
		})
	}
}

// requireDeepagents finds node and the installed client, skipping (failing
// under SANDGATE_REQUIRE_NPM_CLIENTS=1) when either is missing. It returns
// node's path and the version package.json pins.
func requireDeepagents(t *testing.T) (node, pinned string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		skipOrFail(t, requireNPMEnv, "node not found (scripts/ensure-deps.sh installs it): %v", err)
	}
	if v, err := exec.Command(node, "-p", "process.versions.node").Output(); err != nil || nodeMajor(string(v)) < minNode {
		skipOrFail(t, requireNPMEnv, "deepagents needs node >= %d; %s is %q (%v)", minNode, node, strings.TrimSpace(string(v)), err)
	}
	var pkg struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	if err := readJSON(filepath.Join(clientDir, "package.json"), &pkg); err != nil {
		t.Fatal(err)
	}
	var installed struct {
		Version string `json:"version"`
	}
	if err := readJSON(filepath.Join(clientDir, "node_modules", "deepagents", "package.json"), &installed); err != nil {
		skipOrFail(t, requireNPMEnv, "deepagents is not installed (make npm-deps): %v", err)
	}
	pinned = pkg.Dependencies["deepagents"]
	if installed.Version != pinned {
		skipOrFail(t, requireNPMEnv, "deepagents %s is installed, package.json pins %s (make npm-deps)", installed.Version, pinned)
	}
	return node, pinned
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// minNode is the oldest Node.js major the pinned deepagents (and its
// @langchain peers) declare in their engines field.
const minNode = 20

func nodeMajor(version string) int {
	major, _, _ := strings.Cut(strings.TrimSpace(version), ".")
	n, err := strconv.Atoi(major)
	if err != nil {
		return 0
	}
	return n
}

// clientReport is what run.mjs prints: each step's raw BaseSandbox result
// (or what it threw) and the gateway requests it made.
type clientReport struct {
	Deepagents string       `json:"deepagents"`
	Steps      []clientStep `json:"steps"`
}

type clientStep struct {
	Step   string          `json:"step"`
	Result json.RawMessage `json:"result"`
	Thrown string          `json:"thrown"`
	Calls  []clientCall    `json:"calls"`
}

type clientCall struct {
	Method   string `json:"method"`
	Target   string `json:"target"`
	Status   int    `json:"status"`
	Executor string `json:"executor"`
}

// String describes the requests behind a step, for failure messages.
func (s clientStep) String() string {
	parts := make([]string, 0, len(s.Calls))
	for _, c := range s.Calls {
		p := fmt.Sprintf("%s %q → %d", c.Method, truncate(c.Target, 80), c.Status)
		if c.Executor != "" {
			p += " via " + c.Executor
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, "; ")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func runClient(t *testing.T, node string, g *gatewayProc, session string) clientReport {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "run.mjs")
	cmd.Dir = clientDir
	cmd.Env = append(os.Environ(), "SANDGATE_URL="+g.base, "SANDGATE_TOKEN="+g.agent, "SANDGATE_SESSION="+session)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node run.mjs: %v\nstderr: %s\n%s", err, stderr.String(), g.logTail())
	}
	var rep clientReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("run.mjs output: %v: %.2000s", err, stdout.String())
	}
	return rep
}

// checkSteps applies stepChecks to the report, one subtest per step named
// op/step, and insists the two lists name the same steps in the same order.
func checkSteps(t *testing.T, mode string, steps []clientStep) {
	t.Helper()
	got := make([]string, len(steps))
	for i, s := range steps {
		got[i] = s.Step
	}
	want := make([]string, len(stepChecks))
	for i, c := range stepChecks {
		want[i] = c.step
	}
	if !slices.Equal(got, want) {
		t.Fatalf("run.mjs steps %v, checks for %v: keep the two in step", got, want)
	}
	for i, c := range stepChecks {
		s := steps[i]
		t.Run(c.op+"/"+c.step, func(t *testing.T) {
			if s.Thrown != "" {
				t.Fatalf("%s: op %s (step %s) threw: %s\n  requests: %s", mode, c.op, c.step, s.Thrown, s)
			}
			if err := c.check(s.Result); err != nil {
				t.Errorf("%s: op %s (step %s) failed: %v\n  result: %.600s\n  requests: %s", mode, c.op, c.step, err, s.Result, s)
			}
		})
	}
}

type stepCheck struct {
	op, step string
	check    func(json.RawMessage) error
}

// stepChecks are the expectations for run.mjs's steps, in its order. They
// are what deepagents' own local backends return for the same calls.
var stepChecks = []stepCheck{
	{"write", "write_app", wantWritten("/workspace/src/app.py")},
	{"write", "write_util", wantWritten("/workspace/src/lib/util.py")},
	{"write", "write_notes", wantWritten("/workspace/notes/todo.txt")},
	{"upload", "upload_partial", wantUploads(map[string]string{
		"/workspace/data/points.csv": "", "/etc/sandgate-e2e-escape": "invalid_path",
	})},
	{"read", "read_app", wantRead(readResult{
		Content:    "     1\timport os\n     2\tprint(\"hello from app\")\n     3\tprint(os.getcwd())\n",
		TotalLines: 3, StartLine: 1, EndLine: 3,
	})},
	{"read", "read_slice", wantRead(readResult{Content: "     2\tTODO: ship it\n", TotalLines: 3, StartLine: 2, EndLine: 2})},
	{"read", "read_missing", wantError("File '/workspace/no-such-file.txt' not found")},
	{"edit", "edit_app", wantEdited(1)},
	{"edit", "edit_no_match", wantError("String not found in file '/workspace/src/app.py'")},
	{"read", "read_raw_app", wantRawContent(appEdited)},
	{"ls", "ls_workspace", wantListing(map[string]bool{
		"/workspace/src/": true, "/workspace/notes/": true, "/workspace/data/": true,
	})},
	{"ls", "ls_src", wantListing(map[string]bool{"/workspace/src/lib/": true, "/workspace/src/app.py": false})},
	{"grep", "grep_literal", wantMatches(grepMatch{"/workspace/notes/todo.txt", 2, "TODO: ship it"})},
	{"grep", "grep_glob", wantMatches(grepMatch{"/workspace/src/app.py", 2, `print("hello from sandgate")`})},
	{"glob", "glob_recursive", wantGlob("src/app.py", "src/lib/util.py")},
	{"glob", "glob_dir", wantGlob("todo.txt")},
	{"execute", "execute_python", wantExecute("hello from sandgate\n/workspace\n", 0)},
	{"execute", "execute_cwd", wantExecute("3\n", 0)},
	{"execute", "execute_stderr_exit", wantExecute("out\n[stderr] err\n", 3)},
	{"execute", "execute_writes", wantExecute("", 0)},
	{"download", "download", wantDownloads(
		download{Path: "/workspace/out/result.txt", Content: ptr("made by code\n")},
		download{Path: "/workspace/src/app.py", Content: ptr(appEdited)},
		download{Path: "/workspace/missing.bin", Error: "file_not_found"},
	)},
	{"delete", "delete_file", wantDeleted("/workspace/notes/todo.txt")},
	{"delete", "delete_verify", wantDownloads(download{Path: "/workspace/notes/todo.txt", Error: "file_not_found"})},
	{"delete", "delete_missing", wantError("Error: '/workspace/notes/todo.txt' not found")},
	{"delete", "delete_dir", wantDeleted("/workspace/out")},
	{"ls", "ls_after_delete", wantListing(map[string]bool{
		"/workspace/src/": true, "/workspace/notes/": true, "/workspace/data/": true,
	})},
}

func ptr(s string) *string { return &s }

// decode unmarshals a step result and reports a deepagents error field,
// which every successful result lacks.
func decode(raw json.RawMessage, v any) error {
	var e struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(raw, &e); err == nil && e.Error != "" {
		return fmt.Errorf("deepagents reported %q", e.Error)
	}
	return json.Unmarshal(raw, v)
}

func wantWritten(path string) func(json.RawMessage) error {
	return func(raw json.RawMessage) error {
		var r struct {
			Path string `json:"path"`
		}
		if err := decode(raw, &r); err != nil {
			return err
		}
		if r.Path != path {
			return fmt.Errorf("path %q, want %q", r.Path, path)
		}
		return nil
	}
}

var wantDeleted = wantWritten

func wantError(msg string) func(json.RawMessage) error {
	return func(raw json.RawMessage) error {
		var r struct {
			Error string `json:"error"`
		}
		if err := json.Unmarshal(raw, &r); err != nil {
			return err
		}
		if r.Error != msg {
			return fmt.Errorf("error %q, want %q", r.Error, msg)
		}
		return nil
	}
}

type readResult struct {
	Content    string `json:"content"`
	TotalLines int    `json:"totalLines"`
	StartLine  int    `json:"startLine"`
	EndLine    int    `json:"endLine"`
}

func wantRead(want readResult) func(json.RawMessage) error {
	return func(raw json.RawMessage) error {
		var got readResult
		if err := decode(raw, &got); err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("got %+v, want %+v", got, want)
		}
		return nil
	}
}

func wantRawContent(content string) func(json.RawMessage) error {
	return func(raw json.RawMessage) error {
		var r struct {
			Data struct {
				Content string `json:"content"`
			} `json:"data"`
		}
		if err := decode(raw, &r); err != nil {
			return err
		}
		if r.Data.Content != content {
			return fmt.Errorf("content %q, want %q", r.Data.Content, content)
		}
		return nil
	}
}

func wantEdited(occurrences int) func(json.RawMessage) error {
	return func(raw json.RawMessage) error {
		var r struct {
			Occurrences int `json:"occurrences"`
		}
		if err := decode(raw, &r); err != nil {
			return err
		}
		if r.Occurrences != occurrences {
			return fmt.Errorf("occurrences %d, want %d", r.Occurrences, occurrences)
		}
		return nil
	}
}

type fileInfo struct {
	Path  string `json:"path"`
	IsDir bool   `json:"is_dir"`
	Size  int64  `json:"size"`
}

// wantListing wants exactly these entries (path → is a directory): ls
// swallows command failures, so an empty listing is how a broken execute
// shows here.
func wantListing(want map[string]bool) func(json.RawMessage) error {
	return func(raw json.RawMessage) error {
		var r struct {
			Files []fileInfo `json:"files"`
		}
		if err := decode(raw, &r); err != nil {
			return err
		}
		got := map[string]bool{}
		for _, f := range r.Files {
			got[f.Path] = f.IsDir
		}
		if !maps.Equal(got, want) {
			return fmt.Errorf("entries %v, want %v", got, want)
		}
		return nil
	}
}

func wantGlob(paths ...string) func(json.RawMessage) error {
	return func(raw json.RawMessage) error {
		var r struct {
			Files     []fileInfo `json:"files"`
			Truncated bool       `json:"truncated"`
		}
		if err := decode(raw, &r); err != nil {
			return err
		}
		var got []string
		for _, f := range r.Files {
			if f.IsDir {
				return fmt.Errorf("%s matched as a directory", f.Path)
			}
			got = append(got, f.Path)
		}
		slices.Sort(got)
		if !slices.Equal(got, paths) || r.Truncated {
			return fmt.Errorf("paths %q (truncated %v), want %q", got, r.Truncated, paths)
		}
		return nil
	}
}

type grepMatch struct {
	Path string `json:"path"`
	Line int    `json:"line"`
	Text string `json:"text"`
}

func wantMatches(want ...grepMatch) func(json.RawMessage) error {
	return func(raw json.RawMessage) error {
		var r struct {
			Matches []grepMatch `json:"matches"`
		}
		if err := decode(raw, &r); err != nil {
			return err
		}
		if !slices.Equal(r.Matches, want) {
			return fmt.Errorf("matches %+v, want %+v", r.Matches, want)
		}
		return nil
	}
}

func wantExecute(output string, exitCode int) func(json.RawMessage) error {
	return func(raw json.RawMessage) error {
		var r struct {
			Output    string `json:"output"`
			ExitCode  *int   `json:"exitCode"`
			Truncated bool   `json:"truncated"`
		}
		if err := decode(raw, &r); err != nil {
			return err
		}
		if r.ExitCode == nil || *r.ExitCode != exitCode || r.Output != output || r.Truncated {
			code := "null"
			if r.ExitCode != nil {
				code = fmt.Sprint(*r.ExitCode)
			}
			return fmt.Errorf("output %q exit %s truncated %v, want output %q exit %d", r.Output, code, r.Truncated, output, exitCode)
		}
		return nil
	}
}

// upload and download are deepagents' FileUploadResponse and
// FileDownloadResponse (bytes as UTF-8 text).
type upload struct {
	Path  string `json:"path"`
	Error string `json:"error"`
}

type download struct {
	Path    string  `json:"path"`
	Content *string `json:"content"`
	Error   string  `json:"error"`
}

// wantUploads wants one response per path, with the given error code ("" for
// success), in any order.
func wantUploads(want map[string]string) func(json.RawMessage) error {
	return func(raw json.RawMessage) error {
		var got []upload
		if err := json.Unmarshal(raw, &got); err != nil {
			return err
		}
		m := map[string]string{}
		for _, u := range got {
			m[u.Path] = u.Error
		}
		if len(got) != len(want) || !maps.Equal(m, want) {
			return fmt.Errorf("uploads %+v, want %v", got, want)
		}
		return nil
	}
}

func wantDownloads(want ...download) func(json.RawMessage) error {
	return func(raw json.RawMessage) error {
		var got []download
		if err := json.Unmarshal(raw, &got); err != nil {
			return err
		}
		if len(got) != len(want) {
			return fmt.Errorf("%d responses, want %d", len(got), len(want))
		}
		var errs []error
		for i, w := range want {
			g := got[i]
			if g.Path != w.Path || g.Error != w.Error || (g.Content == nil) != (w.Content == nil) ||
				(g.Content != nil && *g.Content != *w.Content) {
				errs = append(errs, fmt.Errorf("%s: content %s error %q, want content %s error %q",
					w.Path, show(g.Content), g.Error, show(w.Content), w.Error))
			}
		}
		return errors.Join(errs...)
	}
}

func show(s *string) string {
	if s == nil {
		return "null"
	}
	return fmt.Sprintf("%q", *s)
}
