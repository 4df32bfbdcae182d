package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// mcpClientDir holds the npm package run.mjs uses and its lockfile.
const mcpClientDir = "mcp"

// mcpSDK is the npm package the lockfile pins.
const mcpSDK = "@modelcontextprotocol/sdk"

// requireBrowserEnv turns a missing Chromium into a failure; make test sets it.
const requireBrowserEnv = "SANDGATE_REQUIRE_BROWSER"

// TestMCPClient drives /mcp of a real STRICT gateway with the official
// TypeScript SDK client (run.mjs) while this test acts as the approver
// over REST: tools and schemas are listed, SAFE code runs, HIGH code is
// held (progress, URL elicitation) until approved, CRITICAL code is an
// isError policy_denied, a file written over MCP is read by code, a
// request without a token is a 401 naming the RFC 9728 metadata, and a
// screenshot comes back as image content.
func TestMCPClient(t *testing.T) {
	node, pinned := requireMCPClient(t)
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = io.WriteString(w, `<html><head><title>sandgate mcp e2e</title></head><body style="margin:0;background:#0000ff"></body></html>`)
	}))
	defer page.Close()
	u, _ := url.Parse(page.URL)
	// The browser policy blocks loopback unless allow-listed: only this page.
	// Progress every second, so that the approver's pause below shows a few.
	cfg := sharedMachineConfig(t, "browser:\n  allow_hosts: ["+u.Host+"]\nmcp:\n  progress_interval: 1s\n")
	g := startGateway(t, "STRICT", "--config", cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	approver := g.approveFirst(ctx, t)
	rep := runMCPClient(ctx, t, node, g, page.URL)
	seen := approver.wait(t)
	if rep.SDK != pinned {
		t.Fatalf("ran %s %s, the lockfile pins %s (run make npm-deps)", mcpSDK, rep.SDK, pinned)
	}
	steps := map[string]mcpStep{}
	for _, s := range rep.Steps {
		steps[s.Step] = s
	}
	for _, c := range mcpChecks {
		t.Run(c.step, func(t *testing.T) {
			s, ok := steps[c.step]
			switch {
			case !ok:
				t.Fatalf("run.mjs has no step %s", c.step)
			case s.Thrown != "":
				t.Fatalf("step %s threw: %s", c.step, s.Thrown)
			}
			err := c.check(s.Result, seen)
			if errors.Is(err, errNoChromium) {
				skipOrFail(t, requireBrowserEnv, "chromium is not installed (make deps installs it)")
			}
			if err != nil {
				t.Errorf("%s: %v\nresult: %.1500s", c.step, err, s.Result)
			}
		})
	}
	if t.Failed() {
		t.Log(g.logTail())
	}
}

// requireMCPClient finds node and the installed SDK, skipping (failing
// under SANDGATE_REQUIRE_NPM_CLIENTS=1) when either is missing.
func requireMCPClient(t *testing.T) (node, pinned string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		skipOrFail(t, requireNPMEnv, "node not found (scripts/ensure-deps.sh installs it): %v", err)
	}
	if v, err := exec.Command(node, "-p", "process.versions.node").Output(); err != nil || nodeMajor(string(v)) < minNodeMCP {
		skipOrFail(t, requireNPMEnv, "%s needs node >= %d; %s is %q (%v)", mcpSDK, minNodeMCP, node, strings.TrimSpace(string(v)), err)
	}
	var pkg struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	if err := readJSON(filepath.Join(mcpClientDir, "package.json"), &pkg); err != nil {
		t.Fatal(err)
	}
	var installed struct {
		Version string `json:"version"`
	}
	if err := readJSON(filepath.Join(mcpClientDir, "node_modules", mcpSDK, "package.json"), &installed); err != nil {
		skipOrFail(t, requireNPMEnv, "%s is not installed (make npm-deps): %v", mcpSDK, err)
	}
	pinned = pkg.Dependencies[mcpSDK]
	if installed.Version != pinned {
		skipOrFail(t, requireNPMEnv, "%s %s is installed, package.json pins %s (make npm-deps)", mcpSDK, installed.Version, pinned)
	}
	return node, pinned
}

// minNodeMCP is the oldest Node.js major the pinned SDK's engines allow.
const minNodeMCP = 18

type mcpReport struct {
	SDK   string    `json:"sdk"`
	Steps []mcpStep `json:"steps"`
}

type mcpStep struct {
	Step   string          `json:"step"`
	Result json.RawMessage `json:"result"`
	Thrown string          `json:"thrown"`
}

