package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// The time-to-first-output scenario (issue 34): the figure agent
// platforms compare, paid at the start of every agent conversation. Each
// sample creates a session and runs its first command, timed from the
// create request to the first output, and deletes the session untimed.
// For each tier (subprocess, docker, gvisor, aio) and each front end that
// can reach it (REST, MCP, the E2B wire protocol), beside the tier's CLI
// baseline in the same run, alternating blocks. The published peer
// figures are shown as published, never as measured here.

// Side labels of the ttfo scenario (the report looks them up).
const (
	ttfoREST = "REST: POST /v1/sessions + run_code"
	ttfoMCP  = "MCP: initialize + tools/call run_code"
	ttfoE2B  = "E2B: POST /sandboxes + process.Start, first stdout"
	// ttfoRESTCommand runs E2B's command line through REST: the E2B
	// side's baseline. The SDK's commands.run always runs a shell (bash
	// -l -c), so E2B's first output includes a bash that REST's python
	// run does not start; the front end's own cost is E2B against REST
	// running the same command, in the same tier.
	ttfoRESTCommand = "REST, E2B's command: POST /v1/sessions + run_code (bash)"
)

// ttfoE2BCommand is the first command of the E2B side and of its REST
// baseline: python after an import that the default policy sends to the
// container tiers, run by a shell.
const ttfoE2BCommand = "python3 -c 'import os; print(1)'"

// ttfoTargetsMS are issue 34's p50 targets, from session create to first
// output, by tier.
var ttfoTargetsMS = map[string]float64{"subprocess": 15, "docker": 50, "gvisor": 120, "aio": 50}

// ttfoTiers orders the tiers in the report.
var ttfoTiers = []string{"subprocess", "docker", "gvisor", "aio"}

// ttfoE2BRatio is the target of the E2B front end against REST, same
// tier, same command.
const ttfoE2BRatio = 1.2

// peerFigure is a published figure of another platform.
type peerFigure struct {
	Name   string  `json:"name"`
	P50MS  float64 `json:"p50_ms"`
	Source string  `json:"source"`
}

// publishedPeers are the figures issue 34 quotes (published, not measured).
var publishedPeers = []peerFigure{
	{"Daytona", 110, "published p50, sandbox create to first command"},
	{"E2B", 440, "published, about 440 ms"},
	{"CubeSandbox", 48, "published cold create on bare-metal microVMs"},
}

// ttfoResult is one abResult per tier; Sides[0] is REST.
type ttfoResult struct {
	// Date and Commit are this scenario's own: a -merge run lays it
	// over an earlier report's other scenarios.
	Date      time.Time    `json:"date"`
	Commit    string       `json:"commit"`
	Tiers     []abResult   `json:"tiers"`
	Published []peerFigure `json:"published_peers"`
	// GapMS is the untimed wait before each sample (-ttfo-gap).
	GapMS float64 `json:"gap_ms"`
	// Pools are the tiers' pools after their run, as /readyz shows them.
	Pools []ttfoPool `json:"pools,omitempty"`
}

// ttfoPool is a tier's pool of pre-started sandboxes after its run: how
// many first runs claimed one and how many found none ready.
type ttfoPool struct {
	Tier           string `json:"tier"`
	Claims, Misses int64
}

// ttfoTier is one tier: how to reach it and its CLI baseline.
type ttfoTier struct {
	name     string
	g        *gatewayProc
	code     string
	ctx      map[string]any // run_code context
	baseline named
	e2b      bool // the E2B process API reaches this tier
}

