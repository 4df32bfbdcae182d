package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The fault soak's programs. Each lands in one executor under the default
// STRICT policy: SAFE code in subprocess, code that imports os in docker,
// a process spawn (HIGH) in gVisor after an approval, and anything that
// needs a persistent filesystem in aio.
const (
	codeSafe    = "print(1)"
	codeDocker  = "import os\nprint(1)"
	codeGVisor  = "import subprocess\nsubprocess.run(['true'])\nprint(1)"
	codeLarge   = "print('x' * 3_000_000)" // over the 1 MiB response cap: truncated, spilled
	codeTimeout = "while True:\n    pass"
	codeTicker  = "import time\nfor i in range(100):\n    print(i, flush=True)\n    time.sleep(0.05)"
)

// runFailed starts the message of a 2xx whose program did not succeed.
const runFailed = "the run failed"

// opRecord is one request of the soak and what became of it.
type opRecord struct {
	Op        string    `json:"op"`
	Session   string    `json:"session"`
	Start     time.Time `json:"start"`
	DurMS     float64   `json:"dur_ms"`
	Status    int       `json:"status"`
	Code      string    `json:"code,omitempty"`
	RequestID string    `json:"request_id,omitempty"`
	Err       string    `json:"err,omitempty"`
	Bad       string    `json:"bad,omitempty"`
	Fault     string    `json:"fault,omitempty"`
	Retries   int       `json:"retries,omitempty"`
	// Streamed marks a streamed run (its answer started with 200).
	Streamed bool `json:"streamed,omitempty"`
	// CutBeforeOutput is answer.CutBeforeOutput.
	CutBeforeOutput bool `json:"cut_before_output,omitempty"`
}

// recorder keeps every request and the fault in force while it ran.
type recorder struct {
	mu    sync.Mutex
	recs  []opRecord
	fault atomic.Value // string: the fault being injected, or ""
	// windows are the faults' times, for requests whose start is known
	// only afterwards (followUp).
	windows []faultWindow
}

type faultWindow struct {
	name     string
	from, to time.Time // to is zero while the fault is in force
}

func (r *recorder) activeFault() string {
	s, _ := r.fault.Load().(string)
	return s
}

func (r *recorder) setFault(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if n := len(r.windows); n > 0 && r.windows[n-1].to.IsZero() {
		r.windows[n-1].to = now
	}
	if name != "" {
		r.windows = append(r.windows, faultWindow{name: name, from: now})
	}
	r.fault.Store(name)
}

// faultAt is the fault that was in force at t, or "".
func (r *recorder) faultAt(t time.Time) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.windows) - 1; i >= 0; i-- {
		w := r.windows[i]
		if !t.Before(w.from) && (w.to.IsZero() || t.Before(w.to)) {
			return w.name
		}
	}
	return ""
}

func (r *recorder) add(rec opRecord) {
	r.mu.Lock()
	r.recs = append(r.recs, rec)
	r.mu.Unlock()
}

// addAnswer records a and the requests that followed it. Each is blamed
// on the fault in force when it began or, failing that, when it ended:
// the harness's own calls during a fault are that fault's too.
func (r *recorder) addAnswer(op, session string, t0 time.Time, fault string, a answer, streamed bool) {
	if fault == "" {
		fault = r.activeFault()
	}
	r.add(newOpRecord(op, session, t0, time.Since(t0)-thenDur(a), fault, a, streamed))
	for _, f := range a.Then {
		ff := r.faultAt(f.Start)
		if ff == "" {
			ff = r.activeFault()
		}
		r.add(newOpRecord(f.Op, session, f.Start, f.Dur, ff, f.A, false))
	}
}

func thenDur(a answer) time.Duration {
	var d time.Duration
	for _, f := range a.Then {
		d += f.Dur
	}
	return d
}

// newOpRecord classifies an answer: a 2xx whose content is wrong is bad,
// anything else that failed is an error.
func newOpRecord(op, session string, t0 time.Time, dur time.Duration, fault string, a answer, streamed bool) opRecord {
	r := opRecord{Op: op, Session: session, Start: t0, DurMS: ms64(dur), Status: a.Status, Code: a.Code,
		RequestID: a.RequestID, Retries: a.Retries, Streamed: streamed, Fault: fault, CutBeforeOutput: a.CutBeforeOutput}
	if a.Err != nil {
		if a.Status/100 == 2 && a.RequestID != "" && !isTransport(a.Err) {
			r.Bad = a.Err.Error()
		} else {
			r.Err = a.Err.Error()
		}
	}
	return r
}

func (r *recorder) snapshot() []opRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]opRecord(nil), r.recs...)
}

// loadOp is one step of a soak worker's cycle. check inspects a 2xx body;
// a non-empty result marks the answer wrong.
type loadOp struct {
	name string
	do   func(ctx context.Context, g *soakGateway, session string) (answer, bool)
}

