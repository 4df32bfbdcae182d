package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/mcp"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/risk"
	"github.com/sandgate/sandgate/workspace"
)

// newMCPEnv mounts the real MCP server on a gateway handler (no executors:
// these tests are about the HTTP surface, package mcp tests the tools).
func newMCPEnv(t *testing.T) *httptest.Server {
	t.Helper()
	dir := t.TempDir()
	ctx := context.Background()
	st, err := audit.Open(ctx, filepath.Join(dir, "audit.db"), audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ws, err := workspace.New(filepath.Join(dir, "ws"), workspace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := policy.New(ctx, policy.Options{EvalTimeout: testEvalTimeout})
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := manager.New(manager.Config{Mode: "STRICT"}, manager.Deps{Assessor: risk.NewAssessor(nil, nil), Policy: eng, Workspaces: ws, Audit: st})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := mcp.New(mcp.Config{}, mcp.Deps{Manager: mgr})
	if err != nil {
		t.Fatal(err)
	}
	auth, err := NewAuth([]Token{NewToken("a", RoleAgent, agentTok), NewToken("p", RoleApprover, approverTok)})
	if err != nil {
		t.Fatal(err)
	}
	h := New(Config{}, Deps{Manager: mgr, Policy: eng, Audit: st, Auth: auth, Gatherer: prometheus.NewRegistry(), MCP: srv})
	ts := httptest.NewServer(h)
	t.Cleanup(func() {
		_ = srv.Close(context.Background())
		ts.Close()
		_ = st.Close()
	})
	return ts
}

const initializeBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`

// TestMCPEndpointAuth: /mcp takes agent tokens only; a missing token is a
// 401 naming the RFC 9728 metadata, which is public; a foreign Origin is
// refused before the SDK sees the request.
func TestMCPEndpointAuth(t *testing.T) {
	ts := newMCPEnv(t)
	post := func(token, origin string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, ts.URL+"/mcp", strings.NewReader(initializeBody))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { res.Body.Close() })
		return res
	}
	errCode := func(res *http.Response) string {
		var b errorBody
		_ = json.NewDecoder(res.Body).Decode(&b)
		return string(b.Error.Code)
	}
	metaURL := ts.URL + "/.well-known/oauth-protected-resource/mcp"
	res := post("", "")
	if res.StatusCode != 401 || errCode(res) != "unauthorized" ||
		res.Header.Get("WWW-Authenticate") != `Bearer realm="sandgate", resource_metadata="`+metaURL+`"` {
		t.Fatalf("no token: %d %q", res.StatusCode, res.Header.Get("WWW-Authenticate"))
	}
	if res := post("wrong-token-0123456789", ""); res.StatusCode != 401 {
		t.Fatalf("bad token: %d", res.StatusCode)
	}
	if res := post(approverTok, ""); res.StatusCode != 403 || errCode(res) != "forbidden" {
		t.Fatalf("approver token: %d", res.StatusCode)
	}
	if res := post(agentTok, "https://evil.example.net"); res.StatusCode != 403 || errCode(res) != "forbidden" {
		t.Fatalf("foreign origin: %d", res.StatusCode)
	}
	res = post(agentTok, ts.URL)
	if res.StatusCode != 200 || res.Header.Get("Mcp-Session-Id") == "" {
		t.Fatalf("agent initialize: %d, session %q", res.StatusCode, res.Header.Get("Mcp-Session-Id"))
	}
	for _, u := range []string{metaURL, ts.URL + "/.well-known/oauth-protected-resource"} {
		mres, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		var meta map[string]any
		_ = json.NewDecoder(mres.Body).Decode(&meta)
		mres.Body.Close()
		if mres.StatusCode != 200 || meta["resource"] != ts.URL+"/mcp" || meta["bearer_methods_supported"].([]any)[0] != "header" {
			t.Fatalf("metadata %s: %d %v", u, mres.StatusCode, meta)
		}
	}
}
