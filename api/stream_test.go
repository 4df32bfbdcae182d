package api

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/executortest"
	"github.com/sandgate/sandgate/workspace"
)

// fiveLines prints five lines 300 ms apart (DESIGN.md §10's acceptance
// program).
const fiveLines = "import time\nfor i in range(1, 6):\n    print(f'line {i}', flush=True)\n    time.sleep(0.3)\n"

// streamGate is the file checkFiveLines creates in the session's
// workspace once it has received line 1, and gatedFiveLines is fiveLines
// waiting for it after line 1 (at most 20 s; "gate timeout" then says it
// gave up): a run that prints the rest without that line streamed line 1
// while it still ran, however slow the machine delivers it.
const (
	streamGate     = "stream-gate"
	gatedFiveLines = "import os, time\nprint('line 1', flush=True)\ndeadline = time.monotonic() + 20\n" +
		"while not os.path.exists('" + streamGate + "') and time.monotonic() < deadline:\n    time.sleep(0.05)\n" +
		"if not os.path.exists('" + streamGate + "'):\n    print('gate timeout', flush=True)\n" +
		"time.sleep(0.3)\nfor i in range(2, 6):\n    print(f'line {i}', flush=True)\n    time.sleep(0.3)\n"
)

// streamBackends are the executors a streamed run must work in. docker
// and aio skip without an engine, and fail under SANDGATE_REQUIRE_DOCKER=1.
var streamBackends = []struct {
	name  string
	extra func(t *testing.T) []executors.Executor
}{
	{"subprocess", func(*testing.T) []executors.Executor { return nil }},
	{"docker", func(t *testing.T) []executors.Executor { return []executors.Executor{newDockerExecutor(t)} }},
	{"aio", func(t *testing.T) []executors.Executor { return []executors.Executor{newAIOExecutor(t)} }},
}

func newStreamEnv(t *testing.T, backend string, extra []executors.Executor) *env {
	return newEnv(t, envOpts{mode: "PERMISSIVE", policyFS: routedPolicy(t, backend), executors: extra})
}

// TestStreamAcceptance is the acceptance, in each backend: the
// client receives line 1 of five lines 300 ms apart while the program
// still runs (the program waits for the client to have it before it goes
// on; see gatedFiveLines), the output events
// add up to the exit body, which equals the JSON response of the same
// request without streaming; and a client that disconnects mid-run
// leaves no process behind and an audit record that says cancelled.
func TestStreamAcceptance(t *testing.T) {
	for _, b := range streamBackends {
		t.Run(b.name, func(t *testing.T) {
			e := newStreamEnv(t, b.name, b.extra(t))
			t.Run("five lines", func(t *testing.T) { checkFiveLines(t, e, b.name) })
			t.Run("disconnect", func(t *testing.T) { checkDisconnect(t, e) })
		})
	}
}

