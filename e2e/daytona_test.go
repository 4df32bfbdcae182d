package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// daytonaClientDir holds run.mjs and the npm package its lockfile pins.
const daytonaClientDir = "daytona"

// daytonaSDK is the Daytona SDK the lockfile pins, as run.mjs reports it.
const daytonaSDK = "@daytonaio/sdk"

// The commands of run.mjs that the policy judges; keep them in step.
const daytonaHigh = "c=ec; ${c}ho approved-over-daytona"

// TestDaytonaSDK drives /daytona of a real STRICT gateway with the
// unmodified npm Daytona SDK (run.mjs, written from its quickstart),
// configured only through DAYTONA_API_KEY (an agent token) and
// DAYTONA_API_URL. This test approves the HIGH command over REST while it
// is held. It checks: create (started, python, the toolbox URL on this
// gateway), get and list; codeRun; executeCommand with its output, a cwd
// and env, and a non-zero exit; a file uploaded, downloaded, seen by a
// command, one a command wrote downloaded, a folder made, listed, deleted
// (then a DaytonaNotFoundError); the HIGH command held and then run, its approval
// showing "via Daytona SDK (sdk-typescript 0.218.0)", as the SDK names itself; the CRITICAL
// command and a CRITICAL codeRun raising the SDK's DaytonaError (403,
// code policy_denied) with sandgate's reason; delete (then get is a
// DaytonaNotFoundError); and the audit: a record of each command and file
// call in the sandbox's session, under the key's principal, front end
// daytona.
func TestDaytonaSDK(t *testing.T) {
	node, pinned := requireDaytonaClient(t)
	key, admin := randomToken(t), randomToken(t)
	cfg := sharedMachineConfig(t, fmt.Sprintf("auth:\n  tokens:\n"+
		"    - {name: daytona-agent, role: agent, token: %s}\n    - {name: e2e-admin, role: admin, token: %s}\n", key, admin))
	g := startGateway(t, "STRICT", "--config", cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	approver := g.approveFirst(ctx, t)
	rep := runDaytonaClient(ctx, t, node, g, key)
	seen := approver.wait(t)
	if rep.SDK[daytonaSDK] != pinned {
		t.Fatalf("ran %s %s, the lockfile pins %s (run make npm-deps)", daytonaSDK, rep.SDK[daytonaSDK], pinned)
	}
	steps := map[string]e2bStep{}
	for _, s := range rep.Steps {
		steps[s.Step] = s
	}
	for _, c := range daytonaChecks(g) {
		t.Run(c.step, func(t *testing.T) {
			s, ok := steps[c.step]
			switch {
			case !ok:
				t.Fatalf("run.mjs has no step %s", c.step)
			case len(s.Thrown) > 0:
				t.Fatalf("step %s threw: %s", c.step, s.Thrown)
			}
			if err := c.check(s.Result, rep); err != nil {
				t.Errorf("%s: %v\nresult: %.1500s", c.step, err, s.Result)
			}
		})
	}
	t.Run("approval", func(t *testing.T) {
		if seen.Via != "Daytona SDK (sdk-typescript "+pinned+")" || seen.RiskLevel != "HIGH" || seen.Code != daytonaHigh ||
			seen.SessionID != rep.SandboxID || seen.Principal != "daytona-agent" || seen.Status != "approved" {
			t.Errorf("the approver saw %+v", seen)
		}
	})
	t.Run("audit", func(t *testing.T) { checkDaytonaAudit(ctx, t, g, admin, rep) })
	t.Run("keys", func(t *testing.T) { checkDaytonaKeys(ctx, t, g, admin) })
	if t.Failed() {
		t.Log(g.logTail())
	}
}

// requireDaytonaClient finds node and the installed SDK, skipping
// (failing under SANDGATE_REQUIRE_NPM_CLIENTS=1) when one is missing or
// not the version package.json pins.
func requireDaytonaClient(t *testing.T) (node, pinned string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		skipOrFail(t, requireNPMEnv, "node not found (scripts/ensure-deps.sh installs it): %v", err)
	}
	if v, err := exec.Command(node, "-p", "process.versions.node").Output(); err != nil || nodeMajor(string(v)) < minNodeDaytona {
		skipOrFail(t, requireNPMEnv, "the Daytona SDK needs node >= %d; %s is %q (%v)", minNodeDaytona, node, strings.TrimSpace(string(v)), err)
	}
	var pkg struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	if err := readJSON(filepath.Join(daytonaClientDir, "package.json"), &pkg); err != nil {
		t.Fatal(err)
	}
	var installed struct {
		Version string `json:"version"`
	}
	if err := readJSON(filepath.Join(daytonaClientDir, "node_modules", daytonaSDK, "package.json"), &installed); err != nil {
		skipOrFail(t, requireNPMEnv, "%s is not installed (make npm-deps): %v", daytonaSDK, err)
	}
	if installed.Version != pkg.Dependencies[daytonaSDK] {
		skipOrFail(t, requireNPMEnv, "%s %s is installed, package.json pins %s (make npm-deps)", daytonaSDK, installed.Version, pkg.Dependencies[daytonaSDK])
	}
	return node, pkg.Dependencies[daytonaSDK]
}

