package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/pgtest"
)

// fleetSession is the one session the fleet test drives: DeerFlow's
// session of (user u1, thread t1), so that REST, MCP and the DeerFlow
// sandbox all name it.
const fleetSession = "df.u1.t1"

// fleet is three gateway processes on one PostgreSQL database and one
// workspace directory, with the same tokens.
type fleet struct {
	t                      *testing.T
	bin, dir, dsn          string
	agent, approver, admin string
	instance               string // the executors' instance prefix: <instance>-<replica>
	procs                  map[string]*exec.Cmd
	bases                  map[string]string
	logs                   map[string]string
}

// startFleetTest is a fleet test's start: the docker CLI (the test skips,
// or fails under SANDGATE_REQUIRE_DOCKER, without it), three replicas of
// an instance named from prefix, their log tails when the test fails, and
// the test's ten-minute context.
func startFleetTest(t *testing.T, prefix string) (*fleet, context.Context) {
	t.Helper()
	if _, err := exec.LookPath("docker"); err != nil {
		skipOrFail(t, requireDockerEnv, "docker CLI not found: %v", err)
	}
	f := startFleet(t, prefix+"-"+randomToken(t)[4:12])
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(f.logTails())
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	t.Cleanup(cancel)
	return f, ctx
}

func startFleet(t *testing.T, instance string) *fleet {
	t.Helper()
	f := &fleet{t: t, bin: gatewayBinary(t), dir: t.TempDir(), dsn: pgtest.Schema(t),
		agent: randomToken(t), approver: randomToken(t), admin: randomToken(t), instance: instance,
		procs: map[string]*exec.Cmd{}, bases: map[string]string{}, logs: map[string]string{}}
	for _, d := range []string{filepath.Dir(f.dir), f.dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range []string{"a", "b", "c"} {
		f.start(r, instance)
	}
	return f
}

// start runs replica r; its docker executor has an instance of its own
// (replicas sharing an engine must), and a 2 s lease makes a killed
// replica's sessions adoptable soon.
func (f *fleet) start(r, instance string) {
	t := f.t
	conf := filepath.Join(f.dir, r+".yaml")
	yaml := fmt.Sprintf("policy: {eval_timeout: 10s}\nstorage: {driver: postgres, lease: 2s}\ndeerflow: {enabled: true}\n"+
		"browser: {enabled: false}\nexecutors: {docker: {instance: %s-%s}, gvisor: {enabled: false}, aio: {enabled: false}}\n", instance, r)
	if err := os.WriteFile(conf, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	f.logs[r] = filepath.Join(f.dir, r+".log")
	logf, err := os.OpenFile(f.logs[r], os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = logf.Close() })
	cmd := exec.Command(f.bin, "--config", conf, "--mode", "STRICT", "--listen", "127.0.0.1:0",
		"--data-dir", filepath.Join(f.dir, "data"))
	cmd.Env = append(os.Environ(), "SANDGATE_STORAGE_DSN="+f.dsn, "SANDGATE_REPLICA="+r,
		"SANDGATE_AGENT_TOKEN="+f.agent, "SANDGATE_APPROVER_TOKEN="+f.approver, "SANDGATE_ADMIN_TOKEN="+f.admin)
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { stopGateway(t, cmd, exited) })
	g := &gatewayProc{agent: f.agent, approver: f.approver, logPath: f.logs[r]}
	if g.base, err = readBanner(stdout, exited); err != nil {
		t.Fatalf("replica %s: %v\n%s", r, err, g.logTail())
	}
	g.waitReady(t, exited)
	f.procs[r], f.bases[r] = cmd, g.base
}

func (f *fleet) logTails() string {
	var b strings.Builder
	for _, r := range []string{"a", "b", "c"} {
		g := &gatewayProc{logPath: f.logs[r]}
		fmt.Fprintf(&b, "--- replica %s\n%s\n", r, g.logTail())
	}
	return b.String()
}

// call sends one JSON request to replica r (or to a full URL) with the
// agent token, and decodes the answer.
func (f *fleet) call(method, url, body string) (int, map[string]any) {
	f.t.Helper()
	if base, ok := f.bases[url[:1]]; ok && len(url) > 1 && url[1] == '/' {
		url = base + url[1:]
	}
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+f.agent)
	req.Header.Set("X-API-Key", f.agent)
	req.Header.Set("Content-Type", "application/json")
	client := &http.Client{Timeout: 5 * time.Minute}
	res, err := client.Do(req)
	if err != nil {
		f.t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	if out == nil {
		out = map[string]any{"raw": string(raw)}
	}
	return res.StatusCode, out
}