func runMCPClient(ctx context.Context, t *testing.T, node string, g *gatewayProc, pageURL string) mcpReport {
	t.Helper()
	cmd := exec.CommandContext(ctx, node, "run.mjs")
	cmd.Dir = mcpClientDir
	cmd.Env = append(os.Environ(), "SANDGATE_URL="+g.base, "SANDGATE_TOKEN="+g.agent, "PAGE_URL="+pageURL)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node run.mjs: %v\nstderr: %s\n%s", err, stderr.String(), g.logTail())
	}
	var rep mcpReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("run.mjs output: %v: %.2000s", err, stdout.String())
	}
	return rep
}

// approvalSeen is the pending approval as the approver saw it over REST,
// and the decision's answer.
type approvalSeen struct {
	ID        string `json:"id"`
	SessionID string `json:"session_id"`
	Principal string `json:"principal"`
	Via       string `json:"via"`
	RiskLevel string `json:"risk_level"`
	Code      string `json:"code"`
	Status    string `json:"status"` // after the decision
}

type approverRun struct {
	done chan struct{}
	seen approvalSeen
	err  error
}

// approverPause is how long the approver looks at the request before
// approving it.
const approverPause = 3500 * time.Millisecond

// approveFirst polls the pending approvals with the approver token and
// approves the first one with POST /v1/approvals/{id}/decision, as a
// human on the page would.
func (g *gatewayProc) approveFirst(ctx context.Context, t *testing.T) *approverRun {
	a := &approverRun{done: make(chan struct{})}
	go func() {
		defer close(a.done)
		for ctx.Err() == nil {
			var list struct {
				Approvals []approvalSeen `json:"approvals"`
			}
			if err := g.rest(ctx, http.MethodGet, "/v1/approvals?status=pending", g.approver, nil, &list); err != nil {
				a.err = err
				return
			}
			if len(list.Approvals) > 0 {
				a.seen = list.Approvals[0]
				// A human takes a moment: the held call meanwhile gets progress.
				time.Sleep(approverPause)
				var res approvalSeen
				a.err = g.rest(ctx, http.MethodPost, "/v1/approvals/"+a.seen.ID+"/decision", g.approver,
					map[string]string{"decision": "approve", "reason": "e2e approver"}, &res)
				a.seen.Status = res.Status
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		a.err = ctx.Err()
	}()
	return a
}

func (a *approverRun) wait(t *testing.T) approvalSeen {
	t.Helper()
	select {
	case <-a.done:
	case <-time.After(time.Minute):
		t.Fatal("the approver did not finish")
	}
	if a.err != nil {
		t.Fatalf("approver: %v", a.err)
	}
	return a.seen
}

// rest does one JSON request to the gateway's HTTP API.
func (g *gatewayProc) rest(ctx context.Context, method, path, token string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, g.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %d %s", method, path, res.StatusCode, b)
	}
	return json.Unmarshal(b, out)
}

// toolResult is a CallToolResult as the TypeScript SDK returns it.
type toolResult struct {
	Content []struct {
		Type     string `json:"type"`
		Text     string `json:"text"`
		Data     string `json:"data"`
		MIMEType string `json:"mimeType"`
	} `json:"content"`
	StructuredContent map[string]any `json:"structuredContent"`
	IsError           bool           `json:"isError"`
	Meta              map[string]any `json:"_meta"`
}

func (r toolResult) text() string {
	for _, c := range r.Content {
		if c.Type == "text" {
			return c.Text
		}
	}
	return ""
}

// ok fails unless r is a success with structured content.
func (r toolResult) ok() error {
	if r.IsError || r.StructuredContent == nil {
		return fmt.Errorf("not a structured success: %s", r.text())
	}
	return nil
}

func (r toolResult) errorCode() string {
	e, _ := r.Meta["sandgate/error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

type mcpCheck struct {
	step  string
	check func(json.RawMessage, approvalSeen) error
}

func decodeAs[T any](raw json.RawMessage) (T, error) {
	var v T
	err := json.Unmarshal(raw, &v)
	return v, err
}

// errNoChromium: the gateway's browser has no Chromium here; the step is
// skipped, or failed under SANDGATE_REQUIRE_BROWSER=1.
var errNoChromium = errors.New("no chromium")

var waitingRe = regexp.MustCompile(`^waiting for approval (apr_[0-9a-f]{32}): HIGH, `)

var mcpChecks = []mcpCheck{
	{"no_token_http", func(raw json.RawMessage, _ approvalSeen) error {
		r, err := decodeAs[struct {
			Status int    `json:"status"`
			WWW    string `json:"www_authenticate"`
			Body   struct {
				Error struct {
					Code string `json:"code"`
				} `json:"error"`
			} `json:"body"`
		}](raw)
		if err != nil {
			return err
		}
		if r.Status != 401 || r.Body.Error.Code != "unauthorized" ||
			!strings.Contains(r.WWW, `resource_metadata="http://`) || !strings.Contains(r.WWW, `/.well-known/oauth-protected-resource/mcp"`) {
			return fmt.Errorf("status %d, code %q, WWW-Authenticate %q", r.Status, r.Body.Error.Code, r.WWW)
		}
		return nil
	}},
	{"no_token_client", func(raw json.RawMessage, _ approvalSeen) error {
		r, err := decodeAs[struct {
			Connected bool `json:"connected"`
			Code      int  `json:"code"`
		}](raw)
		if err != nil {
			return err
		}
		if r.Connected || r.Code != 401 {
			return fmt.Errorf("the SDK client without a token: connected=%v, HTTP %d", r.Connected, r.Code)
		}
		return nil
	}},
	{"list_tools", func(raw json.RawMessage, _ approvalSeen) error {
		tools, err := decodeAs[[]struct {
			Name   string         `json:"name"`
			Input  map[string]any `json:"input"`
			Output map[string]any `json:"output"`
		}](raw)
		if err != nil {
			return err
		}
		var names []string
		for _, tl := range tools {
			names = append(names, tl.Name)
			props, _ := tl.Input["properties"].(map[string]any)
			if tl.Input["type"] != "object" || props["session_id"] == nil || tl.Output["type"] != "object" {
				return fmt.Errorf("%s: input %v output %v", tl.Name, tl.Input, tl.Output)
			}
		}
		want := []string{"run_code", "execute", "read_file", "write_file", "edit_file", "ls", "glob", "grep", "delete_file", "browser", "session_info"}
		slices.Sort(names)
		slices.Sort(want)
		if !slices.Equal(names, want) {
			return fmt.Errorf("tools %v, want %v", names, want)
		}
		return nil
	}},
	{"run_safe", func(raw json.RawMessage, _ approvalSeen) error {
		r, err := decodeAs[toolResult](raw)
		if err != nil {
			return err
		}
		if err := r.ok(); err != nil {
			return err
		}
		sc := r.StructuredContent
		if sc["stdout"] != "hello from mcp\n" || sc["exit_code"] != 0.0 || sc["sandbox_type"] != "subprocess" ||
			!strings.Contains(r.text(), "hello from mcp") {
			return fmt.Errorf("structured %v, text %q", sc, r.text())
		}
		return nil
	}},
	{"run_high_approved", func(raw json.RawMessage, seen approvalSeen) error {
		r, err := decodeAs[struct {
			Result       toolResult     `json:"result"`
			Progress     []progressNote `json:"progress"`
			Elicitations []struct {
				Mode          string `json:"mode"`
				URL           string `json:"url"`
				ElicitationID string `json:"elicitationId"`
			} `json:"elicitations"`
			Completions []string `json:"completions"`
		}](raw)
		if err != nil {
			return err
		}
		if err := r.Result.ok(); err != nil {
			return err
		}
		sc := r.Result.StructuredContent
		ap, _ := sc["approval"].(map[string]any)
		if sc["stdout"] != "approved over mcp\n" || !highRoutedAsDesigned(sc) || ap["id"] != seen.ID || ap["status"] != "approved" {
			return fmt.Errorf("structured %v", sc)
		}
		// What the approver saw: the request, over MCP, from this client.
		if seen.Status != "approved" || seen.Via != "MCP (sandgate-e2e 1.0.0)" || !strings.HasPrefix(seen.SessionID, "mcp-") ||
			seen.RiskLevel != "HIGH" || !strings.Contains(seen.Code, "approved over mcp") {
			return fmt.Errorf("the approver saw %+v", seen)
		}
		waiting := 0
		for _, p := range r.Progress {
			if strings.HasPrefix(p.Message, "waiting for approval "+seen.ID) {
				waiting++
			}
		}
		if waiting < 3 {
			return fmt.Errorf("%d progress notifications during a %v wait at 1 s intervals, want at least 3: %+v", waiting, approverPause, r.Progress)
		}
		if m := waitingRe.FindStringSubmatch(r.Progress[0].Message); m == nil || m[1] != seen.ID {
			return fmt.Errorf("first progress %q, want waiting for approval %s", r.Progress[0].Message, seen.ID)
		}
		// After the approval the run's output follows as progress too, and
		// the real npm client keeps receiving it (the progress values rise).
		approvedAt := slices.IndexFunc(r.Progress, func(p progressNote) bool { return strings.Contains(p.Message, "approved by ") })
		if approvedAt < 0 {
			return fmt.Errorf("no 'approved by' progress: %+v", r.Progress)
		}
		for _, p := range r.Progress[approvedAt+1:] {
			if !strings.HasPrefix(p.Message, "output: ") {
				return fmt.Errorf("progress after the approval %q, want the run's output", p.Message)
			}
		}
		for i := 1; i < len(r.Progress); i++ {
			if r.Progress[i].Progress <= r.Progress[i-1].Progress {
				return fmt.Errorf("progress values do not increase: %+v", r.Progress)
			}
		}
		if len(r.Elicitations) != 1 || r.Elicitations[0].Mode != "url" || r.Elicitations[0].ElicitationID != seen.ID ||
			!strings.HasSuffix(r.Elicitations[0].URL, "/#"+seen.ID) {
			return fmt.Errorf("elicitations %+v", r.Elicitations)
		}
		if !slices.Contains(r.Completions, seen.ID) {
			return fmt.Errorf("elicitation completions %v", r.Completions)
		}
		return nil
	}},
	{"execute_denied", func(raw json.RawMessage, _ approvalSeen) error {
		r, err := decodeAs[toolResult](raw)
		if err != nil {
			return err
		}
		if !r.IsError || r.errorCode() != "policy_denied" || !strings.HasPrefix(r.text(), "policy_denied: ") || r.StructuredContent != nil {
			return fmt.Errorf("isError %v, code %q, text %q", r.IsError, r.errorCode(), r.text())
		}
		return nil
	}},
	{"write_then_run", func(raw json.RawMessage, _ approvalSeen) error {
		r, err := decodeAs[struct {
			Write toolResult `json:"write"`
			Run   toolResult `json:"run"`
		}](raw)
		if err != nil {
			return err
		}
		if err := r.Write.ok(); err != nil {
			return fmt.Errorf("write_file: %w", err)
		}
		if err := r.Run.ok(); err != nil {
			return fmt.Errorf("run_code: %w", err)
		}
		if got := r.Run.StructuredContent["stdout"]; got != "WRITTEN OVER MCP\n" {
			return fmt.Errorf("run_code read %q", got)
		}
		return nil
	}},
	{"browser_screenshot", func(raw json.RawMessage, _ approvalSeen) error {
		if _, err := exec.LookPath("chromium"); err != nil {
			return errNoChromium
		}
		r, err := decodeAs[struct {
			Navigate   toolResult `json:"navigate"`
			Screenshot toolResult `json:"screenshot"`
		}](raw)
		if err != nil {
			return err
		}
		if err := r.Navigate.ok(); err != nil {
			return fmt.Errorf("navigate: %w", err)
		}
		if err := r.Screenshot.ok(); err != nil {
			return fmt.Errorf("screenshot: %w", err)
		}
		for _, c := range r.Screenshot.Content {
			if c.Type != "image" {
				continue
			}
			b, err := base64.StdEncoding.DecodeString(c.Data)
			if err != nil || c.MIMEType != "image/png" {
				return fmt.Errorf("image content %s: %v", c.MIMEType, err)
			}
			img, err := png.Decode(bytes.NewReader(b))
			if err != nil {
				return err
			}
			mid := img.Bounds().Max.Div(2)
			if rr, gg, bb, _ := img.At(mid.X, mid.Y).RGBA(); rr>>8 > 10 || gg>>8 > 10 || bb>>8 < 245 {
				return fmt.Errorf("screenshot centre rgb(%d,%d,%d), want the page's blue", rr>>8, gg>>8, bb>>8)
			}
			return nil
		}
		return fmt.Errorf("no image content in the screenshot result")
	}},
	{"session_info", func(raw json.RawMessage, seen approvalSeen) error {
		r, err := decodeAs[toolResult](raw)
		if err != nil {
			return err
		}
		if err := r.ok(); err != nil {
			return err
		}
		if sc := r.StructuredContent; sc["session_id"] != seen.SessionID || sc["exists"] != true || sc["mode"] != "STRICT" {
			return fmt.Errorf("session_info %v, want the session the approver saw (%s)", sc, seen.SessionID)
		}
		return nil
	}},
	{"terminate", func(raw json.RawMessage, _ approvalSeen) error {
		if r, err := decodeAs[struct {
			Terminated bool `json:"terminated"`
		}](raw); err != nil || !r.Terminated {
			return fmt.Errorf("session not terminated: %s (%v)", raw, err)
		}
		return nil
	}},
}

// progressNote is one MCP progress notification as the node client saw it.
type progressNote struct {
	Progress float64 `json:"progress"`
	Total    float64 `json:"total"`
	Message  string  `json:"message"`
}

// highRoutedAsDesigned: approved HIGH code runs in gvisor, or, on an
// engine without runsc, in docker with the policy's executor.fallback
// reason (DESIGN.md §6; the default STRICT policy's isolation upgrade).
func highRoutedAsDesigned(sc map[string]any) bool {
	d, _ := sc["decision"].(map[string]any)
	if d == nil || sc["sandbox_type"] != d["executor"] {
		return false
	}
	switch d["executor"] {
	case "gvisor":
		return true
	case "docker":
		if os.Getenv("SANDGATE_REQUIRE_GVISOR") == "1" {
			return false
		}
		reasons, _ := d["reasons"].([]any)
		for _, r := range reasons {
			if m, _ := r.(map[string]any); m["code"] == "executor.fallback" {
				return true
			}
		}
	}
	return false
}