// minNodeDaytona is the oldest Node.js major the pinned SDK runs on.
const minNodeDaytona = 20

type daytonaReport struct {
	SDK       map[string]string `json:"sdk"`
	SandboxID string            `json:"sandbox_id"`
	Steps     []e2bStep         `json:"steps"`
}

func runDaytonaClient(ctx context.Context, t *testing.T, node string, g *gatewayProc, key string) daytonaReport {
	t.Helper()
	cmd := exec.CommandContext(ctx, node, "run.mjs")
	cmd.Dir = daytonaClientDir
	// Only the SDK's own two variables: no DAYTONA_TARGET, JWT or
	// organization, and nothing from the caller's environment.
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "DAYTONA_") })
	cmd.Env = append(env, "DAYTONA_API_KEY="+key, "DAYTONA_API_URL="+g.base+"/daytona")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node run.mjs: %v\nstderr: %s\n%s", err, stderr.String(), g.logTail())
	}
	var rep daytonaReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("run.mjs output: %v: %.2000s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	return rep
}

type daytonaCheck struct {
	step  string
	check func(json.RawMessage, daytonaReport) error
}

// daytonaThrown is what run.mjs reports of an error the SDK raised.
type daytonaThrown struct {
	Thrown         bool   `json:"thrown"`
	Name           string `json:"name"`
	Message        string `json:"message"`
	StatusCode     int    `json:"statusCode"`
	Code           string `json:"code"`
	IsDaytonaError bool   `json:"isDaytonaError"`
}

// denied checks a refusal the SDK raised: its own error class for a 403,
// sandgate's code, and the policy's reason in the message.
func (d daytonaThrown) denied() error {
	if !d.Thrown || !d.IsDaytonaError || d.StatusCode != 403 || d.Name != "DaytonaAuthorizationError" ||
		d.Code != "policy_denied" || !strings.HasPrefix(d.Message, "policy_denied: ") || !strings.Contains(d.Message, "CRITICAL") {
		return fmt.Errorf("want the SDK's DaytonaAuthorizationError (403, code policy_denied) with sandgate's reason")
	}
	return nil
}