// containers lists the engine's containers of the session made by this
// fleet's replicas (their docker instances start with prefix), by the
// labels the docker executor sets: "kernel" or "sandbox", with its
// instance.
func containers(t *testing.T, prefix, session string) []string {
	t.Helper()
	out, err := exec.Command("docker", "ps", "-a", "--filter", "label=sandgate.session="+session,
		"--format", `{{.Label "sandgate.instance"}} {{if .Label "sandgate.kernel"}}kernel{{else}}sandbox{{end}}`).CombinedOutput()
	if err != nil {
		skipOrFail(t, requireDockerEnv, "docker ps: %v: %s", err, out)
	}
	var list []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.HasPrefix(l, prefix) {
			list = append(list, l)
		}
	}
	return list
}

// removeInstance removes what a killed replica's docker executor left on
// the engine (a restarted replica would, at its start).
func removeInstance(t *testing.T, instance string) {
	out, err := exec.Command("docker", "ps", "-aq", "--filter", "label=sandgate.instance="+instance).Output()
	if err != nil || len(bytes.TrimSpace(out)) == 0 {
		return
	}
	args := append([]string{"rm", "-f"}, strings.Fields(string(out))...)
	if out, err := exec.Command("docker", args...).CombinedOutput(); err != nil {
		t.Logf("remove %s's containers: %v: %s", instance, err, out)
	}
}

