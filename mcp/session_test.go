package mcp

import (
	"bytes"
	"context"
	"github.com/sandgate/sandgate/workspace"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestSessionMapping: each MCP session works in its own sandgate session,
// session_id shares another one, session_info describes them, and the end
// of an MCP session releases its derived session (only if it was used)
// and never one it merely named.
func TestSessionMapping(t *testing.T) {
	e := newEnv(t, envOpts{})
	a, b := e.connect(agentTok, nil), e.connect(agentTok, nil)
	var wa, wb runOutput
	structured(t, callTool(t, a, "run_code", map[string]any{"code": "open('/workspace/mine.txt','w').write('a')\nprint('ok')"}), &wa)
	structured(t, callTool(t, b, "run_code", map[string]any{"code": "import os\nprint(os.path.exists('/workspace/mine.txt'))"}), &wb)
	if wa.SessionID == wb.SessionID || wb.Stdout != "False\n" {
		t.Fatalf("two MCP sessions share %s / %s (b sees a's file: %q)", wa.SessionID, wb.SessionID, wb.Stdout)
	}
	var shared runOutput
	structured(t, callTool(t, b, "run_code", map[string]any{"code": "print(open('/workspace/mine.txt').read())", "session_id": wa.SessionID}), &shared)
	if shared.Stdout != "a\n" || shared.SessionID != wa.SessionID {
		t.Fatalf("session_id did not share a's session: %+v", shared)
	}
	var info sessionInfoOutput
	res := callTool(t, a, "session_info", nil)
	structured(t, res, &info)
	checkOutput(t, a, "session_info", res)
	if info.SessionID != wa.SessionID || !info.Default || !info.Exists || info.Runs != 2 || info.Mode != "STRICT" {
		t.Fatalf("session_info %+v", info)
	}
	fresh := e.connect(agentTok, nil)
	structured(t, callTool(t, fresh, "session_info", map[string]any{}), &info)
	if info.Exists || !info.Default || info.SessionID == wa.SessionID {
		t.Fatalf("fresh session_info %+v", info)
	}
	e.mcp.mu.Lock()
	if st := e.mcp.sessions[b.ID()]; st == nil || st.principal != testPrincipals[agentTok] {
		t.Errorf("b's session state %+v, want it used by %+v", st, testPrincipals[agentTok])
	}
	e.mcp.mu.Unlock()
	// b ends: its own session is released; a's, which it only named, is not.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// The executors know a session by its tenant-qualified key.
	wbKey := workspace.Key(testPrincipals[agentTok].Tenant, wb.SessionID)
	waitFor(t, func() bool { return slices.Contains(e.released.all(), wbKey) })
	if err := fresh.Close(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if got := e.released.all(); len(got) != 1 {
		t.Fatalf("released %v, want only b's session %s", got, wbKey)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSessionBoundToPrincipal: a request that presents another token's
// MCP session id is refused; the session id alone is worth nothing.
func TestSessionBoundToPrincipal(t *testing.T) {
	e := newEnv(t, envOpts{})
	cs := e.connect(agentTok, nil)
	body := `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"session_info","arguments":{}}}`
	for _, c := range []struct {
		token string
		want  int
	}{{otherTok, http.StatusForbidden}, {agentTok, http.StatusOK}} {
		req, _ := http.NewRequest(http.MethodPost, e.srv.URL+Path, bytes.NewBufferString(body))
		req.Header.Set("Authorization", "Bearer "+c.token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", cs.ID())
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != c.want {
			t.Errorf("token %s on the session: %d, want %d", c.token[:5], res.StatusCode, c.want)
		}
	}
}

// TestGuard: the Host allow-list and the Origin check, before anything
// reaches the SDK.
func TestGuard(t *testing.T) {
	e := newEnv(t, envOpts{cfg: Config{AllowedHosts: []string{"gate.example.com"}, AllowedOrigins: []string{"https://app.example.com"}}})
	cases := []struct {
		name, host, origin, fetchSite string
		ok                            bool
	}{
		{"allowed host, no origin", "gate.example.com", "", "", true},
		{"allowed host with port", "gate.example.com:8443", "", "", true},
		{"other host", "evil.example.net", "", "", false},
		{"same origin", "gate.example.com", "http://gate.example.com", "same-origin", true},
		{"allowed origin", "gate.example.com", "https://APP.example.com:443", "cross-site", true},
		{"foreign origin", "gate.example.com", "https://evil.example.net", "cross-site", false},
		{"null origin", "gate.example.com", "null", "", false},
		{"cross-site fetch without origin", "gate.example.com", "", "cross-site", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "http://"+c.host+Path, nil)
			if c.origin != "" {
				r.Header.Set("Origin", c.origin)
			}
			if c.fetchSite != "" {
				r.Header.Set("Sec-Fetch-Site", c.fetchSite)
			}
			err := e.mcp.checkHost(r)
			if err == nil {
				err = e.mcp.checkOrigin(r)
			}
			if (err == nil) != c.ok {
				t.Fatalf("err %v, want ok=%v", err, c.ok)
			}
		})
	}
}

// TestLoopbackRebinding: on a loopback listener, a request whose Host is
// not a loopback name is refused (DNS rebinding), with a valid token.
func TestLoopbackRebinding(t *testing.T) {
	e := newEnv(t, envOpts{})
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+Path, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	req.Host = "attacker.example.com"
	req.Header.Set("Authorization", "Bearer "+agentTok)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden {
		t.Fatalf("rebound Host: %d, want 403", res.StatusCode)
	}
}

func TestNormalizeOrigin(t *testing.T) {
	cases := map[string]string{
		"https://Gate.Example.com:443": "https://gate.example.com",
		"http://127.0.0.1:8080":        "http://127.0.0.1:8080",
		"http://[::1]:80":              "http://[::1]",
		"null":                         "",
		"file:///etc":                  "",
		"https://a.example/path":       "",
		"https://user@a.example":       "",
	}
	for in, want := range cases {
		got, ok := normalizeOrigin(in)
		if got != want || ok != (want != "") {
			t.Errorf("normalizeOrigin(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}

// TestCloseLetsCallsFinish: at shutdown, a call in flight completes with
// its output before the sessions are closed.
func TestCloseLetsCallsFinish(t *testing.T) {
	e := newEnv(t, envOpts{})
	// Without the standalone stream: the Go client fails its calls in
	// flight as soon as that stream ends, even when their responses are
	// already on their way.
	client := sdk.NewClient(&sdk.Implementation{Name: "sandgate-test", Version: "0.1"}, nil)
	cs, err := client.Connect(t.Context(), &sdk.StreamableClientTransport{
		Endpoint:   e.srv.URL + Path,
		HTTPClient: &http.Client{Transport: tokenTransport{token: agentTok, base: http.DefaultTransport}},
		MaxRetries: -1, DisableStandaloneSSE: true,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	ch := callAsync(t, cs, "run_code", map[string]any{"code": "import time\ntime.sleep(1)\nprint('finished')"})
	waitFor(t, func() bool {
		e.mcp.mu.Lock()
		defer e.mcp.mu.Unlock()
		return len(e.mcp.sessions) == 1 && e.mcp.sessions[cs.ID()].used
	})
	time.Sleep(200 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := e.mcp.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	var out runOutput
	structured(t, await(t, ch), &out)
	if out.Stdout != "finished\n" {
		t.Fatalf("the call in flight got %+v", out)
	}
	if _, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "session_info"}); err == nil {
		t.Fatal("a call after Close succeeded")
	}
}
