package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image/png"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// e2bClientDir holds run.mjs and the npm packages its lockfile pins.
const e2bClientDir = "e2b"

// The E2B SDKs the lockfile pins, as run.mjs reports them.
var e2bSDKs = []string{"e2b", "@e2b/code-interpreter"}

// The commands of run.mjs that the policy judges; keep them in step.
const (
	e2bHigh       = "c=ec; ${c}ho approved-over-e2b"
	e2bHighDenied = "c=ec; ${c}ho denied-over-e2b"
	e2bCritical   = "rm -rf /"
)

// TestE2BSDK drives /e2b of a real STRICT gateway with the unmodified npm
// E2B SDKs (run.mjs, written from their quickstarts), configured only
// through E2B_API_KEY, E2B_API_URL and E2B_SANDBOX_URL, the key an agent
// token in E2B's e2b_<hex> form. This test approves the HIGH command over
// REST while it is held. It checks: create (domain sandgate.invalid); a
// command's onStdout; files written, read back, seen by a command,
// listed, a directory made, removed; a non-zero exit as CommandExitError;
// the HIGH command held and then run, its approval showing "via E2B SDK
// (e2b-js 2.51.0)"; another HIGH command held and denied by the approver,
// raising CommandExitError with sandgate's approval_denied reason; the CRITICAL command raising CommandExitError with
// sandgate's reason; setTimeout; list; runCode with a pandas DataFrame
// (text and HTML), a matplotlib PNG that decodes, kernel state across
// cells, an exception as the execution's error and a CRITICAL cell's
// refusal as a PolicyDenied error; a live command listed and killed by
// pid; contexts; kill (and a
// second kill false); and the audit: a record of each command, cell and
// file call in the two sandboxes' sessions, under the E2B key's
// principal.
func TestE2BSDK(t *testing.T) {
	node, pinned := requireE2BClient(t)
	key, admin := "e2b_"+randomToken(t)[4:], randomToken(t)
	cfg := sharedMachineConfig(t, fmt.Sprintf("auth:\n  tokens:\n"+
		"    - {name: e2b-agent, role: agent, token: %s}\n    - {name: e2e-admin, role: admin, token: %s}\n", key, admin))
	g := startGateway(t, "STRICT", "--config", cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	approver := g.decideHeld(ctx, map[string]string{e2bHigh: "approve", e2bHighDenied: "deny"})
	rep := runE2BClient(ctx, t, node, g, key)
	seen := approver.wait(t)
	for _, name := range e2bSDKs {
		if rep.SDK[name] != pinned[name] {
			t.Fatalf("ran %s %s, the lockfile pins %s (run make npm-deps)", name, rep.SDK[name], pinned[name])
		}
	}
	steps := map[string]e2bStep{}
	for _, s := range rep.Steps {
		steps[s.Step] = s
	}
	for _, c := range e2bChecks {
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
		if seen.Via != "E2B SDK (e2b-js "+pinned["e2b"]+")" || seen.RiskLevel != "HIGH" || seen.Code != e2bHigh ||
			seen.SessionID != rep.SandboxID || seen.Principal != "e2b-agent" || seen.Status != "approved" {
			t.Errorf("the approver saw %+v", seen)
		}
	})
	t.Run("audit", func(t *testing.T) { checkE2BAudit(ctx, t, g, admin, rep) })
	if t.Failed() {
		t.Log(g.logTail())
	}
}

// requireE2BClient finds node and the installed SDKs, skipping (failing
// under SANDGATE_REQUIRE_NPM_CLIENTS=1) when one is missing or not the
// version package.json pins.
func requireE2BClient(t *testing.T) (node string, pinned map[string]string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		skipOrFail(t, requireNPMEnv, "node not found (scripts/ensure-deps.sh installs it): %v", err)
	}
	if v, err := exec.Command(node, "-p", "process.versions.node").Output(); err != nil || nodeMajor(string(v)) < minNodeE2B {
		skipOrFail(t, requireNPMEnv, "the E2B SDKs need node >= %d; %s is %q (%v)", minNodeE2B, node, strings.TrimSpace(string(v)), err)
	}
	var pkg struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	if err := readJSON(filepath.Join(e2bClientDir, "package.json"), &pkg); err != nil {
		t.Fatal(err)
	}
	for _, name := range e2bSDKs {
		var installed struct {
			Version string `json:"version"`
		}
		if err := readJSON(filepath.Join(e2bClientDir, "node_modules", name, "package.json"), &installed); err != nil {
			skipOrFail(t, requireNPMEnv, "%s is not installed (make npm-deps): %v", name, err)
		}
		if installed.Version != pkg.Dependencies[name] {
			skipOrFail(t, requireNPMEnv, "%s %s is installed, package.json pins %s (make npm-deps)", name, installed.Version, pkg.Dependencies[name])
		}
	}
	return node, pkg.Dependencies
}

