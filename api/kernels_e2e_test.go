package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"image/png"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/confirm"
	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/subprocess"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/mcp"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/risk"
	"github.com/sandgate/sandgate/workspace"
)

// newKernelEnv is the gateway as main wires it for stateful runs: the
// default policy in STRICT mode (stateful cells go to docker), the real
// Docker executor next to the subprocess one, the approval hub, and the
// MCP server. One env serves every kernel test: each uses its own
// sessions, so each gets its own kernel.
func newKernelEnv(t *testing.T) *approvalEnv {
	t.Helper()
	d := newDockerExecutor(t)
	dir := t.TempDir()
	traversable(t, dir)
	ctx := context.Background()
	st, err := audit.Open(ctx, filepath.Join(dir, "audit.db"), audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ws, err := workspace.New(filepath.Join(dir, "workspaces"), workspace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := policy.New(ctx, policy.Options{EvalTimeout: testEvalTimeout})
	if err != nil {
		t.Fatal(err)
	}
	sp, err := subprocess.New(ctx, subprocess.Config{})
	if err != nil {
		t.Fatal(err)
	}
	hub, err := confirm.NewHub(ctx, confirm.HubOptions{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	mgr, err := manager.New(manager.Config{Mode: "STRICT"}, manager.Deps{
		Assessor: risk.NewAssessor(nil, nil), Policy: eng, Confirm: hub,
		Executors: []executors.Executor{sp, d}, Workspaces: ws, Audit: st, Metrics: manager.NewMetrics(reg),
	})
	if err != nil {
		t.Fatal(err)
	}
	msrv, err := mcp.New(mcp.Config{}, mcp.Deps{Manager: mgr})
	if err != nil {
		t.Fatal(err)
	}
	auth, err := NewAuth([]Token{NewToken("a", RoleAgent, agentTok), NewToken("p", RoleApprover, approverTok)})
	if err != nil {
		t.Fatal(err)
	}
	h := New(Config{}, Deps{Manager: mgr, Policy: eng, Audit: st, Auth: auth, Gatherer: reg, Approvals: hub, MCP: msrv})
	e := &approvalEnv{env: &env{t: t, srv: httptest.NewServer(h), dataDir: dir, audit: st, ws: ws}, hub: hub}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hub.Close(cctx)
		_ = msrv.Close(cctx)
		e.srv.Close()
		_ = st.Close()
	})
	return e
}

// cell runs code as a stateful cell of session and returns the response.
func (e *approvalEnv) cell(t *testing.T, session, code string, timeoutS int) resp {
	t.Helper()
	r := e.doT(t, "POST", "/v1/sessions/"+session+"/run_code", agentTok,
		map[string]any{"code": code, "language": "python", "stateful": true, "timeout_s": timeoutS})
	if r.status != 200 {
		t.Fatalf("cell %q: %d %s", code, r.status, r.raw)
	}
	return r
}

// doT is env.do reporting to t, which may be a parallel subtest's.
func (e *approvalEnv) doT(t *testing.T, method, path, token string, body any) resp {
	t.Helper()
	sub := *e.env
	sub.t = t
	return sub.do(method, path, token, body)
}

// results returns the response's results, failing when it has none.
func results(t *testing.T, r resp) []map[string]any {
	t.Helper()
	list, ok := r.body["results"].([]any)
	if !ok {
		t.Fatalf("no results: %s", r.raw)
	}
	out := make([]map[string]any, len(list))
	for i, v := range list {
		out[i] = obj(v)
	}
	return out
}

func TestKernelsEndToEnd(t *testing.T) {
	e := newKernelEnv(t)

	t.Run("StatePersistsAcrossThreeCalls", func(t *testing.T) {
		t.Parallel()
		r := e.cell(t, "k-state", "import math\nx = 40\ndef twice(v):\n    return 2 * v", 60)
		if r.body["success"] != true || r.body["sandbox_type"] != "docker" || r.body["kernel_restarted"] != false {
			t.Fatalf("first cell: %s", r.raw)
		}
		e.cell(t, "k-state", "x += 1", 60)
		r = e.cell(t, "k-state", "print(twice(x), math.floor(2.5))\nx + 1", 60)
		res := results(t, r)
		if r.body["stdout"] != "82 2\n" || len(res) != 1 || res[0]["text/plain"] != "42" {
			t.Fatalf("third cell: %s", r.raw)
		}
		// IPython's own: _ is the last result, magics work.
		r = e.cell(t, "k-state", "%time y = _ * 2\ny", 60)
		if res := results(t, r); len(res) != 1 || res[0]["text/plain"] != "84" || !strings.Contains(r.body["stdout"].(string), "Wall time") {
			t.Fatalf("_ and %%time: %s", r.raw)
		}
	})

	// A cell whose output is not UTF-8 (a file name of raw bytes) is shown
	// with the bytes replaced, and the kernel keeps its state: the driver
	// once died on such a message.
	t.Run("NonUTF8OutputKeepsTheKernel", func(t *testing.T) {
		t.Parallel()
		e.cell(t, "k-bytes", "kept = 7", 60)
		r := e.cell(t, "k-bytes", "import os\nprint('a' + os.fsdecode(b'\\xff') + 'b')", 60)
		if r.body["success"] != true || r.body["stdout"] != "a\ufffdb\n" {
			t.Fatalf("non-UTF-8 output: %s", r.raw)
		}
		if r = e.cell(t, "k-bytes", "print(kept)", 60); r.body["stdout"] != "7\n" || r.body["kernel_restarted"] != false {
			t.Fatalf("after it: %s", r.raw)
		}
	})

	// One session (one kernel) for the rich results, in turn: a plot, a
	// DataFrame, a streamed cell and the same over MCP.
	t.Run("RichResults", func(t *testing.T) {
		t.Parallel()
		t.Run("PlotReturnsPNG", func(t *testing.T) {
			r := e.cell(t, "k-rich", "%config InlineBackend.print_figure_kwargs = {'bbox_inches': None}\n"+
				"import matplotlib.pyplot as plt\nfig = plt.figure(figsize=(4, 3), dpi=100)\nplt.plot([1, 3, 2])", 120)
			var pngs []string
			for _, b := range results(t, r) {
				if s, ok := b["image/png"].(string); ok {
					pngs = append(pngs, s)
				}
			}
			if r.body["success"] != true || len(pngs) != 1 {
				t.Fatalf("want one PNG: %s", r.raw)
			}
			raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(pngs[0]))
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := png.DecodeConfig(bytes.NewReader(raw))
			if err != nil || cfg.Width != 400 || cfg.Height != 300 {
				t.Fatalf("png %dx%d %v, want 400x300", cfg.Width, cfg.Height, err)
			}
			if _, err := png.Decode(bytes.NewReader(raw)); err != nil {
				t.Fatalf("png does not decode: %v", err)
			}
		})
		t.Run("DataFrameReturnsHTML", func(t *testing.T) {
			r := e.cell(t, "k-rich", "import pandas as pd\ndf = pd.DataFrame({'city': ['Oslo', 'Lima'], 'temp': [3, 19]})\ndf", 120)
			res := results(t, r)
			if len(res) != 1 {
				t.Fatalf("results: %s", r.raw)
			}
			html, _ := res[0]["text/html"].(string)
			plain, _ := res[0]["text/plain"].(string)
			for _, want := range []string{"<table", "<td>Oslo</td>", "<td>Lima</td>", "<td>19</td>"} {
				if !strings.Contains(html, want) {
					t.Fatalf("html lacks %q: %s", want, html)
				}
			}
			if !strings.Contains(plain, "Oslo") {
				t.Fatalf("text/plain: %q", plain)
			}
		})
		t.Run("CellOutputStreams", func(t *testing.T) {
			// The cell prints 'first', then waits (at most 30 s) for the
			// file the client creates in the workspace once it has
			// received 'first': a cell that prints 'second' streamed
			// 'first' while it ran, however slow the delivery.
			const gate = "cell-gate"
			code := "import os, time\nprint('first', flush=True)\ndeadline = time.monotonic() + 30\n" +
				"while not os.path.exists('/workspace/" + gate + "') and time.monotonic() < deadline:\n    time.sleep(0.05)\n" +
				"print('second' if os.path.exists('/workspace/" + gate + "') else 'gate timeout')\n'done'"
			gated := false
			s := e.stream(t, t.Context(), "/v1/sessions/k-rich/run_code", map[string]any{"language": "python", "stateful": true,
				"timeout_s": 120, "code": code}, func(ev map[string]any) bool {
				if data, _ := ev["data"].(string); !gated && ev["event"] == "stdout" && strings.HasPrefix(data, "first") {
					gated = true
					if _, err := e.ws.Write(t.Context(), agentKey("k-rich"), gate, workspace.WriteCreate, strings.NewReader("")); err != nil {
						t.Errorf("open the gate: %v", err)
					}
				}
				return false
			})
			body := s.exitBody(t)
			if got := s.text(t, "stdout"); got != "first\nsecond\n" || body["stdout"] != got {
				t.Fatalf("streamed %q, body %v: want 'second' (the cell saw the client had 'first' while it ran)", got, body)
			}
			if res, _ := body["results"].([]any); len(res) != 1 || obj(res[0])["text/plain"] != "'done'" {
				t.Fatalf("exit body results %v", body["results"])
			}
		})
		t.Run("MCPReturnsThePlotAsImage", func(t *testing.T) {
			cs := e.mcpConnect(t)
			res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "run_code", Arguments: map[string]any{
				"code":     "import matplotlib.pyplot as plt\nimport pandas as pd\nplt.plot([0, 1], [1, 0])\npd.DataFrame({'k': ['mcp-row']})",
				"stateful": true, "session_id": "k-rich", "timeout_s": 120,
			}})
			if err != nil || res.IsError {
				t.Fatalf("run_code: %v %+v", err, res)
			}
			var img *sdk.ImageContent
			var html string
			for _, c := range res.Content {
				switch c := c.(type) {
				case *sdk.ImageContent:
					img = c
				case *sdk.TextContent:
					if strings.Contains(c.Text, "<table") {
						html = c.Text
					}
				}
			}
			if img == nil || img.MIMEType != "image/png" {
				t.Fatalf("no image content: %+v", res.Content)
			}
			if _, err := png.Decode(bytes.NewReader(img.Data)); err != nil {
				t.Fatalf("image content is not a PNG: %v", err)
			}
			if !strings.Contains(html, "mcp-row") {
				t.Fatalf("no HTML text content: %+v", res.Content)
			}
		})
	})

	t.Run("TimeoutInterruptsAndKeepsState", func(t *testing.T) {
		t.Parallel()
		e.cell(t, "k-timeout", "kept = 'still here'", 60)
		r := e.cell(t, "k-timeout", "import time\nwhile True:\n    time.sleep(0.05)", 2)
		if r.body["timed_out"] != true || r.body["exit_code"] != float64(124) || r.body["success"] != false || r.body["kernel_restarted"] != false ||
			!strings.Contains(r.body["stderr"].(string), "KeyboardInterrupt") {
			t.Fatalf("timed-out cell: %s", r.raw)
		}
		r = e.cell(t, "k-timeout", "kept", 60)
		if res := results(t, r); r.body["kernel_restarted"] != false || len(res) != 1 || res[0]["text/plain"] != "'still here'" {
			t.Fatalf("after the timeout: %s", r.raw)
		}
	})

	t.Run("DeadKernelIsRestarted", func(t *testing.T) {
		t.Parallel()
		e.cell(t, "k-exit", "gone = 1", 60)
		r := e.cell(t, "k-exit", "import os\nos._exit(1)", 60)
		if r.body["success"] != false || r.body["exit_code"] != float64(1) {
			t.Fatalf("exiting cell: %s", r.raw)
		}
		r = e.cell(t, "k-exit", "'gone' in globals()", 60)
		if res := results(t, r); r.body["kernel_restarted"] != true || len(res) != 1 || res[0]["text/plain"] != "False" {
			t.Fatalf("after os._exit: %s", r.raw)
		}
		r = e.cell(t, "k-exit", "1 + 1", 60)
		if r.body["kernel_restarted"] != false {
			t.Fatalf("the restart is reported once: %s", r.raw)
		}
	})

	t.Run("SessionsDoNotShareVariables", func(t *testing.T) {
		t.Parallel()
		e.cell(t, "k-alice", "secret = 'alice'", 60)
		r := e.cell(t, "k-bob", "secret", 60)
		if r.body["success"] != false || !strings.Contains(r.body["stderr"].(string), "NameError") {
			t.Fatalf("bob sees alice's variable: %s", r.raw)
		}
		r = e.cell(t, "k-alice", "secret", 60)
		if res := results(t, r); len(res) != 1 || res[0]["text/plain"] != "'alice'" {
			t.Fatalf("alice lost her variable: %s", r.raw)
		}
	})

	t.Run("RestartEndpointAndDeleteKillTheKernel", func(t *testing.T) {
		t.Parallel()
		e.cell(t, "k-life", "v = 5", 60)
		r := e.doT(t, "POST", "/v1/sessions/k-life/kernel/restart", agentTok, nil)
		if r.status != 200 || r.body["restarted"] != true {
			t.Fatalf("restart: %d %s", r.status, r.raw)
		}
		r = e.cell(t, "k-life", "'v' in globals()", 60)
		if res := results(t, r); len(res) != 1 || res[0]["text/plain"] != "False" {
			t.Fatalf("state survived the restart: %s", r.raw)
		}
		if n := kernelContainers(t, agentKey("k-life")); n != 1 {
			t.Fatalf("%d kernel containers before delete, want 1", n)
		}
		if r := e.doT(t, "DELETE", "/v1/sessions/k-life", agentTok, nil); r.status != 204 {
			t.Fatalf("delete: %d %s", r.status, r.raw)
		}
		deadline := time.Now().Add(30 * time.Second)
		for kernelContainers(t, agentKey("k-life")) != 0 {
			if time.Now().After(deadline) {
				t.Fatal("the kernel's container outlived its session")
			}
			time.Sleep(100 * time.Millisecond)
		}
		if r := e.doT(t, "POST", "/v1/sessions/k-life/kernel/restart", agentTok, nil); r.status != 200 || r.body["restarted"] != false {
			t.Fatalf("restart after delete: %d %s", r.status, r.raw)
		}
	})

	t.Run("LimitsCountOverTheKernelsLife", func(t *testing.T) {
		t.Parallel()
		// Memory: each cell keeps 300 MiB; the second one goes past the
		// 512 MiB obligation, although each cell alone is under it.
		r := e.cell(t, "k-mem", "a = b'x' * (300 * 2**20)\nlen(a)", 60)
		if r.body["success"] != true {
			t.Fatalf("first 300 MiB: %s", r.raw)
		}
		r = e.cell(t, "k-mem", "b = b'y' * (300 * 2**20)\nlen(b)", 60)
		if r.body["success"] != false || r.body["exit_code"] != float64(137) {
			t.Fatalf("second 300 MiB: %s", r.raw)
		}
		r = e.cell(t, "k-mem", "'a' in globals()", 60)
		if res := results(t, r); r.body["kernel_restarted"] != true || res[0]["text/plain"] != "False" {
			t.Fatalf("after the OOM kill: %s", r.raw)
		}
		// Processes (threads count): 80 threads left waiting by one cell,
		// and 80 more in the next are past the 128-task obligation.
		spawn := "import threading\nif 'ev' not in globals(): ev = threading.Event()\n" +
			"started = 0\ntry:\n    for _ in range(80):\n        threading.Thread(target=ev.wait).start()\n        started += 1\n" +
			"except RuntimeError as err:\n    print('refused:', err)\nstarted"
		if res := results(t, e.cell(t, "k-mem", spawn, 60)); res[0]["text/plain"] != "80" {
			t.Fatalf("first 80 threads: %v", res)
		}
		r = e.cell(t, "k-mem", spawn+"\n", 60)
		if !strings.Contains(r.body["stdout"].(string), "refused: can't start new thread") {
			t.Fatalf("the next 80 threads: %s", r.raw)
		}
		e.cell(t, "k-mem", "ev.set()", 60)
	})

	t.Run("HighCellWaitsForItsOwnApproval", func(t *testing.T) {
		// Not parallel: it counts the pending approvals.
		e.cell(t, "k-high", "n = 1", 60)
		high := "import subprocess\nn += 1\nprint(subprocess.run(['echo', 'approved'], capture_output=True, text=True).stdout, n)"
		call := e.runStateful("k-high", high)
		p := waitPendingAPI(t, e, 1)[0]
		r := e.doT(t, "POST", "/v1/approvals/"+p["id"].(string)+"/decision", approverTok,
			map[string]any{"decision": "approve", "digest": p["digest"]})
		if r.status != 200 {
			t.Fatalf("approve: %d %s", r.status, r.raw)
		}
		out := call.wait(t)
		if out.status != 200 || out.body["stdout"] != "approved\n 2\n" || approvalOf(out.body)["status"] != "approved" {
			t.Fatalf("approved cell: %d %s", out.status, out.raw)
		}
		// The same HIGH code again is a new cell: it waits for a new approval.
		again := e.runStateful("k-high", high)
		p2 := waitPendingAPI(t, e, 1)[0]
		if p2["id"] == p["id"] {
			t.Fatalf("the approval was reused: %v", p2)
		}
		r = e.doT(t, "POST", "/v1/approvals/"+p2["id"].(string)+"/decision", approverTok,
			map[string]any{"decision": "deny", "reason": "once is enough"})
		if r.status != 200 {
			t.Fatalf("deny: %d %s", r.status, r.raw)
		}
		if out := again.wait(t); out.status != 403 || out.errCode() != "approval_denied" {
			t.Fatalf("denied cell: %d %s", out.status, out.raw)
		}
		// The denied cell never ran: n is still 2.
		r = e.cell(t, "k-high", "n", 60)
		if res := results(t, r); len(res) != 1 || res[0]["text/plain"] != "2" {
			t.Fatalf("after the denied cell: %s", r.raw)
		}
	})

}