func checkFiveLines(t *testing.T, e *env, backend string) {
	body := map[string]any{"code": gatedFiveLines, "language": "python", "timeout_s": 60}
	gated := false
	s := e.stream(t, t.Context(), "/v1/sessions/five/run_code", body, func(ev map[string]any) bool {
		if data, _ := ev["data"].(string); !gated && ev["event"] == "stdout" && strings.HasPrefix(data, "line 1") {
			gated = true
			if _, err := e.ws.Write(t.Context(), agentKey("five"), streamGate, workspace.WriteCreate, strings.NewReader("")); err != nil {
				t.Errorf("open the gate: %v", err)
			}
		}
		return false
	})
	if s.status != http.StatusOK || s.header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("status %d content type %q body %v", s.status, s.header.Get("Content-Type"), s.body)
	}
	if names := s.names(); len(names) < 3 || names[0] != "decision" {
		t.Fatalf("events %v, want decision first", names)
	}
	if dec := obj(s.events[0]["decision"]); dec["executor"] != backend || dec["action"] != "allow" {
		t.Fatalf("decision event %v", s.events[0])
	}
	exit := s.exitBody(t)
	if strings.Contains(s.text(t, "stdout"), "gate timeout") {
		t.Fatalf("the program waited 20s for the client to receive line 1 and gave up: line 1 was not streamed while it ran (%v)", s.names())
	}
	want := "line 1\nline 2\nline 3\nline 4\nline 5\n"
	if got := s.text(t, "stdout"); got != want || exit["stdout"] != want || exit["sandbox_type"] != backend {
		t.Fatalf("streamed stdout %q; exit body %v", got, exit)
	}
	first := s.first("stdout")
	if !strings.HasPrefix(s.events[first]["data"].(string), "line 1") {
		t.Fatalf("first output event %v", s.events[first])
	}
	t.Logf("%s: line 1 came %v before the exit event", backend, s.at[len(s.at)-1].Sub(s.at[first]))
	if exit["request_id"] != s.requestID {
		t.Errorf("exit body's request_id %v, header %s", exit["request_id"], s.requestID)
	}
	// The gate is open now: the same request without streaming runs
	// through.
	plain := e.do("POST", "/v1/sessions/five/run_code", agentTok, body)
	if plain.status != http.StatusOK {
		t.Fatalf("plain run %d %s", plain.status, plain.raw)
	}
	sameResponse(t, exit, plain.body)
}

// sameResponse fails unless a streamed exit body and a JSON response
// have the same fields with the same values, but for the request's id,
// the duration and the decision's id (each request is its own decision).
func sameResponse(t *testing.T, exit, plain map[string]any) {
	t.Helper()
	for _, body := range []map[string]any{exit, plain} {
		if d, ok := body["decision"].(map[string]any); ok {
			if id, _ := d["decision_id"].(string); id == "" {
				t.Errorf("a decision without decision_id: %v", d)
			}
			delete(d, "decision_id")
		}
	}
	keys := slices.Sorted(maps.Keys(exit))
	if pk := slices.Sorted(maps.Keys(plain)); !slices.Equal(keys, pk) {
		t.Fatalf("exit body fields %v, JSON response fields %v", keys, pk)
	}
	for _, k := range keys {
		if k == "request_id" || k == "duration_ms" {
			continue
		}
		if !reflect.DeepEqual(exit[k], plain[k]) {
			t.Errorf("%s: exit body %v, JSON response %v", k, exit[k], plain[k])
		}
	}
}

func checkDisconnect(t *testing.T, e *env) {
	m := executortest.NewMarkers(2)
	code := fmt.Sprintf("import subprocess, time\nsubprocess.Popen(['sleep', '%s'])\n"+
		"subprocess.Popen(['sleep', '%s'], start_new_session=True)\nprint('started', flush=True)\ntime.sleep(1000)\n", m[0], m[1])
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var seen map[string]bool
	s := e.stream(t, ctx, "/v1/sessions/gone/run_code", runCode(code, "python"), func(ev map[string]any) bool {
		if ev["event"] != "stdout" || !strings.Contains(ev["data"].(string), "started") {
			return false
		}
		seen = executortest.WatchMarkers(m, func() { time.Sleep(500 * time.Millisecond) })
		cancel()
		return true
	})
	if seen == nil {
		t.Fatalf("the program never said it started: %v %v", s.names(), s.body)
	}
	if len(seen) != len(m) {
		t.Errorf("marked processes seen alive %v, want all of %v: the test proves nothing", seen, m)
	}
	if left := executortest.WaitMarkersGone(m, 10*time.Second); len(left) > 0 {
		t.Errorf("processes alive after the client went away: %v", left)
	}
	rec := e.recordOf(t, "gone", s.requestID)
	if rec.Outcome != "cancelled" || rec.ErrorCode != "cancelled" {
		t.Errorf("audit record outcome %q code %q, want cancelled", rec.Outcome, rec.ErrorCode)
	}
}