// minNodeE2B is the oldest Node.js major the pinned SDKs' engines allow
// (>=20.18.1).
const minNodeE2B = 20

type e2bReport struct {
	SDK           map[string]string `json:"sdk"`
	SandboxID     string            `json:"sandbox_id"`
	InterpreterID string            `json:"interpreter_id"`
	Steps         []e2bStep         `json:"steps"`
}

// e2bStep is one step's result, or what it threw: the error's name,
// message and, for a command, its exit code and stderr.
type e2bStep struct {
	Step   string          `json:"step"`
	Result json.RawMessage `json:"result"`
	Thrown json.RawMessage `json:"thrown"`
}

func runE2BClient(ctx context.Context, t *testing.T, node string, g *gatewayProc, key string) e2bReport {
	t.Helper()
	cmd := exec.CommandContext(ctx, node, "run.mjs")
	cmd.Dir = e2bClientDir
	// Only E2B's own variables; none of E2B_DOMAIN or E2B_DEBUG, so a
	// request that missed E2B_SANDBOX_URL would go to sandgate.invalid.
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "E2B_") })
	cmd.Env = append(env, "E2B_API_KEY="+key, "E2B_API_URL="+g.base+"/e2b", "E2B_SANDBOX_URL="+g.base+"/e2b")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node run.mjs: %v\nstderr: %s\n%s", err, stderr.String(), g.logTail())
	}
	var rep e2bReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("run.mjs output: %v: %.2000s", err, stdout.String())
	}
	return rep
}

type e2bCheck struct {
	step  string
	check func(json.RawMessage, e2bReport) error
}

// commandExit is what run.mjs reports of an error a command raised.
type commandExit struct {
	Thrown        bool   `json:"thrown"`
	Name          string `json:"name"`
	IsCommandExit bool   `json:"isCommandExit"`
	ExitCode      int    `json:"exitCode"`
	Error         string `json:"error"`
	Stderr        string `json:"stderr"`
}

