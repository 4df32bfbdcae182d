package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

const approverToken = "bench-approver-token-0123456789"

// soakGateway is the fault soak's gateway process: one binary, one
// configuration, one address and data directory, restarted in place after
// SIGKILL so that clients that retry find it again.
type soakGateway struct {
	bin, conf, addr, dataDir, logPath string
	env                               []string
	client                            *http.Client

	mu        sync.Mutex
	cmd       *exec.Cmd
	exited    chan struct{}
	startedAt time.Time
	gen       int
}

func (g *soakGateway) base() string { return "http://" + g.addr }

// start launches the gateway and waits until /healthz answers.
func (g *soakGateway) start(limit time.Duration) error {
	logf, err := os.OpenFile(g.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(g.bin, "--config", g.conf, "--listen", g.addr, "--data-dir", g.dataDir)
	cmd.Env = g.env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()
	g.mu.Lock()
	g.cmd, g.exited, g.startedAt = cmd, exited, time.Now()
	g.gen++
	g.mu.Unlock()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("gateway exited during start-up (log %s)", g.logPath)
		default:
		}
		if res, err := g.client.Get(g.base() + "/healthz"); err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("gateway not healthy after %s (log %s)", limit, g.logPath)
}

// kill sends SIGKILL and waits for the process to be gone.
func (g *soakGateway) kill() {
	g.mu.Lock()
	cmd, exited := g.cmd, g.exited
	g.mu.Unlock()
	_ = cmd.Process.Kill()
	<-exited
}

// stop ends the gateway with SIGTERM (its graceful shutdown removes its
// containers and instances), and kills it after a minute.
func (g *soakGateway) stop() {
	g.mu.Lock()
	cmd, exited := g.cmd, g.exited
	g.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

func (g *soakGateway) pid() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cmd.Process.Pid
}

func (g *soakGateway) since() (time.Time, int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.startedAt, g.gen
}

// answer is what one request got: the gateway's answer (status, stable
// code, request id), or, when none came, the transport error.
type answer struct {
	Status    int
	Code      string
	RequestID string
	Body      []byte
	Err       error
	// Retries counts the attempts that found no gateway listening.
	Retries int
	// CutBeforeOutput: a streamed run whose stream ended (the gateway
	// gone) before any output or its exit: its run may never have started.
	CutBeforeOutput bool
	// Then are the requests the operation made after this one (the
	// delete of a large output's spill): each is recorded as a request
	// of its own, with its own answer and the fault in force while it
	// ran, never folded into this one's verdict.
	Then []followUp
}

// followUp is a request an operation made after its main one.
type followUp struct {
	Op    string
	Start time.Time
	Dur   time.Duration
	A     answer
}

func (a answer) ok() bool { return a.Err == nil && a.Status/100 == 2 }

// call sends one request, retrying while no gateway listens (the gateway
// is being restarted): what a production client does. A request cut in
// flight is not retried here; the caller sees the transport error.
func (g *soakGateway) call(ctx context.Context, token, method, path, ctype string, body []byte, hdr http.Header) answer {
	var a answer
	res, err := g.send(ctx, &a, func() (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, method, g.base()+path, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		for k, v := range hdr {
			req.Header[k] = v
		}
		return req, nil
	})
	if err != nil {
		a.Err = err
		return a
	}
	a.Status, a.RequestID = res.StatusCode, res.Header.Get("X-Request-Id")
	a.Body, err = io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		a.Err = err
	}
	if a.Status/100 != 2 {
		a.Code = errorCode(a.Body)
	}
	return a
}

// send sends the request newReq builds, building it again and retrying
// (counted in a.Retries, at most 600 times, 100 ms apart) while no
// gateway listens.
func (g *soakGateway) send(ctx context.Context, a *answer, newReq func() (*http.Request, error)) (*http.Response, error) {
	for {
		req, err := newReq()
		if err != nil {
			return nil, err
		}
		res, err := g.client.Do(req)
		if err != nil && isRefused(err) && ctx.Err() == nil && a.Retries < 600 {
			a.Retries++
			time.Sleep(100 * time.Millisecond)
			continue
		}
		return res, err
	}
}

func errorCode(body []byte) string {
	var eb struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(body, &eb)
	return eb.Error.Code
}

func isRefused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) && strings.Contains(err.Error(), "dial")
}

// stream sends a run with Accept: application/x-ndjson and reads events
// until the last one, or, with cutAfter > 0, closes the connection after
// that many output events (a client that goes away). The answer's Code is
// the error event's code, if the stream ended with one.
func (g *soakGateway) stream(ctx context.Context, path string, body []byte, cutAfter int) (answer, string) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var a answer
	res, err := g.send(ctx, &a, func() (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, "POST", g.base()+path, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+agentToken)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", mediaNDJSONClient)
		return req, nil
	})
	if err != nil {
		a.Err = err
		return a, ""
	}
	defer res.Body.Close()
	a.Status, a.RequestID = res.StatusCode, res.Header.Get("X-Request-Id")
	if a.Status/100 != 2 {
		a.Body, _ = io.ReadAll(res.Body)
		a.Code = errorCode(a.Body)
		return a, ""
	}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	outputs, last := 0, ""
	for sc.Scan() {
		var ev struct {
			Event  string          `json:"event"`
			Status int             `json:"status"`
			Body   json.RawMessage `json:"body"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			a.Err = fmt.Errorf("stream: bad event: %w", err)
			return a, last
		}
		last = ev.Event
		switch ev.Event {
		case "stdout", "stderr":
			outputs++
			if cutAfter > 0 && outputs >= cutAfter {
				return a, "cut"
			}
		case "error":
			a.Status, a.Code = ev.Status, errorCode(ev.Body)
		}
	}
	if err := sc.Err(); err != nil {
		a.Err = err
	}
	a.CutBeforeOutput = outputs == 0 && last != "exit" && last != "error"
	return a, last
}

const mediaNDJSONClient = "application/x-ndjson"
