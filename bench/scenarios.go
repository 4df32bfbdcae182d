package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/opa/v1/rego"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/aio"
	"github.com/sandgate/sandgate/policy"
)

// strictCode is Python the risk stage does not prove SAFE (it imports os),
// so STRICT mode sends it to Docker.
const strictCode = "import os\nprint(1)"

// srtPath is the sandbox-runtime CLI bench/tools.sh installs.
func srtPath() string { return filepath.Join("bench", ".tools", "node_modules", ".bin", "srt") }

// srtSide runs the same program under Anthropic's sandbox-runtime, or says
// why it cannot.
func srtSide(ctx context.Context, python string) (side, string) {
	if b, err := os.ReadFile(filepath.Join("bench", ".tools", "unavailable")); err == nil {
		return nil, strings.TrimSpace(string(b))
	}
	bin, err := filepath.Abs(srtPath())
	if err != nil {
		return nil, err.Error()
	}
	if _, err := os.Stat(bin); err != nil {
		return nil, "srt not installed (bench/tools.sh installs it with npm into bench/.tools)"
	}
	s := rawSide(bin, "-c", python+" -I -u -c 'print(1)'")
	if _, err := s(ctx); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return nil, fmt.Sprintf("srt fails here: %v: %s", err, firstLine(string(ee.Stderr)))
		}
		return nil, "srt fails here: " + err.Error()
	}
	return s, ""
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

func randHex() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%x", b)
}

// scenarioSubprocess: SAFE print(1) via the gateway (the session's Python
// zygote, repeated runs in one session) vs python3 spawned directly vs
// srt.
func scenarioSubprocess(ctx context.Context, g *gatewayProc, o opts) ([]abResult, error) {
	python, err := sandboxPython()
	if err != nil {
		return nil, err
	}
	gw := g.runCodeSide("bench-py", "print(1)", false, "subprocess")
	for range 20 { // warm-up: the session's zygote and the connections
		if _, err := gw(ctx); err != nil {
			return nil, err
		}
	}
	sides := []named{{label: "gateway", s: gw}, {label: "python3 direct", s: rawSide(python, "-I", "-u", "-c", "print(1)")}}
	srt, why := srtSide(ctx, python)
	var srtR *retried
	if srt != nil {
		srtR = &retried{s: srt}
		sides = append(sides, named{label: "srt", s: srtR.side, n: o.srtN})
	}
	var out []abResult
	for _, c := range o.levels {
		r, err := ab(ctx, "subprocess", "SAFE Python print(1): gateway (subprocess) vs python3 vs srt", sides, c, o.n, o.block)
		if err != nil {
			return nil, err
		}
		if srt == nil {
			r.Sides = append(r.Sides, sideResult{Label: "srt", Unavailable: why})
		} else {
			r.Sides[2].Failures, r.Sides[2].FirstFailure = srtR.failures, srtR.first
			srtR.failures, srtR.first = 0, ""
		}
		r.print(os.Stdout)
		out = append(out, r)
	}
	return out, nil
}

// scenarioDocker: STRICT Python via Docker, fresh (a new session each
// request, deleted afterwards outside the timing) and warm (one session),
// vs `docker run --rm --network none` through the CLI.
func scenarioDocker(ctx context.Context, g *gatewayProc, o opts) (abResult, error) {
	var seq atomic.Int64
	prefix := "fresh-" + randHex()
	fresh := func(ctx context.Context) (time.Duration, error) {
		id := fmt.Sprintf("%s-%d", prefix, seq.Add(1))
		t0 := time.Now()
		err := g.runCode(ctx, id, strictCode, false, "docker")
		d := time.Since(t0)
		if derr := g.deleteSession(ctx, id); err == nil && derr != nil {
			err = fmt.Errorf("delete session: %w", derr)
		}
		return d, err
	}
	warm := g.runCodeSide("bench-docker", strictCode, false, "docker")
	// A warm container serves one run; the session's next one is prepared
	// in the background after it. An agent thinks (calls its model) between
	// runs, so this side waits o.think, untimed, before each run of its
	// own session; the back-to-back side does not wait.
	paced := g.runCodeSide("bench-docker-paced", strictCode, false, "docker")
	think := o.think
	pacedSide := func(ctx context.Context) (time.Duration, error) {
		time.Sleep(think)
		return paced(ctx)
	}
	cli := rawSide("docker", "run", "--rm", "--network", "none", o.image, "python3", "-c", "print(1)")
	for _, s := range []side{warm, warm, paced, cli, fresh} { // warm-up
		if _, err := s(ctx); err != nil {
			return abResult{}, err
		}
	}
	r, err := ab(ctx, "docker", "STRICT Python via Docker: gateway fresh and warm vs docker run CLI",
		[]named{{label: "gateway fresh", s: fresh}, {label: "gateway warm, back to back", s: warm},
			{label: warmPacedLabel(think), s: pacedSide}, {label: "docker run CLI", s: cli}},
		1, o.dockerN, o.dockerBlock)
	if err == nil {
		r.print(os.Stdout)
	}
	return r, err
}