// TestStreamExecute: execute streams too; its exit body is execute's
// response (one combined output).
func TestStreamExecute(t *testing.T) {
	e := newStreamEnv(t, "subprocess", nil)
	s := e.stream(t, t.Context(), "/v1/sessions/x/execute", map[string]any{"command": "echo out; echo err >&2"}, nil)
	exit := s.exitBody(t)
	if s.text(t, "stdout") != "out\n" || s.text(t, "stderr") != "err\n" || exit["output"] != "out\n[stderr] err\n" {
		t.Fatalf("events %v", s.events)
	}
	plain := e.do("POST", "/v1/sessions/x/execute", agentTok, map[string]any{"command": "echo out; echo err >&2"})
	sameResponse(t, exit, plain.body)
}

// TestStreamRefusedBeforeStart: what is refused before the decision lets
// the request go on is the ordinary JSON error with its status, even when
// the client asked for a stream.
func TestStreamRefusedBeforeStart(t *testing.T) {
	e := newEnv(t, envOpts{mode: "STRICT"})
	for _, tc := range []struct {
		name   string
		body   map[string]any
		status int
		code   string
	}{
		{"policy", runCode("rm -rf /", "bash"), http.StatusForbidden, "policy_denied"},
		{"validation", runCode("print(1)", "cobol"), http.StatusBadRequest, "invalid_request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := e.stream(t, t.Context(), "/v1/sessions/r/run_code", tc.body, nil)
			if s.status != tc.status || s.header.Get("Content-Type") != "application/json" || obj(s.body["error"])["code"] != tc.code {
				t.Fatalf("status %d type %q body %v", s.status, s.header.Get("Content-Type"), s.body)
			}
		})
	}
}

// TestStreamApproval: a held request streams decision, approval_pending
// (with the id an approver decides on) and approval_resolved; approved,
// it runs and ends with exit; denied, it ends with an error event that
// carries the stable code and the status, and leaves one audit record.
func TestStreamApproval(t *testing.T) {
	e := newApprovalEnv(t, approvalOpts{timeout: 30 * time.Second})
	for _, tc := range []struct {
		decision string
		want     []string
	}{
		{"approve", []string{"decision", "approval_pending", "approval_resolved", "stdout", "exit"}},
		{"deny", []string{"decision", "approval_pending", "approval_resolved", "error"}},
	} {
		t.Run(tc.decision, func(t *testing.T) {
			s := e.stream(t, t.Context(), "/v1/sessions/held/run_code", runCode(highRisk, "python"), func(ev map[string]any) bool {
				if ev["event"] == "approval_pending" {
					a := obj(ev["approval"])
					if a["risk_level"] != "HIGH" || a["status"] != "pending" {
						t.Errorf("approval_pending %v", ev)
					}
					r := e.do("POST", "/v1/approvals/"+a["id"].(string)+"/decision", approverTok, map[string]any{"decision": tc.decision})
					if r.status != http.StatusOK {
						t.Errorf("decide: %d %s", r.status, r.raw)
					}
				}
				return false
			})
			if got := strings.Join(slices.Compact(without(s.names(), "keepalive")), ","); got != strings.Join(tc.want, ",") {
				t.Fatalf("events %s, want %s", got, strings.Join(tc.want, ","))
			}
			resolved := obj(s.events[s.first("approval_resolved")]["approval"])
			if resolved["decided_by"] != "p" || resolved["id"] != obj(s.events[s.first("approval_pending")]["approval"])["id"] {
				t.Errorf("approval_resolved %v", resolved)
			}
			last := s.last()
			if tc.decision == "approve" {
				if exit := s.exitBody(t); exit["stdout"] != "hi\n\n" || obj(exit["approval"])["status"] != "approved" {
					t.Errorf("exit %v", exit)
				}
				return
			}
			if resolved["status"] != "denied" || last["status"] != float64(http.StatusForbidden) ||
				obj(obj(last["body"])["error"])["code"] != "approval_denied" || obj(obj(last["body"])["error"])["request_id"] != s.requestID {
				t.Errorf("error event %v", last)
			}
			if rec := e.recordOf(t, "held", s.requestID); rec.Outcome != "denied" || rec.ErrorCode != "approval_denied" {
				t.Errorf("record %+v", rec)
			}
		})
	}
}