// runMCPCalls runs fleet.mjs against base with calls, returning each
// call's result (its structuredContent, or the error's text).
func runMCPCalls(ctx context.Context, t *testing.T, node, base, token string, calls []map[string]any) []mcpFleetCall {
	t.Helper()
	b, _ := json.Marshal(calls)
	cmd := exec.CommandContext(ctx, node, "fleet.mjs")
	cmd.Dir = mcpClientDir
	cmd.Env = append(os.Environ(), "SANDGATE_URL="+base, "SANDGATE_TOKEN="+token, "CALLS="+string(b))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node fleet.mjs: %v\nstderr: %s", err, stderr.String())
	}
	var rep struct {
		Calls []mcpFleetCall `json:"calls"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("fleet.mjs output: %v: %.2000s", err, stdout.String())
	}
	return rep.Calls
}

type mcpFleetCall struct {
	Name   string `json:"name"`
	Thrown string `json:"thrown"`
	Result struct {
		IsError           bool           `json:"isError"`
		StructuredContent map[string]any `json:"structuredContent"`
		Content           []struct {
			Text string `json:"text"`
		} `json:"content"`
	} `json:"result"`
}

// TestFleetOneSession drives one session round-robin through three
// replicas on PostgreSQL and three front ends: REST, the real MCP
// TypeScript SDK client and DeerFlow's provisioner and sandbox routes.
// State set through one is seen through the others; the engine holds one
// kernel and one sandbox for it, all on the replica that serves it; a
// DeerFlow sandbox URL minted by one replica works through another; after
// kill -9 of the owner, the next cell through another replica adopts the
// session and says kernel_restarted; a DeerFlow delete through any
// replica ends the sandbox everywhere.
func TestFleetOneSession(t *testing.T) {
	node, _ := requireMCPClient(t)
	f, ctx := startFleetTest(t, "fleet")
	instance := f.instance
	run := "/v1/sessions/" + fleetSession + "/run_code"
	cell := func(r, code string) map[string]any {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"code": code, "language": "python", "stateful": true})
		st, out := f.call("POST", r+run, string(body))
		if st != 200 {
			t.Fatalf("cell on %s: %d %v", r, st, out)
		}
		return out
	}

	// REST on A: the session is A's, with a kernel.
	cell("a", "x = 41")
	// DeerFlow's provisioner on C: a sandbox on the same session.
	st, sb := f.call("POST", "c/deerflow/api/sandboxes", `{"sandbox_id":"t1","thread_id":"t1","user_id":"u1"}`)
	if st != 200 {
		t.Fatalf("provisioner create on C: %d %v", st, sb)
	}
	sandboxURL, _ := sb["sandbox_url"].(string)
	if !strings.HasPrefix(sandboxURL, f.bases["c"]) {
		t.Fatalf("sandbox_url %q is not C's", sandboxURL)
	}
	// MCP on B: a cell sees A's kernel state; a command writes a file.
	calls := runMCPCalls(ctx, t, node, f.bases["b"], f.agent, []map[string]any{
		{"name": "run_code", "arguments": map[string]any{"code": "x += 1\nprint(x)", "stateful": true, "session_id": fleetSession}},
		{"name": "execute", "arguments": map[string]any{"command": "echo from-mcp > mcp.txt && cat mcp.txt", "session_id": fleetSession}},
	})
	for _, c := range calls {
		if c.Thrown != "" || c.Result.IsError {
			t.Fatalf("mcp %s on B: %s %+v", c.Name, c.Thrown, c.Result)
		}
	}
	if got := calls[0].Result.StructuredContent["stdout"]; got != "42\n" {
		t.Fatalf("the MCP cell on B saw x = %v, want 42 (the kernel A holds)", got)
	}
	// DeerFlow's sandbox URL (minted on C) reached through B: it reads
	// what MCP wrote, and its command sees the same kernel-less files.
	bURL := f.bases["b"] + strings.TrimPrefix(sandboxURL, f.bases["c"])
	st, read := f.call("POST", bURL+"/v1/file/read", `{"file":"/workspace/mcp.txt"}`)
	if data, _ := read["data"].(map[string]any); st != 200 || data["content"] != "from-mcp\n" {
		t.Fatalf("DeerFlow file read through B: %d %v", st, read)
	}
	st, exe := f.call("POST", sandboxURL+"/v1/shell/exec", `{"command":"echo from-deerflow >> mcp.txt"}`)
	if st != 200 || exe["success"] != true {
		t.Fatalf("DeerFlow shell exec through C: %d %v", st, exe)
	}
	// REST on C: the kernel (still A's) sees both.
	out := cell("c", "print(x, open('mcp.txt').read().split())")
	if out["stdout"] != "42 ['from-mcp', 'from-deerflow']\n" {
		t.Fatalf("REST cell on C: %v", out)
	}
	// One kernel and one sandbox, fleet-wide, both A's.
	key := "env-agent~" + fleetSession
	list := containers(t, instance+"-", key)
	kernels, sandboxes := 0, 0
	for _, c := range list {
		if !strings.HasPrefix(c, instance+"-a ") {
			t.Errorf("container %q of the session is not on A, which serves it", c)
		}
		if strings.HasSuffix(c, " kernel") {
			kernels++
		} else {
			sandboxes++
		}
	}
	if kernels != 1 || sandboxes > 1 {
		t.Fatalf("the engine holds %d kernels and %d sandboxes for the session, want 1 and at most 1: %v", kernels, sandboxes, list)
	}

	// kill -9 of A: the next cell through B adopts the session and says
	// its kernel was lost.
	_ = f.procs["a"].Process.Signal(syscall.SIGKILL)
	t.Cleanup(func() { removeInstance(t, instance+"-a") })
	out = cell("b", "try:\n    print(x)\nexcept NameError:\n    print('gone')")
	if out["kernel_restarted"] != true || out["stdout"] != "gone\n" {
		t.Fatalf("the first cell after A's death: kernel_restarted %v, stdout %q; want true, gone", out["kernel_restarted"], out["stdout"])
	}
	st, info := f.call("GET", "c/v1/sessions/"+fleetSession, "")
	moved, _ := info["moved"].(map[string]any)
	if st != 200 || moved["from"] != "a" || !strings.Contains(fmt.Sprint(moved["lost"]), "kernel") {
		t.Fatalf("GET through C after the move: %d %v", st, info)
	}
	if pl, _ := info["placement"].(map[string]any); pl["replica"] != "b" {
		t.Fatalf("placement after the move: %v", info["placement"])
	}
	// A DeerFlow delete through C ends the sandbox everywhere.
	if st, del := f.call("DELETE", "c/deerflow/api/sandboxes/t1", ""); st != 200 || del["ok"] != true {
		t.Fatalf("delete through C: %d %v", st, del)
	}
	for _, r := range []string{"b", "c"} {
		u := f.bases[r] + strings.TrimPrefix(sandboxURL, f.bases["c"])
		if st, res := f.call("POST", u+"/v1/shell/exec", `{"command":"echo still here"}`); st != 404 {
			t.Errorf("the deleted sandbox's URL through %s: %d %v, want 404", r, st, res)
		}
	}
}