func warmPacedLabel(think time.Duration) string {
	return fmt.Sprintf("gateway warm, %s think time", think)
}

// scenarioAIO: run_code on the session's warm aio instance vs a direct
// HTTP call over the same instance's sandboxd Unix socket.
func scenarioAIO(ctx context.Context, g *gatewayProc, o opts) (abResult, error) {
	const session = "bench-aio"
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	err := g.runCode(wctx, session, "print(1)", true, "aio") // binds (and starts) the session's instance
	cancel()
	if err != nil {
		return abResult{}, err
	}
	sock, key, err := boundSandboxd(g.aioState, session)
	if err != nil {
		return abResult{}, err
	}
	c := aio.NewUnixClient(sock, key)
	defer c.Close()
	timeout := 30
	direct := timed(func(ctx context.Context) error {
		res, err := c.CodeExecute(ctx, aio.CodeExecuteRequest{Language: "python", Code: "print(1)", Timeout: &timeout, Cwd: "/workspace"})
		if err != nil {
			return err
		}
		if res.Stdout == nil || *res.Stdout != "1\n" {
			return fmt.Errorf("direct: unexpected result %+v", res)
		}
		return nil
	})
	gw := g.runCodeSide(session, "print(1)", true, "aio")
	for range 5 {
		if _, err := gw(ctx); err != nil {
			return abResult{}, err
		}
		if _, err := direct(ctx); err != nil {
			return abResult{}, err
		}
	}
	r, err := ab(ctx, "aio", "aio run_code on a warm instance: gateway vs direct sandboxd HTTP",
		[]named{{label: "gateway", s: gw}, {label: "sandboxd direct", s: direct}}, 1, o.aioN, o.block)
	if err == nil {
		r.print(os.Stdout)
	}
	return r, err
}

// boundSandboxd finds the socket and key of session's aio instance in the
// pool's state directory: the slot whose session record names it. Other
// slots hold instances started ahead (the pool's ahead_on_demand), bound
// to no session.
func boundSandboxd(state, session string) (sock, key string, err error) {
	recs, _ := filepath.Glob(filepath.Join(state, "*", "session"))
	for _, rec := range recs {
		b, err := os.ReadFile(rec)
		if err != nil || !bytes.Contains(b, []byte(session)) {
			continue
		}
		slot := filepath.Dir(rec)
		k, err := os.ReadFile(filepath.Join(slot, "key"))
		if err != nil {
			return "", "", err
		}
		return filepath.Join(slot, "run", "sandboxd.sock"), strings.TrimSpace(string(k)), nil
	}
	return "", "", fmt.Errorf("no slot under %s is bound to session %s (%d bound)", state, session, len(recs))
}

// opaServer serves OPA's trivial-allow policy over net/http: the same HTTP
// stack (Go's server, loopback TCP, JSON in and out) as the gateway.
func opaServer(ctx context.Context) (string, func(), error) {
	pq, err := rego.New(rego.Query("data.bench.allow"),
		rego.Module("bench.rego", "package bench\n\nallow := true\n")).PrepareForEval(ctx)
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/data/bench/allow", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Input map[string]any `json:"input"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rs, err := pq.Eval(r.Context(), rego.EvalInput(in.Input))
		if err != nil || !rs.Allowed() {
			http.Error(w, fmt.Sprint("eval: ", err), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"result": true})
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = srv.Close() }, nil
}