func daytonaChecks(g *gatewayProc) []daytonaCheck {
	return []daytonaCheck{
		{"create", func(raw json.RawMessage, rep daytonaReport) error {
			r, err := decodeAs[struct {
				ID, State, ToolboxProxyURL, Language, WorkDir string
			}](raw)
			if err != nil || r.ID == "" || r.ID != rep.SandboxID || r.State != "started" || r.Language != "python" ||
				r.ToolboxProxyURL != g.base+"/daytona/toolbox" || r.WorkDir != "/workspace" {
				return fmt.Errorf("want a started python sandbox whose toolbox is this gateway's (%v)", err)
			}
			return nil
		}},
		{"get_and_list", func(raw json.RawMessage, rep daytonaReport) error {
			r, err := decodeAs[struct {
				ID, State string
				Listed    []string
			}](raw)
			if err != nil || r.ID != rep.SandboxID || r.State != "started" || !slices.Contains(r.Listed, rep.SandboxID) {
				return fmt.Errorf("want the sandbox got and listed (%v)", err)
			}
			return nil
		}},
		{"code_run", func(raw json.RawMessage, _ daytonaReport) error {
			r, err := decodeAs[struct {
				ExitCode int
				Result   string
			}](raw)
			if err != nil || r.ExitCode != 0 || r.Result != "Hello World from code!\n" {
				return fmt.Errorf("want the code's output (%v)", err)
			}
			return nil
		}},
		{"execute", func(raw json.RawMessage, _ daytonaReport) error {
			r, err := decodeAs[struct {
				ExitCode              int
				Result, Stdout, InDir string
				FailedExit            int
				FailedResult          string
			}](raw)
			switch {
			case err != nil:
				return err
			case r.ExitCode != 0 || !combinedOutput(r.Result, "Hello World from exec!\n/workspace\n", "to-stderr\n") || r.Stdout != r.Result:
				return fmt.Errorf("want the command's output, stderr included")
			case r.InDir != "/workspace/sub\nhi from env\n":
				return fmt.Errorf("want the command run in cwd sub with env GREETING")
			case r.FailedExit != 3 || r.FailedResult != "failing\n":
				return fmt.Errorf("want exit code 3 and the output of the failing command")
			}
			return nil
		}},
		{"files", func(raw json.RawMessage, _ daytonaReport) error {
			r, err := decodeAs[struct {
				Back, Nested, SeenByCommand, Made string
				Written                           int
				Listed                            []struct {
					Name  string
					IsDir bool
					Size  int
				}
				Gone  *daytonaThrown
				After []string
			}](raw)
			const data = "written through the daytona sdk\n"
			switch {
			case err != nil:
				return err
			case r.Back != data || r.SeenByCommand != data || r.Nested != "nested\n":
				return fmt.Errorf("the files did not round-trip through the SDK and a command")
			case r.Written != 0 || r.Made != "from-command\n":
				return fmt.Errorf("the file a command wrote did not download")
			case !slices.ContainsFunc(r.Listed, func(e struct {
				Name  string
				IsDir bool
				Size  int
			}) bool {
				return e.Name == "data.txt" && !e.IsDir && e.Size == len(data)
			}) || !slices.ContainsFunc(r.Listed, func(e struct {
				Name  string
				IsDir bool
				Size  int
			}) bool {
				return e.Name == "sub" && e.IsDir
			}) || !slices.ContainsFunc(r.Listed, func(e struct {
				Name  string
				IsDir bool
				Size  int
			}) bool {
				return e.Name == "new-dir" && e.IsDir
			}):
				return fmt.Errorf("listFiles does not show data.txt, sub and the folder createFolder made")
			case r.Gone == nil || r.Gone.Name != "DaytonaNotFoundError" || r.Gone.StatusCode != 404 || r.Gone.Code != "not_found":
				return fmt.Errorf("want a deleted file's download to raise DaytonaNotFoundError, code not_found")
			case slices.Contains(r.After, "data.txt") || !slices.Contains(r.After, "made.txt"):
				return fmt.Errorf("deleteFile did not delete data.txt alone")
			}
			return nil
		}},
		{"high_held_then_approved", func(raw json.RawMessage, _ daytonaReport) error {
			r, err := decodeAs[struct {
				ExitCode int
				Result   string
				WaitedMs int64
			}](raw)
			if err != nil || r.Result != "approved-over-daytona\n" || r.ExitCode != 0 || r.WaitedMs < approverPause.Milliseconds() {
				return fmt.Errorf("want the output after the approver's pause of %s (%v)", approverPause, err)
			}
			return nil
		}},
		{"critical_denied", func(raw json.RawMessage, _ daytonaReport) error {
			r, err := decodeAs[daytonaThrown](raw)
			if err != nil {
				return err
			}
			return r.denied()
		}},
		{"code_run_denied", func(raw json.RawMessage, _ daytonaReport) error {
			r, err := decodeAs[daytonaThrown](raw)
			if err != nil {
				return err
			}
			return r.denied()
		}},
		{"delete", func(raw json.RawMessage, _ daytonaReport) error {
			r, err := decodeAs[struct {
				State string
				Again *daytonaThrown
			}](raw)
			if err != nil || r.State != "destroyed" || r.Again == nil || r.Again.Name != "DaytonaNotFoundError" {
				return fmt.Errorf("want the sandbox destroyed and then not found (%v)", err)
			}
			return nil
		}},
	}
}