func runBody(code string, timeoutS int, persistent bool) []byte {
	b := map[string]any{"code": code, "language": "python"}
	if timeoutS > 0 {
		b["timeout_s"] = timeoutS
	}
	if persistent {
		b["context"] = map[string]any{"needs_persistent_fs": true}
	}
	return jsonBody(b)
}

// runOp posts run_code and, on 2xx, checks the executor and stdout.
func runOp(name, code string, timeoutS int, persistent bool, wantExec, wantOut string) loadOp {
	return loadOp{name: name, do: func(ctx context.Context, g *soakGateway, s string) (answer, bool) {
		a := g.call(ctx, agentToken, "POST", "/v1/sessions/"+s+"/run_code", "application/json", runBody(code, timeoutS, persistent), nil)
		if !a.ok() {
			return a, false
		}
		var out struct {
			Success     bool   `json:"success"`
			ExitCode    int    `json:"exit_code"`
			Stdout      string `json:"stdout"`
			SandboxType string `json:"sandbox_type"`
		}
		_ = json.Unmarshal(a.Body, &out)
		if wantOut != "" && !out.Success {
			a.Err = fmt.Errorf("%s (exit %d, stdout %.60q)", runFailed, out.ExitCode, out.Stdout)
		} else if wantExec != "" && out.SandboxType != wantExec && !fellBack(ctx, g, s, a.RequestID, wantExec, out.SandboxType) {
			a.Err = fmt.Errorf("ran in %q, not %q", out.SandboxType, wantExec)
		} else if wantOut != "" && out.Stdout != wantOut {
			a.Err = fmt.Errorf("stdout %.60q", out.Stdout)
		}
		return a, false
	}}
}

// largeOutputOp runs a 3 MB output (over the response cap), checks that
// the response is truncated with the full output spilled into the
// workspace, and deletes the spill, as an agent that read it would: the
// gateway keeps spills until deleted, and the soak's workspace disk is
// small on purpose.
func largeOutputOp() loadOp {
	return loadOp{name: "large_output", do: func(ctx context.Context, g *soakGateway, s string) (answer, bool) {
		a := g.call(ctx, agentToken, "POST", "/v1/sessions/"+s+"/run_code", "application/json", runBody(codeLarge, 0, false), nil)
		if !a.ok() {
			return a, false
		}
		var out struct {
			Truncated  bool   `json:"truncated"`
			OutputPath string `json:"output_path"`
		}
		_ = json.Unmarshal(a.Body, &out)
		if !out.Truncated {
			a.Err = fmt.Errorf("3 MB output not truncated")
			return a, false
		}
		if out.OutputPath == "" {
			return a, false // no room for the spill (a full workspace disk)
		}
		// The delete is a request of its own (spill.delete): under the
		// audit disk fault it fails closed like any other, which says
		// nothing about the run's answer (issue 21's soak counted such a
		// 500 against the run, as a wrong result).
		t0 := time.Now()
		d := g.call(ctx, agentToken, "DELETE", "/v1/sessions/"+s+"/files?path="+url.QueryEscape(out.OutputPath), "", nil, nil)
		a.Then = append(a.Then, followUp{Op: "spill.delete", Start: t0, Dur: time.Since(t0), A: d})
		return a, false
	}}
}

func fileOp(name, method, path, ctype string, body []byte, want string) loadOp {
	return loadOp{name: name, do: func(ctx context.Context, g *soakGateway, s string) (answer, bool) {
		a := g.call(ctx, agentToken, method, "/v1/sessions/"+s+path, ctype, body, nil)
		if a.ok() && want != "" && !bytes.Contains(a.Body, []byte(want)) {
			a.Err = fmt.Errorf("%s: body lacks %q", name, want)
		}
		return a, false
	}}
}

func streamOp(name, code string, cutAfter int) loadOp {
	return loadOp{name: name, do: func(ctx context.Context, g *soakGateway, s string) (answer, bool) {
		a, last := g.stream(ctx, "/v1/sessions/"+s+"/run_code", runBody(code, 30, false), cutAfter)
		if a.Err == nil && a.Status == 200 && cutAfter == 0 && last != "exit" {
			a.Err = fmt.Errorf("stream ended with %q", last)
		}
		return a, a.Status == 200
	}}
}