var e2bChecks = []e2bCheck{
	{"create", func(raw json.RawMessage, rep e2bReport) error {
		r, err := decodeAs[struct {
			ID      string `json:"id"`
			Domain  string `json:"domain"`
			Running bool   `json:"running"`
		}](raw)
		if err != nil || r.ID == "" || r.ID != rep.SandboxID || r.Domain != "sandgate.invalid" || !r.Running {
			return fmt.Errorf("want a running sandbox in domain sandgate.invalid (%v)", err)
		}
		return nil
	}},
	{"run_on_stdout", func(raw json.RawMessage, _ e2bReport) error {
		r, err := decodeAs[struct {
			Stdout   string   `json:"stdout"`
			Stderr   string   `json:"stderr"`
			ExitCode int      `json:"exitCode"`
			OnStdout []string `json:"onStdout"`
		}](raw)
		if err != nil || r.Stdout != "hello from e2b\n/home/user\n" || r.Stderr != "to-stderr\n" || r.ExitCode != 0 ||
			strings.Join(r.OnStdout, "") != r.Stdout {
			return fmt.Errorf("want the output, and onStdout adding up to stdout (%v)", err)
		}
		return nil
	}},
	{"files", func(raw json.RawMessage, _ e2bReport) error {
		r, err := decodeAs[struct {
			Info struct {
				Path string `json:"path"`
			} `json:"info"`
			Back, SeenByCommand string
			Listed              []struct{ Name, Type, Path string }
			Made, Exists, Gone  bool
		}](raw)
		const data = "written through the e2b sdk\n"
		switch {
		case err != nil:
			return err
		case r.Info.Path != "/home/user/hello.txt" || r.Back != data || r.SeenByCommand != data:
			return fmt.Errorf("the file did not round-trip through the SDK and a command")
		case !slices.ContainsFunc(r.Listed, func(e struct{ Name, Type, Path string }) bool {
			return e.Name == "hello.txt" && e.Type == "file" && e.Path == "/home/user/hello.txt"
		}):
			return fmt.Errorf("files.list does not show hello.txt")
		case !r.Made || !r.Exists || !r.Gone:
			return fmt.Errorf("makeDir, exists or remove failed")
		}
		return nil
	}},
	{"exit_nonzero", func(raw json.RawMessage, _ e2bReport) error {
		r, err := decodeAs[commandExit](raw)
		if err != nil || !r.Thrown || !r.IsCommandExit || r.ExitCode != 3 || r.Stderr != "failing\n" {
			return fmt.Errorf("want CommandExitError with exit code 3 and the stderr (%v)", err)
		}
		return nil
	}},
	{"high_held_then_approved", func(raw json.RawMessage, _ e2bReport) error {
		r, err := decodeAs[struct {
			Stdout   string `json:"stdout"`
			ExitCode int    `json:"exitCode"`
			WaitedMs int64  `json:"waitedMs"`
		}](raw)
		if err != nil || r.Stdout != "approved-over-e2b\n" || r.ExitCode != 0 || r.WaitedMs < approverPause.Milliseconds() {
			return fmt.Errorf("want the output after the approver's pause of %s (%v)", approverPause, err)
		}
		return nil
	}},
	{"high_held_then_denied", func(raw json.RawMessage, _ e2bReport) error {
		r, err := decodeAs[commandExit](raw)
		if err != nil || !r.Thrown || !r.IsCommandExit || r.ExitCode != 126 ||
			!strings.HasPrefix(r.Error, "approval_denied: ") || !strings.Contains(r.Stderr, r.Error) {
			return fmt.Errorf("want CommandExitError 126 carrying sandgate's approval_denied reason (%v)", err)
		}
		return nil
	}},
	{"critical_denied", func(raw json.RawMessage, _ e2bReport) error {
		r, err := decodeAs[commandExit](raw)
		if err != nil || !r.Thrown || !r.IsCommandExit || r.ExitCode != 126 ||
			!strings.HasPrefix(r.Error, "policy_denied: ") || !strings.Contains(r.Error, "CRITICAL") ||
			!strings.Contains(r.Stderr, r.Error) {
			return fmt.Errorf("want CommandExitError 126 carrying sandgate's policy_denied reason (%v)", err)
		}
		return nil
	}},
	{"list_and_kill_pid", func(raw json.RawMessage, _ e2bReport) error {
		r, err := decodeAs[struct {
			PID    int   `json:"pid"`
			Listed []int `json:"listed"`
			Killed bool  `json:"killed"`
			Exit   *struct {
				ExitCode      int  `json:"exitCode"`
				IsCommandExit bool `json:"isCommandExit"`
			} `json:"exit"`
			Again bool `json:"again"`
		}](raw)
		if err != nil || !slices.Contains(r.Listed, r.PID) || !r.Killed || r.Exit == nil || !r.Exit.IsCommandExit ||
			r.Exit.ExitCode != 137 || r.Again {
			return fmt.Errorf("want the live command listed, killed by pid (137), and a second kill false (%v)", err)
		}
		return nil
	}},
	{"background_server", func(raw json.RawMessage, _ e2bReport) error {
		r, err := decodeAs[struct {
			PID     int    `json:"pid"`
			Fetched string `json:"fetched"`
			Listed  []int  `json:"listed"`
			Killed  bool   `json:"killed"`
			Exit    *struct {
				ExitCode      int  `json:"exitCode"`
				IsCommandExit bool `json:"isCommandExit"`
			} `json:"exit"`
			After []int `json:"after"`
		}](raw)
		switch {
		case err != nil:
			return err
		case r.Fetched != "served-over-loopback\n":
			return fmt.Errorf("another command did not reach the background server over loopback")
		case !slices.Contains(r.Listed, r.PID) || slices.Contains(r.After, r.PID):
			return fmt.Errorf("want the server listed while it runs, and not after its kill")
		case !r.Killed || r.Exit == nil || !r.Exit.IsCommandExit || r.Exit.ExitCode != 137:
			return fmt.Errorf("want kill(pid) true and connect(pid)'s handle ending with 137")
		}
		return nil
	}},
	{"stdin", func(raw json.RawMessage, _ e2bReport) error {
		r, err := decodeAs[struct {
			Stdout   string `json:"stdout"`
			ExitCode int    `json:"exitCode"`
		}](raw)
		if err != nil || r.Stdout != "got:typed over e2b\n" || r.ExitCode != 0 {
			return fmt.Errorf("want the input sent with sendStdin echoed (%v)", err)
		}
		return nil
	}},
	{"persistent_sandbox", func(raw json.RawMessage, _ e2bReport) error {
		r, err := decodeAs[struct {
			Tmp         string `json:"tmp"`
			UserSite    string `json:"userSite"`
			Local       string `json:"local"`
			PSSeesSleep bool   `json:"psSeesSleep"`
		}](raw)
		if err != nil || r.Tmp != "kept-in-tmp" || r.UserSite != "from-user-site" || r.Local != "/home/user/.local/lib" || !r.PSSeesSleep {
			return fmt.Errorf("want /tmp, the user site and a background process kept from one command to the next (%v)", err)
		}
		return nil
	}},
	{"metrics", func(raw json.RawMessage, _ e2bReport) error {
		ms, err := decodeAs[[]struct {
			Timestamp  time.Time `json:"timestamp"`
			CPUCount   int       `json:"cpuCount"`
			CPUUsedPct *float64  `json:"cpuUsedPct"`
			MemUsed    int64     `json:"memUsed"`
			MemTotal   int64     `json:"memTotal"`
			DiskUsed   *int64    `json:"diskUsed"`
			DiskTotal  int64     `json:"diskTotal"`
		}](raw)
		switch {
		case err != nil || len(ms) != 1:
			return fmt.Errorf("want one reading (%v)", err)
		case ms[0].CPUCount < 1 || ms[0].CPUUsedPct == nil || ms[0].DiskUsed == nil || ms[0].DiskTotal <= 0 ||
			time.Since(ms[0].Timestamp) > 5*time.Minute:
			return fmt.Errorf("want cpuCount, cpuUsedPct, disk and a recent timestamp")
		case ms[0].MemUsed < 64<<20 || ms[0].MemUsed > ms[0].MemTotal:
			return fmt.Errorf("want the running command's 64 MiB within memTotal: memUsed %d, memTotal %d", ms[0].MemUsed, ms[0].MemTotal)
		}
		return nil
	}},
	{"set_timeout", func(raw json.RawMessage, _ e2bReport) error {
		r, err := decodeAs[struct {
			EndAt, StartedAt  time.Time
			TemplateID, State string
		}](raw)
		if err != nil || r.EndAt.Sub(r.StartedAt) < 9*time.Minute || r.TemplateID != "base" || r.State != "running" {
			return fmt.Errorf("want the sandbox to end about 10 minutes on (%v)", err)
		}
		return nil
	}},
	{"list", func(raw json.RawMessage, rep e2bReport) error {
		ids, err := decodeAs[[]string](raw)
		if err != nil || !slices.Contains(ids, rep.SandboxID) {
			return fmt.Errorf("want the sandbox listed (%v)", err)
		}
		return nil
	}},
	{"run_code_dataframe", func(raw json.RawMessage, _ e2bReport) error {
		r, err := decodeAs[struct {
			Text           string          `json:"text"`
			Stdout         []string        `json:"stdout"`
			HTML           bool            `json:"html"`
			Error          json.RawMessage `json:"error"`
			ExecutionCount int             `json:"executionCount"`
		}](raw)
		if err != nil || !strings.Contains(r.Text, "a  b") || !r.HTML || strings.Join(r.Stdout, "") != "sum 6\n" ||
			string(r.Error) != "null" || r.ExecutionCount < 1 {
			return fmt.Errorf("want the DataFrame as text and HTML, and the print (%v)", err)
		}
		return nil
	}},
	{"run_code_chart", func(raw json.RawMessage, _ e2bReport) error {
		r, err := decodeAs[struct {
			PNG string `json:"png"`
		}](raw)
		if err != nil || r.PNG == "" {
			return fmt.Errorf("no PNG result (%v)", err)
		}
		b, err := base64.StdEncoding.DecodeString(r.PNG)
		if err != nil {
			return err
		}
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil || img.Bounds().Dx() < 100 {
			return fmt.Errorf("the chart is not a PNG of a figure (%v)", err)
		}
		return nil
	}},
	{"run_code_state_and_error", func(raw json.RawMessage, _ e2bReport) error {
		r, err := decodeAs[struct {
			Kept  string `json:"kept"`
			Error struct {
				Name, Value string
				Traceback   bool
			} `json:"error"`
		}](raw)
		if err != nil || r.Kept != "15" || r.Error.Name != "ZeroDivisionError" || r.Error.Value != "division by zero" || !r.Error.Traceback {
			return fmt.Errorf("want the kernel's state kept and the exception as the error (%v)", err)
		}
		return nil
	}},
	{"run_code_denied", func(raw json.RawMessage, _ e2bReport) error {
		r, err := decodeAs[struct {
			Error *struct{ Name, Value string } `json:"error"`
		}](raw)
		if err != nil || r.Error == nil || r.Error.Name != "PolicyDenied" || !strings.Contains(r.Error.Value, "CRITICAL") {
			return fmt.Errorf("want the refused cell's error PolicyDenied with sandgate's reason (%v)", err)
		}
		return nil
	}},
	{"contexts", func(raw json.RawMessage, _ e2bReport) error {
		r, err := decodeAs[struct {
			ID     string   `json:"id"`
			Listed []string `json:"listed"`
			Text   string   `json:"text"`
		}](raw)
		if err != nil || !slices.Contains(r.Listed, r.ID) || r.Text != "3" {
			return fmt.Errorf("want the context listed and running in the session's kernel (%v)", err)
		}
		return nil
	}},
	{"kill", func(raw json.RawMessage, _ e2bReport) error {
		r, err := decodeAs[struct {
			First, Running, Second, CI bool
		}](raw)
		if err != nil || !r.First || r.Running || r.Second || !r.CI {
			return fmt.Errorf("want kill true, not running, a second kill false (%v)", err)
		}
		return nil
	}},
}

