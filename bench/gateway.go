package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

const (
	agentToken = "bench-agent-token-0123456789"
	adminToken = "bench-admin-token-0123456789"
)

// gatewayProc is a gateway built from this checkout and run as its own
// process, so its RSS and goroutines are its own.
type gatewayProc struct {
	cmd      *exec.Cmd
	base     string
	dir      string
	aioState string
	// aioInstance labels this gateway's aio containers; its docker
	// executor's are labelled with the default instance.
	aioInstance string
	client      *http.Client
	// bases, when set, are several replicas: do sends each request to
	// the next one, round-robin (the fleet scenario).
	bases []string
	rr    atomic.Uint64
}

func startGateway(ctx context.Context) (*gatewayProc, error) {
	dir, bin, err := buildGateway(ctx)
	if err != nil {
		return nil, err
	}
	// The defaults, except that the aio pool keeps its instances' state
	// (and so their sandboxd sockets and keys) in this run's directory: the
	// aio scenario calls the warm instance's sandboxd directly through it.
	// Its docker executor has an instance of its own too: a gateway of the
	// default instance starting on the same engine (a test's, another
	// checkout's) would reap this one's containers mid-run, and this one
	// theirs.
	aioState, aioInstance := filepath.Join(dir, "aio"), "sgbench"+randHex()
	yaml := fmt.Sprintf("executors:\n  aio:\n    enabled: true\n    state_dir: %s\n    instance: %s\n  docker:\n    enabled: true\n    instance: sgbench-dk%s\n",
		aioState, aioInstance, randHex())
	g, err := launchGateway(dir, bin, yaml, "sandgate-bench-gateway.log")
	if err != nil {
		return nil, err
	}
	g.aioState, g.aioInstance = aioState, aioInstance
	return g, nil
}

// buildGateway builds the gateway from this checkout into a fresh
// directory that sandbox uids can traverse.
func buildGateway(ctx context.Context) (dir, bin string, err error) {
	dir, err = os.MkdirTemp("", "sgbench")
	if err != nil {
		return "", "", err
	}
	if err := os.Chmod(dir, 0o711); err != nil { // session uids traverse it to their workspace
		return "", "", err
	}
	bin = filepath.Join(dir, "gateway")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/gateway")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return "", "", fmt.Errorf("build gateway: %w", err)
	}
	return dir, bin, nil
}

// launchGateway starts bin with the configuration yaml (written into dir)
// and waits until it is healthy. Its log goes to logName in the temporary
// directory.
func launchGateway(dir, bin, yaml, logName string) (*gatewayProc, error) {
	return launchGatewayEnv(dir, bin, yaml, logName, nil)
}

// launchGatewayEnv is launchGateway with env added to the environment.
func launchGatewayEnv(dir, bin, yaml, logName string, env []string) (*gatewayProc, error) {
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "gateway.yaml")
	if err := os.WriteFile(conf, []byte(yaml), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--config", conf, "--listen", addr, "--data-dir", filepath.Join(dir, "data"))
	cmd.Env = append(append(os.Environ(), "SANDGATE_AGENT_TOKEN="+agentToken, "SANDGATE_ADMIN_TOKEN="+adminToken), env...)
	logf, err := os.Create(filepath.Join(os.TempDir(), logName))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	g := &gatewayProc{cmd: cmd, base: "http://" + addr, dir: dir,
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128}}}
	if err := g.waitHealthy(60 * time.Second); err != nil {
		g.stop()
		return nil, fmt.Errorf("%w (log: %s)", err, logf.Name())
	}
	return g, nil
}

func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func (g *gatewayProc) waitHealthy(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if res, err := g.client.Get(g.base + "/healthz"); err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("gateway not healthy after %s", limit)
}

// stop ends the gateway with SIGTERM, so that it removes its containers and
// aio instances itself, and kills it only if that takes over a minute.
func (g *gatewayProc) stop() {
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = g.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		_ = g.cmd.Process.Kill()
		<-done
	}
	if g.aioState != "" {
		_ = exec.Command("umount", g.aioState).Run() // the pool's bind onto itself, if left
	}
	_ = os.RemoveAll(g.dir)
}

// stopKeep stops the gateway like stop but leaves its directory (shared
// by the replicas of a fleet run).
func (g *gatewayProc) stopKeep() {
	dir := g.dir
	g.dir = ""
	g.stop()
	g.dir = dir
}

// httpError is a non-2xx answer, with the API's error code.
type httpError struct {
	Status int
	Code   string
	Body   string
}

func (e *httpError) Error() string {
	return fmt.Sprintf("status %d %s: %.300s", e.Status, e.Code, e.Body)
}

// do sends one request with the agent token and returns the 2xx body.
func (g *gatewayProc) do(ctx context.Context, method, path, ctype string, body []byte) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	base := g.base
	if len(g.bases) > 0 {
		base = g.bases[g.rr.Add(1)%uint64(len(g.bases))]
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+agentToken)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	res, err := g.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, err
	}
	if res.StatusCode/100 != 2 {
		var eb struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		_ = json.Unmarshal(raw, &eb)
		return raw, &httpError{Status: res.StatusCode, Code: eb.Error.Code, Body: string(raw)}
	}
	return raw, nil
}