// soakOps is one worker's cycle: every executor, file operations, a large
// output, a timeout, an approval, a streaming client and one that
// disconnects half way.
func soakOps(executors map[string]bool) []loadOp {
	ops := []loadOp{
		runOp("subprocess", codeSafe, 0, false, "subprocess", "1\n"),
		fileOp("file.write", "PUT", "/files/content?path=notes.md", "text/plain", []byte("# notes\nalpha line\nsecond line\n"), ""),
		fileOp("file.edit", "POST", "/files/edit", "application/json", jsonBody(map[string]any{"path": "notes.md", "old": "alpha", "new": "beta"}), ""),
		fileOp("file.grep", "GET", "/files/grep?pattern=line", "", nil, "second line"),
		fileOp("file.read", "GET", "/files/read?path=notes.md", "", nil, "second line"),
		largeOutputOp(),
		streamOp("stream", codeTicker, 0),
		runOp("timeout", codeTimeout, 1, false, "", ""),
		streamOp("disconnect", codeTicker, 5),
	}
	if executors["docker"] {
		ops = append(ops, runOp("docker", codeDocker, 0, false, "docker", "1\n"))
	}
	if executors["aio"] {
		ops = append(ops, runOp("aio", codeSafe, 0, true, "aio", "1\n"))
	}
	if executors["gvisor"] {
		ops = append(ops, runOp("gvisor+approval", codeGVisor, 0, false, "gvisor", "1\n"))
	}
	return ops
}

// runWorkers runs c workers until ctx ends. Each holds rest read-locked
// for one request, so that whoever takes it for writing sees the gateway
// with no request of the workload in flight.
func runWorkers(ctx context.Context, g *soakGateway, rec *recorder, ops []loadOp, c int, tag string, rest *sync.RWMutex) *sync.WaitGroup {
	var wg sync.WaitGroup
	for i := range c {
		session := fmt.Sprintf("%s-%d", tag, i)
		offset := i * 3 // workers start at different steps
		wg.Go(func() {
			// The session's notes first, so that a worker starting at
			// the edit, grep or read finds them.
			for n := 0; ctx.Err() == nil; n++ {
				op := ops[1] // the write
				if n > 0 {
					op = ops[(offset+n)%len(ops)]
				}
				rest.RLock()
				if ctx.Err() != nil {
					rest.RUnlock()
					return
				}
				fault := rec.activeFault()
				t0 := time.Now()
				a, streamed := op.do(ctx, g, session)
				if ctx.Err() != nil && a.Err != nil {
					rest.RUnlock()
					return // the soak's own end, not the gateway's doing
				}
				if ctx.Err() != nil {
					// The follow-ups the soak's end cut (a spill's delete,
					// "context canceled"): not the gateway's doing either.
					a.Then = slices.DeleteFunc(a.Then, func(f followUp) bool { return f.A.Err != nil })
				}
				rec.addAnswer(op.name, session, t0, fault, a, streamed)
				rest.RUnlock()
			}
		})
	}
	return &wg
}

func isTransport(err error) bool {
	s := err.Error()
	return strings.Contains(s, "connection") || strings.Contains(s, "EOF") || strings.Contains(s, "broken pipe")
}

func ms64(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// approverBot approves every pending approval of the soak's sessions, as
// a human approver on the approval page would, until ctx ends.
func approverBot(ctx context.Context, g *soakGateway, prefix string) {
	for ctx.Err() == nil {
		a := g.call(ctx, approverToken, "GET", "/v1/approvals", "", nil, nil)
		if a.ok() {
			var list struct {
				Approvals []struct {
					ID        string `json:"id"`
					SessionID string `json:"session_id"`
					Digest    string `json:"digest"`
				} `json:"approvals"`
			}
			_ = json.Unmarshal(a.Body, &list)
			for _, p := range list.Approvals {
				if !strings.HasPrefix(p.SessionID, prefix) {
					continue
				}
				g.call(ctx, approverToken, "POST", "/v1/approvals/"+p.ID+"/decision", "application/json",
					jsonBody(map[string]any{"decision": "approve", "digest": p.Digest, "reason": "soak approver bot"}), http.Header{})
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// upgradeFallback is the shipped policy's isolation upgrade and its
// fallback (config/data.json isolation_upgrade): a HIGH run goes to gVisor,
// or to docker while gVisor is unavailable (after an engine restart, until
// the gvisor probe sees runsc again), with the reason executor.fallback in
// its decision: by policy, and never silently.
var upgradeFallback = map[string]string{"gvisor": "docker"}

// fellBack reports whether a run that wanted want and ran in got did so by
// the policy's fallback: got is want's fallback and the run's audit record
// (found through its session's records) carries executor.fallback.
func fellBack(ctx context.Context, g *soakGateway, session, requestID, want, got string) bool {
	if upgradeFallback[want] != got || requestID == "" {
		return false
	}
	found := false
	_ = eachAuditRecord(ctx, g, "session_id="+url.QueryEscape(session), func(r auditRecord) bool {
		if r.RequestID != requestID {
			return true
		}
		for _, x := range r.Reasons {
			found = found || x.Code == "executor.fallback"
		}
		return false
	})
	return found
}