// checkE2BAudit reads each sandbox's audit records: every command, cell
// and file call run.mjs made is there, under the E2B key's principal,
// with the CRITICAL command denied, one HIGH command approved and the
// other denied by the approver.
func checkE2BAudit(ctx context.Context, t *testing.T, g *gatewayProc, admin string, rep e2bReport) {
	want := map[string]map[string]int{
		// The commands (10 of run.mjs, 7 of its persistent_sandbox step,
		// 1 of makeDir's mkdir), the file calls, and the kill.
		rep.SandboxID: {"execute": 18, "file.write": 1, "file.get": 1, "file.delete": 1, "session.delete": 1,
			"high approved": 1, "high denied": 1},
		// Five cells of its own (one refused) and one in a context, and
		// the kill.
		rep.InterpreterID: {"run_code": 6, "session.delete": 1},
	}
	for id, kinds := range want {
		var page struct {
			Records []struct {
				Kind      string `json:"kind"`
				Tenant    string `json:"tenant"`
				Principal string `json:"principal"`
				Outcome   string `json:"outcome"`
				RiskLevel string `json:"risk_level"`
				Approval  *struct {
					Status string `json:"status"`
				} `json:"approval"`
			} `json:"records"`
		}
		if err := g.rest(ctx, "GET", "/v1/audit?limit=200&session_id="+id, admin, nil, &page); err != nil {
			t.Fatal(err)
		}
		got := map[string]int{}
		for _, r := range page.Records {
			got[r.Kind]++
			if r.Tenant != "e2b-agent" || r.Principal != "agent:e2b-agent" {
				t.Errorf("%s: a %s record of tenant %q, principal %q", id, r.Kind, r.Tenant, r.Principal)
			}
			switch {
			case r.RiskLevel == "CRITICAL" && r.Outcome != "denied":
				t.Errorf("%s: the CRITICAL command's record says %s", id, r.Outcome)
			case r.RiskLevel == "HIGH" && r.Approval != nil && r.Approval.Status == "approved" && r.Outcome == "ok":
				got["high approved"]++
			case r.RiskLevel == "HIGH" && r.Approval != nil && r.Approval.Status == "denied" && r.Outcome == "denied":
				got["high denied"]++
			case r.RiskLevel == "HIGH":
				t.Errorf("%s: a HIGH command's record: %+v", id, r)
			}
		}
		for k, n := range kinds {
			if got[k] < n {
				t.Errorf("%s: %d %s records, want at least %d (all: %v)", id, got[k], k, n, got)
			}
		}
	}
}