func without(names []string, drop string) []string {
	return slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == drop })
}

// TestStreamKeepalive: a quiet run still gets a keepalive event every
// StreamKeepalive.
func TestStreamKeepalive(t *testing.T) {
	e := newEnv(t, envOpts{mode: "PERMISSIVE", policyFS: routedPolicy(t, "subprocess"), api: Config{StreamKeepalive: 200 * time.Millisecond}})
	s := e.stream(t, t.Context(), "/v1/sessions/k/run_code", runCode("import time\ntime.sleep(1.5)\nprint('done')", "python"), nil)
	if n := strings.Count(strings.Join(s.names(), ","), "keepalive"); n < 3 {
		t.Fatalf("%d keepalive events in a 1.5s quiet run at 200ms: %v", n, s.names())
	}
	if s.exitBody(t)["stdout"] != "done\n" {
		t.Fatalf("events %v", s.events)
	}
}

// TestStreamOutlivesWriteTimeout: the server's WriteTimeout bounds each
// write of a stream, not the whole stream, so a run longer than it still
// reaches its exit event.
func TestStreamOutlivesWriteTimeout(t *testing.T) {
	e := newEnv(t, envOpts{mode: "PERMISSIVE", policyFS: routedPolicy(t, "subprocess"), writeTimeout: time.Second,
		api: Config{StreamKeepalive: 300 * time.Millisecond}})
	s := e.stream(t, t.Context(), "/v1/sessions/w/run_code", runCode("import time\nprint('a', flush=True)\ntime.sleep(2.5)\nprint('b')", "python"), nil)
	if exit := s.exitBody(t); exit["stdout"] != "a\nb\n" {
		t.Fatalf("exit %v", exit)
	}
}

// TestStreamCapsAndCharacters: the stream carries the response's bytes:
// capped like it (with the same spill file), and a character that two
// writes split arrives whole.
func TestStreamCapsAndCharacters(t *testing.T) {
	e := newStreamEnv(t, "subprocess", nil)
	t.Run("capped", func(t *testing.T) {
		s := e.stream(t, t.Context(), "/v1/sessions/c/run_code", runCode("import sys\nsys.stdout.write('x' * (3 << 20))", "python"), nil)
		exit := s.exitBody(t)
		if exit["truncated"] != true || exit["output_path"] == nil || s.text(t, "stdout") != exit["stdout"] || len(exit["stdout"].(string)) >= 3<<20 {
			t.Fatalf("truncated %v path %v streamed %d bytes, exit stdout %d bytes", exit["truncated"], exit["output_path"],
				len(s.text(t, "stdout")), len(exit["stdout"].(string)))
		}
	})
	t.Run("split character", func(t *testing.T) {
		code := "import sys, time\nsys.stdout.buffer.write(b'caf\\xc3'); sys.stdout.flush()\ntime.sleep(0.3)\nsys.stdout.buffer.write(b'\\xa9\\n')"
		s := e.stream(t, t.Context(), "/v1/sessions/c/run_code", runCode(code, "python"), nil)
		if got := s.text(t, "stdout"); got != "café\n" || s.exitBody(t)["stdout"] != "café\n" {
			t.Fatalf("streamed %q, events %v", got, s.events)
		}
	})
}

func TestWantsStream(t *testing.T) {
	for _, tc := range []struct {
		accept []string
		want   bool
	}{
		{nil, false},
		{[]string{"application/json"}, false},
		{[]string{"application/x-ndjson"}, true},
		{[]string{"application/json, application/x-ndjson;q=0.5"}, true},
		{[]string{"application/x-ndjson; q=0"}, false},
		{[]string{"text/html", "Application/X-NDJSON"}, true},
		{[]string{"application/x-ndjsonx"}, false},
		{[]string{"*/*"}, false},
	} {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		for _, a := range tc.accept {
			r.Header.Add("Accept", a)
		}
		if got := wantsStream(r); got != tc.want {
			t.Errorf("Accept %q: %v, want %v", tc.accept, got, tc.want)
		}
	}
}
