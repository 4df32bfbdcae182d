package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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
	cmd    *exec.Cmd
	base   string
	dir    string
	client *http.Client
}

func startGateway(ctx context.Context) (*gatewayProc, error) {
	dir, err := os.MkdirTemp("", "sandgate-bench-")
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o711); err != nil { // session uids traverse it to their workspace
		return nil, err
	}
	bin := filepath.Join(dir, "gateway")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/gateway")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return nil, fmt.Errorf("build gateway: %w", err)
	}
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--listen", addr, "--data-dir", filepath.Join(dir, "data"))
	cmd.Env = append(os.Environ(), "SANDGATE_AGENT_TOKEN="+agentToken, "SANDGATE_ADMIN_TOKEN="+adminToken)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	g := &gatewayProc{cmd: cmd, base: "http://" + addr, dir: dir,
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	if err := g.waitHealthy(30 * time.Second); err != nil {
		g.stop()
		return nil, err
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

func (g *gatewayProc) stop() {
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = g.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = g.cmd.Process.Kill()
	}
	_ = os.RemoveAll(g.dir)
}

// runCodeSide posts run_code to a fixed session and checks the run succeeded
// in the subprocess executor.
func (g *gatewayProc) runCodeSide(code, lang string) side {
	body, _ := json.Marshal(map[string]any{"code": code, "language": lang})
	url := g.base + "/v1/sessions/bench/run_code"
	return func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+agentToken)
		res, err := g.client.Do(req)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		raw, err := io.ReadAll(res.Body)
		if err != nil {
			return err
		}
		var out struct {
			Success     bool   `json:"success"`
			SandboxType string `json:"sandbox_type"`
		}
		if err := json.Unmarshal(raw, &out); err != nil {
			return err
		}
		if res.StatusCode != 200 || !out.Success {
			return fmt.Errorf("run_code: status %d: %.300s", res.StatusCode, raw)
		}
		return nil
	}
}

// soakResult is the memory and goroutine check.
type soakResult struct {
	Requests        int     `json:"requests"`
	RSSBeforeMB     float64 `json:"rss_before_mb"`
	RSSAfterMB      float64 `json:"rss_after_mb"`
	GoroutinesStart int     `json:"goroutines_start"`
	GoroutinesEnd   int     `json:"goroutines_end"`
	Stats           stats   `json:"stats"`
}

func (g *gatewayProc) soak(ctx context.Context, s side, c, n int) (soakResult, error) {
	r := soakResult{Requests: n}
	if _, err := measure(ctx, s, c, 2*c); err != nil { // open the c connections first
		return r, err
	}
	r.RSSBeforeMB, r.GoroutinesStart = g.rssMB(), g.goroutines()
	smp, err := measure(ctx, s, c, n)
	if err != nil {
		return r, err
	}
	r.Stats = summarize(smp.lat, smp.wall)
	time.Sleep(time.Second) // let timers settle
	r.RSSAfterMB, r.GoroutinesEnd = g.rssMB(), g.goroutines()
	return r, nil
}

func (r soakResult) print(w io.Writer) {
	fmt.Fprintf(w, "soak: %d requests at c=8, %.1f req/s\n", r.Requests, r.Stats.RPS)
	fmt.Fprintf(w, "  RSS %.1f MB -> %.1f MB (target <= 80 MB: %s)\n", r.RSSBeforeMB, r.RSSAfterMB, verdict(r.RSSAfterMB <= 80))
	fmt.Fprintf(w, "  goroutines %d -> %d (target: no growth: %s)\n", r.GoroutinesStart, r.GoroutinesEnd, verdict(r.GoroutinesEnd <= r.GoroutinesStart+2))
}

// rssMB reads VmRSS of the gateway process.
func (g *gatewayProc) rssMB() float64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", g.cmd.Process.Pid))
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

// goroutines reads go_goroutines from the gateway's own /metrics.
func (g *gatewayProc) goroutines() int {
	req, _ := http.NewRequest("GET", g.base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	res, err := g.client.Do(req)
	if err != nil {
		return -1
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			v, _ := strconv.ParseFloat(rest, 64)
			return int(v)
		}
	}
	return -1
}