// decideHeld polls the pending approvals with the approver token and
// decides each held request whose code is a key of decisions, after a
// human's pause, until every one is decided. It reports the approved one.
func (g *gatewayProc) decideHeld(ctx context.Context, decisions map[string]string) *approverRun {
	a := &approverRun{done: make(chan struct{})}
	go func() {
		defer close(a.done)
		left := maps.Clone(decisions)
		for len(left) > 0 && ctx.Err() == nil {
			var list struct {
				Approvals []approvalSeen `json:"approvals"`
			}
			if err := g.rest(ctx, http.MethodGet, "/v1/approvals?status=pending", g.approver, nil, &list); err != nil {
				a.err = err
				return
			}
			for _, p := range list.Approvals {
				decision, ok := left[p.Code]
				if !ok {
					continue
				}
				time.Sleep(approverPause)
				var res approvalSeen
				if a.err = g.rest(ctx, http.MethodPost, "/v1/approvals/"+p.ID+"/decision", g.approver,
					map[string]string{"decision": decision, "reason": "e2e approver"}, &res); a.err != nil {
					return
				}
				if decision == "approve" {
					a.seen = p
					a.seen.Status = res.Status
				}
				delete(left, p.Code)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if len(left) > 0 {
			a.err = ctx.Err()
		}
	}()
	return a
}