// scenarioTTFO measures every tier the gateways here serve.
func scenarioTTFO(ctx context.Context, gw *gatewayProc, o opts) (ttfoResult, error) {
	res := ttfoResult{Published: publishedPeers, Date: time.Now().UTC(), Commit: gitCommit(), GapMS: float64(o.ttfoGap.Milliseconds())}
	python, err := sandboxPython()
	if err != nil {
		return res, err
	}
	cliArgs := func(extra ...string) []string {
		a := append([]string{"run", "--rm"}, extra...)
		return append(a, "--network", "none", o.image, "python3", "-c", "print(1)")
	}
	tiers := []ttfoTier{
		{name: "subprocess", g: gw, code: "print(1)", baseline: named{label: "raw python3", s: rawSide(python, "-c", "print(1)")}},
		{name: "docker", g: gw, code: strictCode, e2b: true, baseline: named{label: "docker run --rm CLI", s: rawSide("docker", cliArgs()...)}},
		{name: "aio", g: gw, code: "print(1)", ctx: map[string]any{"needs_browser": false, "needs_persistent_fs": true}, // MCP's schema wants both
			baseline: named{label: "docker run --rm CLI", s: rawSide("docker", cliArgs()...)}},
	}
	if o.want("ttfo") || o.want("ttfo-gvisor") {
		gv, err := startGVisorGateway(ctx)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: ttfo gvisor unavailable: %v\n", err)
		} else {
			defer gv.stop()
			tiers = append(tiers, ttfoTier{name: "gvisor", g: gv, code: strictCode,
				baseline: named{label: "docker run --rm --runtime=runsc CLI", s: rawSide("docker", cliArgs("--runtime=runsc")...)}})
		}
	}
	for _, t := range tiers {
		if !o.want("ttfo") && !o.want("ttfo-"+t.name) {
			continue
		}
		r, pool, err := ttfoTierRun(ctx, t, o)
		if pool != nil {
			res.Pools = append(res.Pools, *pool)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: ttfo %s unavailable: %v\n", t.name, err)
			r = abResult{Name: "time to first output: " + t.name, Key: "ttfo-" + t.name, Concurrency: 1,
				Sides: []sideResult{{Label: ttfoREST, Unavailable: err.Error()}}}
		}
		res.Tiers = append(res.Tiers, r)
	}
	return res, nil
}

// ttfoTierRun measures one tier's front ends against its baseline.
func ttfoTierRun(ctx context.Context, t ttfoTier, o opts) (abResult, *ttfoPool, error) {
	prefix := "ttfo-" + t.name + "-" + randHex()
	var seq atomic.Int64
	next := func() string { return fmt.Sprintf("%s-%d", prefix, seq.Add(1)) }
	sides := []named{
		{label: ttfoREST, s: func(ctx context.Context) (time.Duration, error) {
			return ttfoRESTOnce(ctx, t, next(), "python", t.code)
		}},
		{label: ttfoMCP, s: func(ctx context.Context) (time.Duration, error) { return ttfoMCPOnce(ctx, t) }},
	}
	if t.e2b {
		sides = append(sides,
			named{label: ttfoE2B, s: func(ctx context.Context) (time.Duration, error) { return ttfoE2BOnce(ctx, t) }},
			named{label: ttfoRESTCommand, s: func(ctx context.Context) (time.Duration, error) {
				return ttfoRESTOnce(ctx, t, next(), "bash", ttfoE2BCommand)
			}})
	}
	sides = append(sides, t.baseline)
	for _, s := range sides { // warm-up: images, interpreters, pools
		for range 2 {
			if _, err := s.s(ctx); err != nil {
				return abResult{}, nil, fmt.Errorf("%s warm-up: %w", s.label, err)
			}
		}
	}
	before := readPool(ctx, t)
	for i := range sides {
		sides[i].s = paced(o.ttfoGap, sides[i].s)
	}
	r, err := ab(ctx, "ttfo-"+t.name, "time to first output: "+t.name+" (session create to first output)",
		sides, 1, o.ttfoN, o.ttfoBlock)
	if err != nil {
		return r, nil, err
	}
	r.print(os.Stdout)
	after := readPool(ctx, t)
	if after == nil {
		return r, nil, nil
	}
	if before != nil { // the warm-up's claims are not the run's
		after.Claims, after.Misses = after.Claims-before.Claims, after.Misses-before.Misses
	}
	fmt.Printf("  %s pool during the run: claims %d, misses %d (gap %v before each sample)\n", t.name, after.Claims, after.Misses, o.ttfoGap)
	return r, after, nil
}

// paced waits gap, untimed, before each sample of s: one session arrives
// after another has had its first output, as agent conversations start.
func paced(gap time.Duration, s func(context.Context) (time.Duration, error)) func(context.Context) (time.Duration, error) {
	if gap <= 0 {
		return s
	}
	return func(ctx context.Context) (time.Duration, error) {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(gap):
		}
		return s(ctx)
	}
}

// readPool reads the tier's pool of pre-started sandboxes from /readyz,
// nil when the tier has none.
func readPool(ctx context.Context, t ttfoTier) *ttfoPool {
	b, err := t.g.do(ctx, "GET", "/readyz", "", nil)
	if err != nil {
		return nil
	}
	var rz struct {
		Executors map[string]struct {
			Pool *struct {
				Claims, Misses int64
			} `json:"pool"`
		} `json:"executors"`
	}
	if json.Unmarshal(b, &rz) != nil {
		return nil
	}
	if p := rz.Executors[t.name].Pool; p != nil {
		return &ttfoPool{Tier: t.name, Claims: p.Claims, Misses: p.Misses}
	}
	return nil
}