// policyResult adds the gateway's own policy-stage latency, read from its
// sandgate_policy_eval_duration_seconds histogram over the scenario, and
// the baseline issue 32 sets it against: OPA's trivial-allow policy
// evaluated in this process on the same input document, in the same run.
type policyResult struct {
	abResult
	InGatewayP50US float64 `json:"in_gateway_policy_p50_us"`
	InGatewayN     int     `json:"in_gateway_policy_n"`
	TrivialP50US   float64 `json:"trivial_in_process_p50_us,omitempty"`
	TrivialN       int     `json:"trivial_in_process_n,omitempty"`
}

// trivialRatio is the in-gateway p50 over the in-process trivial allow's,
// 0 when either is missing (a results.json from before the baseline).
func (r policyResult) trivialRatio() float64 {
	if r.TrivialP50US <= 0 || r.InGatewayN == 0 {
		return 0
	}
	return r.InGatewayP50US / r.TrivialP50US
}

// trivialInProcess times n evaluations of OPA's trivial allow (`allow :=
// true`, a prepared query) in this process, each on the input document
// the gateway's policy gets for the scenario's request (built by
// policy.Input.Map, executors with a full set of capabilities), converted
// by rego.EvalInput as an SDK caller's would be. It returns the p50 in µs.
func trivialInProcess(ctx context.Context, n int) (float64, error) {
	pq, err := rego.New(rego.Query("data.bench.allow"),
		rego.Module("bench.rego", "package bench\n\nallow := true\n")).PrepareForEval(ctx)
	if err != nil {
		return 0, err
	}
	code := []byte("print(1)")
	caps := executors.Capabilities{NetworkIsolation: true, MemoryLimit: true, ProcessLimit: true, KillDetached: true,
		FilesystemIsolation: true, RootFS: "host", Isolation: "namespaces"}.Map()
	in := policy.Input{
		Mode: "STRICT",
		Request: policy.Request{Kind: "run_code", SessionID: "bench-pol", Language: "python", CodeBytes: len(code),
			CodeSHA256: policy.SHA256Hex(code), TimeoutS: 30},
		Risk:      policy.Risk{Level: "SAFE", ProvenSafe: true},
		Principal: policy.Principal{Role: "agent", Name: "agent"},
		Executors: map[string]policy.ExecutorState{
			"subprocess": {Available: true, Capabilities: caps},
			"docker":     {Available: true, Capabilities: caps},
			"aio":        {Available: true, Capabilities: caps},
		},
	}
	ds := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		rs, err := pq.Eval(ctx, rego.EvalInput(in.Map()))
		ds = append(ds, time.Since(t0))
		if err != nil || !rs.Allowed() {
			return 0, fmt.Errorf("trivial allow: %v", err)
		}
	}
	slices.Sort(ds)
	return float64(ds[len(ds)/2]) / 1e3, nil
}

