package api

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/manager"
)

// quotaEnv is a gateway where team-a has the quota q and team-b the
// defaults (no limits), with every level routed to the subprocess
// executor.
func quotaEnv(t *testing.T, q manager.Quota) *env {
	t.Helper()
	return newEnv(t, envOpts{policyFS: everythingToSubprocess(t), tokens: tenantTokens(),
		quotas: manager.QuotaConfig{Tenants: map[string]manager.Quota{"team-a": q}}})
}

// refusal checks a quota's answer: 429, its stable code, and an audit
// record of the refusal under team-a naming the quota.
func refusal(t *testing.T, e *env, r resp, code, quota string) {
	t.Helper()
	if r.status != 429 || r.errCode() != code {
		t.Fatalf("%d %s, want 429 %s", r.status, r.raw, code)
	}
	id := r.header.Get("X-Request-Id")
	a := e.do("GET", "/v1/audit?tenant=team-a&limit=1000", adminTok, nil)
	for _, rec := range a.body["records"].([]any) {
		if m := obj(rec); m["request_id"] == id {
			if m["error_code"] != code || m["outcome"] != manager.OutcomeLimited || obj(m["detail"])["quota"] != quota || m["http_status"] != 429.0 {
				t.Fatalf("refusal record %v", m)
			}
			return
		}
	}
	t.Fatalf("no audit record of refused request %s", id)
}

func put(e *env, tok, session, path string, body []byte) resp {
	return e.do("PUT", "/v1/sessions/"+session+"/files/content?path="+path, tok, body)
}

// TestQuotaRate: team-a's token bucket refuses with 429 rate_limited and a
// Retry-After; team-b, hammered alongside, is never refused.
func TestQuotaRate(t *testing.T) {
	e := quotaEnv(t, manager.Quota{RequestsPerSecond: 0.1, Burst: 3})
	for i := range 3 {
		if r := e.do("GET", "/v1/sessions", teamATok, nil); r.status != 200 {
			t.Fatalf("request %d within the burst: %d %s", i, r.status, r.raw)
		}
	}
	r := e.do("GET", "/v1/sessions", teamATok, nil)
	refusal(t, e, r, "rate_limited", "rate")
	if s, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || s < 9 || s > 10 {
		t.Fatalf("Retry-After %q, want the ~10 s until the next token", r.header.Get("Retry-After"))
	}
	// Every kind of session request draws from the same bucket.
	for _, ep := range sessionEndpoints {
		if r := ep.call(e, teamATok, "s1"); r.status != 429 || r.errCode() != "rate_limited" {
			t.Errorf("%s while limited: %d %s", ep.name, r.status, r.raw)
		}
	}
	var wg sync.WaitGroup
	limited := 0
	var mu sync.Mutex
	wg.Go(func() {
		for range 50 {
			if r := e.do("GET", "/v1/sessions", teamATok, nil); r.status == 429 {
				mu.Lock()
				limited++
				mu.Unlock()
			}
		}
	})
	for i := range 30 {
		if r := ep(e, teamBTok, i); r.status != 200 && r.status != 201 {
			t.Errorf("team-b request %d: %d %s", i, r.status, r.raw)
		}
	}
	wg.Wait()
	if limited != 50 {
		t.Errorf("team-a was refused %d of 50 times while over its rate", limited)
	}
	m := e.do("GET", "/metrics", adminTok, nil)
	if !strings.Contains(string(m.raw), `sandgate_quota_refusals_total{quota="rate",tenant="team-a"}`) {
		t.Errorf("no refusal metric for team-a")
	}
}

// ep is one of team-b's requests, alternating a run and file writes.
func ep(e *env, tok string, i int) resp {
	if i%3 == 0 {
		return e.do("POST", "/v1/sessions/b1/run_code", tok, runCode("print(1)", "python"))
	}
	return put(e, tok, "b1", fmt.Sprintf("f%d.txt", i), []byte("x"))
}