// ttfoRESTOnce creates a session, runs its first command (code in lang)
// and deletes it.
func ttfoRESTOnce(ctx context.Context, t ttfoTier, id, lang, code string) (time.Duration, error) {
	t0 := time.Now()
	if _, err := t.g.do(ctx, "POST", "/v1/sessions", "application/json", jsonBody(map[string]any{"id": id})); err != nil {
		return 0, fmt.Errorf("create session: %w", err)
	}
	body := map[string]any{"code": code, "language": lang}
	if t.ctx != nil {
		body["context"] = t.ctx
	}
	err := t.g.runChecked(ctx, id, body, "1\n", t.name)
	d := time.Since(t0)
	if derr := t.g.deleteSession(ctx, id); err == nil && derr != nil {
		err = fmt.Errorf("delete session: %w", derr)
	}
	return d, err
}

// mcpPost sends one JSON-RPC message to /mcp and returns the answer's
// JSON (from a JSON body or the first SSE data line) and the session id.
func mcpPost(ctx context.Context, g *gatewayProc, session string, msg map[string]any) ([]byte, string, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", g.base+"/mcp", bytes.NewReader(jsonBody(msg)))
	if err != nil {
		return nil, "", err
	}
	req.Header.Set("Authorization", "Bearer "+agentToken)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	res, err := g.client.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer res.Body.Close()
	if res.StatusCode >= 300 {
		b, _ := io.ReadAll(io.LimitReader(res.Body, 512))
		return nil, "", fmt.Errorf("mcp %v: %d %s", msg["method"], res.StatusCode, b)
	}
	sid := res.Header.Get("Mcp-Session-Id")
	if _, ok := msg["id"]; !ok {
		_, _ = io.Copy(io.Discard, res.Body)
		return nil, sid, nil
	}
	if strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data:"); ok {
				return []byte(strings.TrimSpace(data)), sid, nil
			}
		}
		return nil, sid, fmt.Errorf("mcp %v: no data in the stream", msg["method"])
	}
	b, err := io.ReadAll(res.Body)
	return b, sid, err
}