// scenarioPolicy: POST /v1/policy/evaluate vs OPA's trivial allow.
func scenarioPolicy(ctx context.Context, g *gatewayProc, o opts) (policyResult, error) {
	base, stop, err := opaServer(ctx)
	if err != nil {
		return policyResult{}, err
	}
	defer stop()
	evalBody := jsonBody(map[string]any{"session_id": "bench-pol", "kind": "run_code", "code": "print(1)", "language": "python"})
	gw := timed(func(ctx context.Context) error {
		raw, err := g.do(ctx, "POST", "/v1/policy/evaluate", "application/json", evalBody)
		if err != nil {
			return err
		}
		if !bytes.Contains(raw, []byte(`"action":"allow"`)) {
			return fmt.Errorf("evaluate: %.300s", raw)
		}
		return nil
	})
	opaBody := jsonBody(map[string]any{"input": map[string]any{"session_id": "bench-pol", "kind": "run_code", "code": "print(1)", "language": "python"}})
	triv := timed(func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/data/bench/allow", bytes.NewReader(opaBody))
		req.Header.Set("Authorization", "Bearer "+agentToken)
		req.Header.Set("Content-Type", "application/json")
		res, err := g.client.Do(req)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		var out struct {
			Result bool `json:"result"`
		}
		if err := json.NewDecoder(res.Body).Decode(&out); err != nil || !out.Result {
			return fmt.Errorf("opa: status %d, %v", res.StatusCode, err)
		}
		return nil
	})
	for range 100 {
		if _, err := gw(ctx); err != nil {
			return policyResult{}, err
		}
		if _, err := triv(ctx); err != nil {
			return policyResult{}, err
		}
	}
	const metric = "sandgate_policy_eval_duration_seconds"
	m0, err := g.metrics()
	if err != nil {
		return policyResult{}, err
	}
	r, err := ab(ctx, "policy", "policy only: POST /v1/policy/evaluate vs OPA trivial allow over net/http",
		[]named{{label: "gateway evaluate", s: gw}, {label: "OPA trivial allow", s: triv}}, 1, o.policyN, o.block)
	if err != nil {
		return policyResult{}, err
	}
	m1, err := g.metrics()
	if err != nil {
		return policyResult{}, err
	}
	q, n := readHistogram(m1, metric).quantileSince(readHistogram(m0, metric), 0.5)
	pr := policyResult{abResult: r, InGatewayN: int(n)}
	if !math.IsNaN(q) {
		pr.InGatewayP50US = q * 1e6
	}
	if pr.TrivialP50US, err = trivialInProcess(ctx, o.policyN); err != nil {
		return policyResult{}, err
	}
	pr.TrivialN = o.policyN
	r.print(os.Stdout)
	fmt.Printf("  in-gateway policy stage p50 %.1f µs (histogram, n=%d); OPA trivial allow in process p50 %.1f µs (n=%d): %.2f×\n",
		pr.InGatewayP50US, pr.InGatewayN, pr.TrivialP50US, pr.TrivialN, pr.trivialRatio())
	return pr, nil
}

// scenarioFiles: 64 KiB workspace write and read through the API vs
// os.WriteFile/os.ReadFile.
func scenarioFiles(ctx context.Context, g *gatewayProc, o opts) ([]abResult, error) {
	data := make([]byte, 64<<10)
	_, _ = rand.Read(data)
	dir, err := os.MkdirTemp("", "sgbench-fs")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	local := filepath.Join(dir, "bench64k.bin")
	const path = "/v1/sessions/bench-fs/files/content?path=bench64k.bin"
	apiWrite := timed(func(ctx context.Context) error {
		_, err := g.do(ctx, "PUT", path, "application/octet-stream", data)
		return err
	})
	apiRead := timed(func(ctx context.Context) error {
		b, err := g.do(ctx, "GET", path, "", nil)
		if err == nil && len(b) != len(data) {
			err = fmt.Errorf("read %d bytes, want %d", len(b), len(data))
		}
		return err
	})
	osWrite := timed(func(context.Context) error { return os.WriteFile(local, data, 0o644) })
	osRead := timed(func(context.Context) error {
		b, err := os.ReadFile(local)
		if err == nil && len(b) != len(data) {
			err = fmt.Errorf("read %d bytes", len(b))
		}
		return err
	})
	for range 20 {
		for _, s := range []side{apiWrite, apiRead, osWrite, osRead} {
			if _, err := s(ctx); err != nil {
				return nil, err
			}
		}
	}
	var out []abResult
	w, err := ab(ctx, "file-write", "workspace write 64 KiB: PUT files/content vs os.WriteFile",
		[]named{{label: "gateway", s: apiWrite}, {label: "os.WriteFile", s: osWrite}}, 1, o.filesN, o.block)
	if err != nil {
		return nil, err
	}
	w.print(os.Stdout)
	rd, err := ab(ctx, "file-read", "workspace read 64 KiB: GET files/content vs os.ReadFile",
		[]named{{label: "gateway", s: apiRead}, {label: "os.ReadFile", s: osRead}}, 1, o.filesN, o.block)
	if err != nil {
		return nil, err
	}
	rd.print(os.Stdout)
	return append(out, w, rd), nil
}