// checkDaytonaKeys: every /daytona route, the toolbox's included, takes
// an agent token and nothing else, and answers a refusal in Daytona's
// error shape.
func checkDaytonaKeys(ctx context.Context, t *testing.T, g *gatewayProc, admin string) {
	for _, tc := range []struct {
		name, method, path, token string
		status                    int
	}{
		{"no key", "GET", "/daytona/sandbox", "", 401},
		{"a wrong key", "POST", "/daytona/sandbox", "sg_not_a_token", 401},
		{"no key on the toolbox", "POST", "/daytona/toolbox/x/process/execute", "", 401},
		{"an approver's token", "GET", "/daytona/sandbox", g.approver, 403},
		{"an admin's token", "POST", "/daytona/toolbox/x/files/bulk-upload", admin, 403},
	} {
		req, err := http.NewRequestWithContext(ctx, tc.method, g.base+tc.path, strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			StatusCode int    `json:"statusCode"`
			Message    string `json:"message"`
			Code       string `json:"code"`
		}
		err = json.NewDecoder(res.Body).Decode(&body)
		_ = res.Body.Close()
		if err != nil || res.StatusCode != tc.status || body.StatusCode != tc.status || body.Code == "" || body.Message == "" {
			t.Errorf("%s: %d %+v (%v), want %d in Daytona's shape", tc.name, res.StatusCode, body, err, tc.status)
		}
	}
}

// checkDaytonaAudit reads the sandbox's audit records: every command, code
// run and file call run.mjs made is there, under the key's principal and
// front end daytona, with the CRITICAL command denied and the HIGH one
// approved.
func checkDaytonaAudit(ctx context.Context, t *testing.T, g *gatewayProc, admin string, rep daytonaReport) {
	// The commands (4 of execute, 2 of files, createFolder's mkdir, HIGH,
	// CRITICAL), the code
	// runs (one refused), the file calls and the delete.
	want := map[string]int{"execute": 9, "run_code": 2, "file.write": 2, "file.get": 4, "file.list": 2,
		"file.delete": 1, "session.delete": 1}
	var page struct {
		Records []struct {
			Kind      string         `json:"kind"`
			Tenant    string         `json:"tenant"`
			Principal string         `json:"principal"`
			Outcome   string         `json:"outcome"`
			RiskLevel string         `json:"risk_level"`
			Detail    map[string]any `json:"detail"`
			Approval  *struct {
				Status string `json:"status"`
			} `json:"approval"`
		} `json:"records"`
	}
	if err := g.rest(ctx, "GET", "/v1/audit?limit=200&session_id="+rep.SandboxID, admin, nil, &page); err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, r := range page.Records {
		got[r.Kind]++
		if r.Tenant != "daytona-agent" || r.Principal != "agent:daytona-agent" {
			t.Errorf("a %s record of tenant %q, principal %q", r.Kind, r.Tenant, r.Principal)
		}
		if fe, _ := r.Detail["front_end"].(string); r.Kind != "session.delete" && fe != "daytona" {
			t.Errorf("a %s record names front end %q", r.Kind, fe)
		}
		switch {
		case r.RiskLevel == "CRITICAL" && r.Outcome != "denied":
			t.Errorf("a CRITICAL record says %s", r.Outcome)
		case r.RiskLevel == "HIGH" && (r.Approval == nil || r.Approval.Status != "approved" || r.Outcome != "ok"):
			t.Errorf("the HIGH command's record: %+v", r)
		}
	}
	for k, n := range want {
		if got[k] < n {
			t.Errorf("%d %s records, want at least %d (all: %v)", got[k], k, n, got)
		}
	}
}

// combinedOutput reports whether got is stdout and stderr merged as a
// combined stream has them: each stream's text in its own order, the two
// in any interleaving by line (they come through two pipes, so which of
// two lines written close together was read first is not fixed).
func combinedOutput(got, stdout, stderr string) bool {
	var outs, errs []string
	want := map[string]int{}
	for _, l := range strings.SplitAfter(stdout, "\n") {
		if l != "" {
			want[l]++
		}
	}
	for _, l := range strings.SplitAfter(stderr, "\n") {
		if l != "" {
			want[l]--
		}
	}
	for _, l := range strings.SplitAfter(got, "\n") {
		switch {
		case l == "":
		case want[l] > 0:
			outs = append(outs, l)
		case want[l] < 0:
			errs = append(errs, l)
		default:
			return false
		}
	}
	return strings.Join(outs, "") == stdout && strings.Join(errs, "") == stderr
}