// ttfoMCPOnce opens an MCP session (its derived sandgate session is
// created with it), calls run_code and ends the MCP session untimed.
func ttfoMCPOnce(ctx context.Context, t ttfoTier) (time.Duration, error) {
	t0 := time.Now()
	_, sid, err := mcpPost(ctx, t.g, "", map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize",
		"params": map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{},
			"clientInfo": map[string]any{"name": "sandgate-bench", "version": "1"}}})
	if err != nil {
		return 0, err
	}
	if sid == "" {
		return 0, errors.New("mcp: no Mcp-Session-Id")
	}
	defer func() {
		req, _ := http.NewRequest("DELETE", t.g.base+"/mcp", nil)
		req.Header.Set("Authorization", "Bearer "+agentToken)
		req.Header.Set("Mcp-Session-Id", sid)
		if res, err := t.g.client.Do(req); err == nil {
			res.Body.Close()
		}
	}()
	if _, _, err := mcpPost(ctx, t.g, sid, map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"}); err != nil {
		return 0, err
	}
	args := map[string]any{"code": t.code, "language": "python"}
	if t.ctx != nil {
		args["context"] = t.ctx
	}
	raw, _, err := mcpPost(ctx, t.g, sid, map[string]any{"jsonrpc": "2.0", "id": 2, "method": "tools/call",
		"params": map[string]any{"name": "run_code", "arguments": args}})
	d := time.Since(t0)
	if err != nil {
		return d, err
	}
	var out struct {
		Result struct {
			Structured struct {
				Stdout      string `json:"stdout"`
				SandboxType string `json:"sandbox_type"`
			} `json:"structuredContent"`
		} `json:"result"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return d, fmt.Errorf("mcp run_code: %w", err)
	}
	if s := out.Result.Structured; s.Stdout != "1\n" || s.SandboxType != t.name {
		return d, fmt.Errorf("mcp run_code: %.300s", raw)
	}
	return d, nil
}

// e2bRequest is a request to the gateway's E2B front end.
func e2bRequest(ctx context.Context, g *gatewayProc, method, path, ctype string, body []byte, hdr map[string]string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, g.base+"/e2b"+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-API-Key", agentToken)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return g.client.Do(req)
}

// ttfoE2BOnce is what an E2B SDK does for Sandbox.create() and
// commands.run(): create the sandbox, start the process over envd's
// Connect protocol (JSON codec), and read the stream up to its first
// stdout; the sandbox is killed untimed.
func ttfoE2BOnce(ctx context.Context, t ttfoTier) (time.Duration, error) {
	t0 := time.Now()
	res, err := e2bRequest(ctx, t.g, "POST", "/sandboxes", "application/json", jsonBody(map[string]any{"templateID": "base"}), nil)
	if err != nil {
		return 0, err
	}
	var sb struct {
		SandboxID       string `json:"sandboxID"`
		EnvdAccessToken string `json:"envdAccessToken"`
	}
	err = json.NewDecoder(res.Body).Decode(&sb)
	res.Body.Close()
	if err != nil || res.StatusCode != 201 && res.StatusCode != 200 {
		return 0, fmt.Errorf("e2b create: status %d: %v", res.StatusCode, err)
	}
	defer func() {
		if r, err := e2bRequest(context.WithoutCancel(ctx), t.g, "DELETE", "/sandboxes/"+sb.SandboxID, "", nil, nil); err == nil {
			r.Body.Close()
		}
	}()
	msg := jsonBody(map[string]any{"process": map[string]any{"cmd": "/bin/bash", "args": []string{"-l", "-c", ttfoE2BCommand}}})
	env := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(env[1:], uint32(len(msg)))
	env = append(env, msg...)
	res, err = e2bRequest(ctx, t.g, "POST", "/process.Process/Start", "application/connect+json", env, map[string]string{
		"E2b-Sandbox-Id": sb.SandboxID, "E2b-Sandbox-Port": "49983", "X-Access-Token": sb.EnvdAccessToken,
		"Connect-Protocol-Version": "1"})
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(res.Body, 512))
		return 0, fmt.Errorf("e2b start: %d %s", res.StatusCode, b)
	}
	return e2bFirstStdout(res.Body, t0)
}

// e2bFirstStdout reads Connect envelopes until a data event with stdout
// arrives and returns the time since t0 then.
func e2bFirstStdout(r io.Reader, t0 time.Time) (time.Duration, error) {
	br := bufio.NewReader(r)
	var hdr [5]byte
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return 0, fmt.Errorf("e2b stream ended before any stdout: %w", err)
		}
		msg := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
		if _, err := io.ReadFull(br, msg); err != nil {
			return 0, err
		}
		if hdr[0]&2 != 0 { // end of stream
			return 0, fmt.Errorf("e2b stream ended before any stdout: %.300s", msg)
		}
		var ev struct {
			Event struct {
				Data *struct {
					Stdout []byte `json:"stdout"`
				} `json:"data"`
				End *struct {
					Error *string `json:"error"`
				} `json:"end"`
			} `json:"event"`
		}
		if err := json.Unmarshal(msg, &ev); err != nil {
			return 0, err
		}
		if d := ev.Event.Data; d != nil && len(d.Stdout) > 0 {
			if string(d.Stdout) != "1\n" {
				return 0, fmt.Errorf("e2b: stdout %q", d.Stdout)
			}
			return time.Since(t0), nil
		}
		if ev.Event.End != nil {
			return 0, fmt.Errorf("e2b process ended without stdout: %.300s", msg)
		}
	}
}

// abResults are the tiers' results that ran, for the charts.
func (r *ttfoResult) abResults() []abResult {
	if r == nil {
		return nil
	}
	var out []abResult
	for _, t := range r.Tiers {
		if len(t.Sides) > 1 {
			out = append(out, t)
		}
	}
	return out
}

// tierOf is a tier's name from its result key.
func tierOf(r abResult) string { return strings.TrimPrefix(r.Key, "ttfo-") }

// ttfoTargets are issue 34's targets: p50 per tier through REST, and E2B
// against REST.
func ttfoTargets(rep *report) ([]target, []string) {
	var ts []target
	var parts []string
	seen := map[string]bool{}
	for _, r := range rep.TTFO.abResults() {
		tier := tierOf(r)
		seen[tier] = true
		rest, ok := r.side(ttfoREST)
		base := r.Sides[len(r.Sides)-1]
		name := fmt.Sprintf("issue 34: %s, session create to first output p50 ≤ %.0f ms", tier, ttfoTargetsMS[tier])
		if !ok {
			ts = append(ts, target{Name: name, Missing: true, Reason: rest.Unavailable})
			continue
		}
		t := target{Name: name, Met: rest.Stats.P50 <= ttfoTargetsMS[tier],
			Measured: fmt.Sprintf("REST %s (p95 %s, p99 %s, n=%d); %s %s: %.2f×", ms(rest.Stats.P50), ms(rest.Stats.P95),
				ms(rest.Stats.P99), rest.Stats.N, base.Label, ms(base.Stats.P50), rest.Stats.P50/base.Stats.P50)}
		if !t.Met {
			t.Reason = fmt.Sprintf("p50 %s on this run's machine", ms(rest.Stats.P50))
		}
		ts = append(ts, t)
		parts = append(parts, fmt.Sprintf("%s %s (%.2f× %s)", tier, ms(rest.Stats.P50), rest.Stats.P50/base.Stats.P50, base.Label))
		if e, ok := r.side(ttfoE2B); ok {
			if same, ok := r.side(ttfoRESTCommand); ok {
				ts = append(ts, ratioTarget(fmt.Sprintf("issue 34: %s through the E2B protocol ≤ %.1f× REST, same command (p50)", tier, ttfoE2BRatio),
					"E2B", "REST", e.Stats.P50, same.Stats.P50, ttfoE2BRatio, "%.2f× REST"))
			}
		}
	}
	for _, tier := range ttfoTiers {
		if lim := ttfoTargetsMS[tier]; !seen[tier] {
			ts = append(ts, target{Name: fmt.Sprintf("issue 34: %s, session create to first output p50 ≤ %.0f ms", tier, lim),
				Missing: true, Reason: unavailable(rep, "ttfo")})
		}
	}
	var lines []string
	if len(parts) > 0 {
		lines = append(lines, "Time to first output, session create to first output at p50: "+strings.Join(parts, ", ")+".")
	}
	return ts, lines
}

// ttfoMarkdown is the report's section on time to first output.
func ttfoMarkdown(r *ttfoResult) string {
	if r == nil {
		return ""
	}
	var b strings.Builder
	p := func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }
	p("## Time to first output (issue 34)\n\nMeasured %s, commit `%s`. Each sample creates a session and runs its first command (`print(1)`; `import os` first for the container tiers, which the policy sends there), timed from the create request to the first output, and deletes the session untimed; concurrency 1, blocks alternating with the tier's CLI baseline in the same run. REST is `POST /v1/sessions` then `run_code`; MCP is `initialize` (the MCP session makes its sandgate session) then `tools/call run_code`; E2B is `POST /e2b/sandboxes` then envd's `process.Process/Start` read up to its first stdout, as the SDK's `Sandbox.create()` and `commands.run()` do (E2B commands are detached runs, which the policy sends to docker). `commands.run()` always starts a shell (`bash -l -c`), where REST's python run starts python alone; so the E2B target compares E2B with REST running the same command line (`run_code`, language bash: the front end's own cost), and the table shows both.\n\n", r.Date.Format("2006-01-02 15:04 MST"), r.Commit)
	if r.GapMS > 0 {
		p("Sessions arrive one at a time: each sample waits %.0f ms, untimed, after the previous one (req/s includes the wait), as agent conversations start; at that rate the tiers' pools of pre-started sandboxes mostly refill between two creates on this 2-core machine (claims and misses below). Back to back (`-ttfo-gap 0`), creates outrun the refill (one sandbox start at a time) and about half of them find no sandbox ready and start their own.\n\n", r.GapMS)
	} else {
		p("Sessions are created back to back (`-ttfo-gap 0`): a burst that outruns the pools' refill, so part of the creates find no pre-started sandbox and start their own (claims and misses below).\n\n")
	}
	p("| tier | front end | p50 | p95 | p99 | n | ratio to the CLI baseline (p50) |\n|---|---|---|---|---|---|---|\n")
	for _, t := range r.Tiers {
		base := t.Sides[len(t.Sides)-1]
		for _, s := range t.Sides {
			if s.Unavailable != "" {
				p("| %s | %s | unavailable: %s | | | | |\n", tierOf(t), s.Label, s.Unavailable)
				continue
			}
			ratio := "baseline"
			if s.Label != base.Label {
				ratio = fmt.Sprintf("%.2f×", s.Stats.P50/base.Stats.P50)
			}
			p("| %s | %s | %s | %s | %s | %d | %s |\n", tierOf(t), s.Label, ms(s.Stats.P50), ms(s.Stats.P95), ms(s.Stats.P99), s.Stats.N, ratio)
		}
	}
	for _, pl := range r.Pools {
		p("\n%s's pool during the run: %d creates claimed a pre-started sandbox, %d found none ready.\n", pl.Tier, pl.Claims, pl.Misses)
	}
	p("\nPublished figures of other platforms (as published, not measured here, on their hardware):\n\n")
	for _, f := range r.Published {
		p("- %s: %s (%s)\n", f.Name, ms(f.P50MS), f.Source)
	}
	for _, t := range r.abResults() {
		p("\n![%s](perf/%s)\n", t.Name, latencyChartName(t))
	}
	p("\n")
	return b.String()
}