// TestQuotaSessions: team-a may hold two live sessions; a request that
// would create a third is refused, by run or by upload, while its existing
// sessions keep working; a purge frees a slot. team-b is not limited.
func TestQuotaSessions(t *testing.T) {
	e := quotaEnv(t, manager.Quota{MaxSessions: 2})
	for _, s := range []string{"s1", "s2"} {
		if r := put(e, teamATok, s, "x", []byte("x")); r.status != 201 {
			t.Fatalf("%s: %d %s", s, r.status, r.raw)
		}
	}
	refusal(t, e, e.do("POST", "/v1/sessions/s3/run_code", teamATok, runCode("print(1)", "python")), "quota_exceeded", "sessions")
	refusal(t, e, put(e, teamATok, "s3", "x", []byte("x")), "quota_exceeded", "sessions")
	if r := e.do("GET", "/v1/sessions/s3", teamATok, nil); r.status != 404 {
		t.Fatalf("the refused session exists: %d %s", r.status, r.raw)
	}
	if r := e.do("POST", "/v1/sessions/s1/run_code", teamATok, runCode("print(1)", "python")); r.status != 200 {
		t.Fatalf("existing session: %d %s", r.status, r.raw)
	}
	for i := range 4 {
		if r := put(e, teamBTok, fmt.Sprintf("b%d", i), "x", []byte("x")); r.status != 201 {
			t.Fatalf("team-b session %d: %d %s", i, r.status, r.raw)
		}
	}
	if r := e.do("DELETE", "/v1/sessions/s1?purge=true", teamATok, nil); r.status != 204 {
		t.Fatalf("purge: %d", r.status)
	}
	if r := e.do("POST", "/v1/sessions/s3/run_code", teamATok, runCode("print(1)", "python")); r.status != 200 {
		t.Fatalf("after a purge: %d %s", r.status, r.raw)
	}
}

// TestQuotaConcurrentRuns: with one run in flight, team-a's next run is
// refused before anything of it runs; team-b runs meanwhile.
func TestQuotaConcurrentRuns(t *testing.T) {
	e := quotaEnv(t, manager.Quota{MaxConcurrentRuns: 1})
	done := make(chan resp, 1)
	go func() {
		done <- e.do("POST", "/v1/sessions/slow/execute", teamATok, map[string]any{"command": "sleep 3; echo slept"})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if r := e.do("GET", "/v1/sessions/slow", teamATok, nil); r.status == 200 && r.body["running"] == 1.0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the slow run never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	r := e.do("POST", "/v1/sessions/other/execute", teamATok, map[string]any{"command": "echo ran > ran.txt"})
	refusal(t, e, r, "quota_exceeded", "concurrent_runs")
	if r := e.do("GET", "/v1/sessions/other/files/content?path=ran.txt", teamATok, nil); r.status != 404 {
		t.Fatalf("the refused run ran: %d %s", r.status, r.raw)
	}
	if r := e.do("POST", "/v1/sessions/b1/execute", teamBTok, map[string]any{"command": "echo b"}); r.status != 200 || r.body["output"] != "b\n" {
		t.Fatalf("team-b while team-a is at its limit: %d %s", r.status, r.raw)
	}
	if r := <-done; r.status != 200 || r.body["output"] != "slept\n" {
		t.Fatalf("slow run: %d %s", r.status, r.raw)
	}
	if r := e.do("POST", "/v1/sessions/other/execute", teamATok, map[string]any{"command": "echo ok"}); r.status != 200 {
		t.Fatalf("after the slow run: %d %s", r.status, r.raw)
	}
}

// TestQuotaWorkspaceBytes: team-a's workspaces hold 1 MiB together; a
// write that would cross it is refused, and once they are full so is a
// run. team-b writes and runs past that.
func TestQuotaWorkspaceBytes(t *testing.T) {
	e := quotaEnv(t, manager.Quota{MaxWorkspaceBytes: 1 << 20})
	half := bytes.Repeat([]byte("a"), 512<<10)
	if r := put(e, teamATok, "s1", "half.bin", half); r.status != 201 {
		t.Fatalf("first half: %d %s", r.status, r.raw)
	}
	refusal(t, e, put(e, teamATok, "s2", "more.bin", append(half, 'x')), "quota_exceeded", "workspace_bytes")
	if r := put(e, teamATok, "s2", "half.bin", half); r.status != 201 {
		t.Fatalf("second half, exactly at the quota: %d %s", r.status, r.raw)
	}
	refusal(t, e, e.do("POST", "/v1/sessions/s1/run_code", teamATok, runCode("print(1)", "python")), "quota_exceeded", "workspace_bytes")
	for _, s := range []string{"b1", "b2", "b3"} {
		if r := put(e, teamBTok, s, "half.bin", half); r.status != 201 {
			t.Fatalf("team-b %s: %d %s", s, r.status, r.raw)
		}
	}
	if r := e.do("POST", "/v1/sessions/b1/run_code", teamBTok, runCode("print(1)", "python")); r.status != 200 {
		t.Fatalf("team-b run: %d %s", r.status, r.raw)
	}
	if r := e.do("DELETE", "/v1/sessions/s2/files?path=half.bin", teamATok, nil); r.status != 200 {
		t.Fatalf("delete: %d %s", r.status, r.raw)
	}
	if r := e.do("POST", "/v1/sessions/s1/run_code", teamATok, runCode("print(1)", "python")); r.status != 200 {
		t.Fatalf("run after freeing space: %d %s", r.status, r.raw)
	}
}