// runStateful posts a stateful cell without waiting for its answer.
func (e *approvalEnv) runStateful(session, code string) *pendingCall {
	return e.postAsync(agentTok, session, map[string]any{"code": code, "language": "python", "stateful": true, "timeout_s": 60})
}

// mcpConnect opens an MCP session as the agent.
func (e *approvalEnv) mcpConnect(t *testing.T) *sdk.ClientSession {
	t.Helper()
	c := sdk.NewClient(&sdk.Implementation{Name: "kernel-test", Version: "1"}, nil)
	cs, err := c.Connect(t.Context(), &sdk.StreamableClientTransport{
		Endpoint:   e.srv.URL + "/mcp",
		HTTPClient: &http.Client{Transport: bearerTransport{token: agentTok}},
		MaxRetries: -1,
	}, nil)
	if err != nil {
		t.Fatalf("mcp connect: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// kernelContainers counts the kernel containers of a session (its
// workspace key) the engine knows, running or not.
func kernelContainers(t *testing.T, session string) int {
	t.Helper()
	cli, err := client.New(client.WithHostFromEnv())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	list, err := cli.ContainerList(t.Context(), client.ContainerListOptions{All: true, Filters: make(client.Filters).
		Add("label", "sandgate.kernel=true").Add("label", "sandgate.session="+session)})
	if err != nil {
		t.Fatal(err)
	}
	return len(list.Items)
}

// TestAIOKernel: with needs_persistent_fs, stateful cells run in the
// session's AIO instance, in sandboxd's kernel: state persists, a
// DataFrame comes back as HTML, a timeout keeps the state, os._exit is
// reported as a restart on the next call, the restart endpoint reaches
// it, and another session's instance has its own kernel.
func TestAIOKernel(t *testing.T) {
	ex := newAIOExecutor(t)
	e := newEnv(t, envOpts{executors: []executors.Executor{ex}})
	cell := func(session, code string, timeoutS int) resp {
		t.Helper()
		r := e.do("POST", "/v1/sessions/"+session+"/run_code", agentTok, map[string]any{"code": code, "language": "python",
			"stateful": true, "timeout_s": timeoutS, "context": map[string]any{"needs_persistent_fs": true}})
		if r.status != 200 || r.body["sandbox_type"] != "aio" {
			t.Fatalf("cell %q: %d %s", code, r.status, r.raw)
		}
		return r
	}
	plain := func(r resp) string {
		t.Helper()
		res := results(t, r)
		if len(res) != 1 {
			t.Fatalf("want one result: %s", r.raw)
		}
		s, _ := res[0]["text/plain"].(string)
		return s
	}
	r := cell("ak", "import pandas as pd\ndf = pd.DataFrame({'city': ['Oslo', 'Lima']})\nx = 1", 120)
	if r.body["success"] != true || r.body["kernel_restarted"] != false {
		t.Fatalf("first cell: %s", r.raw)
	}
	r = cell("ak", "x += 1\nprint('x is', x)\ndf", 60)
	if html, _ := results(t, r)[0]["text/html"].(string); r.body["stdout"] != "x is 2\n" || !strings.Contains(html, "<td>Lima</td>") {
		t.Fatalf("second cell: %s", r.raw)
	}
	r = cell("ak", "import time\ntime.sleep(30)", 2)
	if r.body["timed_out"] != true || !strings.Contains(r.body["stderr"].(string), "KeyboardInterrupt") {
		t.Fatalf("timed-out cell: %s", r.raw)
	}
	if got := plain(cell("ak", "x", 60)); got != "2" {
		t.Fatalf("after the timeout x is %q", got)
	}
	if r := cell("ak-other", "'x' in globals()", 120); plain(r) != "False" {
		t.Fatalf("another session sees x: %s", r.raw)
	}
	cell("ak", "import os\nos._exit(1)", 60)
	r = cell("ak", "'x' in globals()", 120)
	if r.body["kernel_restarted"] != true || plain(r) != "False" {
		t.Fatalf("after os._exit: %s", r.raw)
	}
	cell("ak", "y = 3", 60)
	if r := e.do("POST", "/v1/sessions/ak/kernel/restart", agentTok, nil); r.status != 200 || r.body["restarted"] != true {
		t.Fatalf("restart: %d %s", r.status, r.raw)
	}
	if got := plain(cell("ak", "'y' in globals()", 120)); got != "False" {
		t.Fatalf("y survived the restart: %q", got)
	}
}
