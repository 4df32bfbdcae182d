package api

import (
	"strings"
	"testing"
)

func TestErrorResponses(t *testing.T) {
	e := newEnv(t, envOpts{maxBody: 512 << 10})
	big := strings.Repeat("x", 300<<10) // over the 256 KiB code cap, under the body cap
	huge := strings.Repeat("x", 600<<10)
	cases := []struct {
		name         string
		method, path string
		token        string
		body         any
		status       int
		code         string
		field        string
	}{
		{"no token", "POST", "/v1/sessions/s1/run_code", "", runCode("print(1)", "python"), 401, "unauthorized", ""},
		{"bad token", "POST", "/v1/sessions/s1/run_code", "nope-nope-nope-nope", runCode("print(1)", "python"), 401, "unauthorized", ""},
		{"approver cannot run code", "POST", "/v1/sessions/s1/run_code", approverTok, runCode("print(1)", "python"), 403, "forbidden", ""},
		{"agent cannot reload policy", "POST", "/v1/policy/reload", agentTok, nil, 403, "forbidden", ""},
		{"agent cannot read audit", "GET", "/v1/audit", agentTok, nil, 403, "forbidden", ""},
		{"agent cannot read policy", "GET", "/v1/policy", agentTok, nil, 403, "forbidden", ""},
		{"agent cannot scrape metrics", "GET", "/metrics", agentTok, nil, 403, "forbidden", ""},
		{"bad json", "POST", "/v1/sessions/s1/run_code", agentTok, `{"code": "print(1)",`, 400, "invalid_request", ""},
		{"trailing data", "POST", "/v1/sessions/s1/run_code", agentTok, `{"code": "print(1)", "language": "python"} {}`, 400, "invalid_request", ""},
		{"empty body", "POST", "/v1/sessions/s1/run_code", agentTok, "", 400, "invalid_request", "body"},
		{"missing code", "POST", "/v1/sessions/s1/run_code", agentTok, map[string]any{"language": "python"}, 400, "invalid_request", "code"},
		{"missing language", "POST", "/v1/sessions/s1/run_code", agentTok, map[string]any{"code": "print(1)"}, 400, "invalid_request", "language"},
		{"unknown language", "POST", "/v1/sessions/s1/run_code", agentTok, runCode("puts 1", "ruby"), 400, "invalid_request", "language"},
		{"wrong type", "POST", "/v1/sessions/s1/run_code", agentTok, map[string]any{"code": 5, "language": "python"}, 400, "invalid_request", "code"},
		{"unknown field", "POST", "/v1/sessions/s1/run_code", agentTok, map[string]any{"code": "print(1)", "language": "python", "sudo": true}, 400, "invalid_request", "sudo"},
		{"negative timeout", "POST", "/v1/sessions/s1/run_code", agentTok, map[string]any{"code": "print(1)", "language": "python", "timeout_s": -1}, 400, "invalid_request", "timeout_s"},
		{"execute missing command", "POST", "/v1/sessions/s1/execute", agentTok, map[string]any{}, 400, "invalid_request", "command"},
		{"oversize code", "POST", "/v1/sessions/s1/run_code", agentTok, runCode(big, "python"), 413, "payload_too_large", ""},
		{"oversize body", "POST", "/v1/sessions/s1/run_code", agentTok, runCode(huge, "python"), 413, "payload_too_large", ""},
		{"bad session id", "POST", "/v1/sessions/bad%20id/run_code", agentTok, runCode("print(1)", "python"), 400, "invalid_request", "session_id"},
		{"dot-dot session id", "POST", "/v1/sessions/%2E%2E/run_code", agentTok, runCode("print(1)", "python"), 400, "invalid_request", "session_id"},
		{"long session id", "GET", "/v1/sessions/" + strings.Repeat("a", 129), agentTok, nil, 400, "invalid_request", ""},
		{"unknown session", "GET", "/v1/sessions/never-seen", agentTok, nil, 404, "not_found", ""},
		{"unknown path", "GET", "/v1/nothing", agentTok, nil, 404, "not_found", ""},
		{"wrong method", "GET", "/v1/policy/reload", adminTok, nil, 405, "method_not_allowed", ""},
		{"bad limit", "GET", "/v1/sessions?limit=abc", agentTok, nil, 400, "invalid_request", "limit"},
		{"evaluate invalid", "POST", "/v1/policy/evaluate", agentTok, map[string]any{"session_id": "s1", "code": "x"}, 400, "invalid_request", "language"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.do(c.method, c.path, c.token, c.body)
			if r.status != c.status || r.errCode() != c.code {
				t.Fatalf("got %d %q, want %d %q: %.300s", r.status, r.errCode(), c.status, c.code, r.raw)
			}
			if c.field != "" && r.errField(0) != c.field {
				t.Fatalf("first field %q, want %q: %.300s", r.errField(0), c.field, r.raw)
			}
			if c.status == 401 && r.header.Get("WWW-Authenticate") == "" {
				t.Fatal("401 without WWW-Authenticate")
			}
		})
	}
}

func TestMissingFieldsReportedTogether(t *testing.T) {
	e := newEnv(t, envOpts{})
	r := e.do("POST", "/v1/sessions/s1/run_code", agentTok, map[string]any{"timeout_s": 99999})
	fields := map[string]bool{}
	for i := 0; r.errField(i) != ""; i++ {
		fields[r.errField(i)] = true
	}
	for _, f := range []string{"code", "language", "timeout_s"} {
		if !fields[f] {
			t.Errorf("field %s not reported: %s", f, r.raw)
		}
	}
}

func TestErrorsNeverEchoCode(t *testing.T) {
	e := newEnv(t, envOpts{})
	secret := "print('TOP-SECRET-PAYLOAD')"
	r := e.do("POST", "/v1/sessions/s1/run_code", agentTok, runCode(secret, "cobol"))
	if r.status != 400 || strings.Contains(string(r.raw), "TOP-SECRET") {
		t.Fatalf("%d %s", r.status, r.raw)
	}
}