func jsonBody(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// runCode posts run_code and checks that the run succeeded in the wanted
// executor.
func (g *gatewayProc) runCode(ctx context.Context, session, code string, persistent bool, wantSandbox string) error {
	body := map[string]any{"code": code, "language": "python"}
	if persistent {
		body["context"] = map[string]any{"needs_persistent_fs": true}
	}
	return g.runChecked(ctx, session, body, "1\n", wantSandbox)
}

// runChecked posts run_code with body and checks that the run succeeded
// with stdout want, in the executor wantSandbox when it is not "".
func (g *gatewayProc) runChecked(ctx context.Context, session string, body map[string]any, want, wantSandbox string) error {
	raw, err := g.do(ctx, "POST", "/v1/sessions/"+session+"/run_code", "application/json", jsonBody(body))
	if err != nil {
		return fmt.Errorf("run_code: %w", err)
	}
	var out struct {
		Success     bool   `json:"success"`
		Stdout      string `json:"stdout"`
		SandboxType string `json:"sandbox_type"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return err
	}
	if !out.Success || out.Stdout != want {
		return fmt.Errorf("run_code: %.300s", raw)
	}
	if wantSandbox != "" && out.SandboxType != wantSandbox {
		return fmt.Errorf("run_code ran in %q, not %q: %.300s", out.SandboxType, wantSandbox, raw)
	}
	return nil
}

// runCodeSide posts run_code of code to a fixed session.
func (g *gatewayProc) runCodeSide(session, code string, persistent bool, wantSandbox string) side {
	return timed(func(ctx context.Context) error {
		return g.runCode(ctx, session, code, persistent, wantSandbox)
	})
}

func (g *gatewayProc) deleteSession(ctx context.Context, session string) error {
	_, err := g.do(ctx, "DELETE", "/v1/sessions/"+session, "", nil)
	return err
}

// pid is the gateway's process id.
func (g *gatewayProc) pid() int { return g.cmd.Process.Pid }

// rssMB reads VmRSS of the gateway process.
func (g *gatewayProc) rssMB() float64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", g.pid()))
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			return float64(kb) / 1024
		}
	}
	return -1
}

// metrics returns the gateway's /metrics text (admin token).
func (g *gatewayProc) metrics() (string, error) {
	req, _ := http.NewRequest("GET", g.base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	res, err := g.client.Do(req)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		return "", fmt.Errorf("metrics: status %d", res.StatusCode)
	}
	return string(b), err
}

// goroutines reads go_goroutines from the gateway's own /metrics.
func (g *gatewayProc) goroutines() int {
	m, err := g.metrics()
	if err != nil {
		return -1
	}
	for line := range strings.SplitSeq(m, "\n") {
		if rest, ok := strings.CutPrefix(line, "go_goroutines "); ok {
			v, _ := strconv.ParseFloat(rest, 64)
			return int(v)
		}
	}
	return -1
}

// histogram is the cumulative buckets of one Prometheus histogram.
type histogram struct {
	le    []float64
	count []float64
}

// readHistogram parses the buckets of an unlabelled histogram.
func readHistogram(text, name string) histogram {
	var h histogram
	prefix := name + `_bucket{le="`
	for line := range strings.SplitSeq(text, "\n") {
		rest, ok := strings.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		leS, val, ok := strings.Cut(rest, `"} `)
		if !ok {
			continue
		}
		le, err1 := strconv.ParseFloat(leS, 64)
		if leS == "+Inf" {
			le, err1 = math.Inf(1), nil
		}
		v, err2 := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err1 == nil && err2 == nil {
			h.le, h.count = append(h.le, le), append(h.count, v)
		}
	}
	return h
}

// quantileSince is the q-quantile of the observations made between before
// and h, interpolated linearly inside the bucket (Prometheus'
// histogram_quantile), in seconds; NaN without observations.
func (h histogram) quantileSince(before histogram, q float64) (float64, float64) {
	if len(h.le) == 0 || len(before.le) != len(h.le) {
		return math.NaN(), 0
	}
	d := make([]float64, len(h.count))
	for i := range d {
		d[i] = h.count[i] - before.count[i]
	}
	total := d[len(d)-1]
	if total <= 0 {
		return math.NaN(), 0
	}
	rank := q * total
	for i := range d {
		if d[i] >= rank {
			lo, prev := 0.0, 0.0
			if i > 0 {
				lo, prev = h.le[i-1], d[i-1]
			}
			hi := h.le[i]
			if math.IsInf(hi, 1) {
				return lo, total
			}
			if d[i] == prev {
				return hi, total
			}
			return lo + (hi-lo)*(rank-prev)/(d[i]-prev), total
		}
	}
	return math.NaN(), total
}
