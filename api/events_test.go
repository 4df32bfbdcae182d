package api

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/events"
)

// eventsEnv is api over a real event log on SQLite, with two tenants'
// agents (a, b) and an admin.
func eventsEnv(t *testing.T, cfg Config) (*httptest.Server, *events.Log) {
	t.Helper()
	st, err := audit.Open(context.Background(), filepath.Join(t.TempDir(), "audit.db"), audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	l, err := events.Open(context.Background(), st, events.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	auth, err := NewAuth([]Token{NewToken("a", RoleAgent, agentTok), NewToken("b", RoleAgent, "agent-b-token-0123456789"),
		NewToken("ops", RoleAdmin, adminTok)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(cfg, Deps{Auth: auth, Events: l, Gatherer: prometheus.NewRegistry(), MCP: stubMCP{}}))
	t.Cleanup(srv.Close)
	return srv, l
}

func getWith(t *testing.T, url, token string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}

// TestEventRoutesGated: the event stream and the delivery log take a
// token of the right role; an agent sees its own tenant's events only,
// and naming another tenant is not_found; the stream count per tenant
// is bounded.
func TestEventRoutesGated(t *testing.T) {
	srv, l := eventsEnv(t, Config{MaxEventStreams: 2})
	for _, ev := range []events.Event{{Type: "session.created", Tenant: "a", SessionID: "s1"},
		{Type: "session.created", Tenant: "b", SessionID: "s2"}} {
		if err := l.Publish(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		path, token string
		status      int
	}{
		{"/v1/events", "", 401},
		{"/v1/events?tenant=b", agentTok, 404},
		{"/v1/events?last_event_id=x", agentTok, 400},
		{"/v1/events/deliveries", agentTok, 403},
		{"/v1/events/deliveries", "", 401},
		{"/v1/events/deliveries", adminTok, 200},
	} {
		if res := getWith(t, srv.URL+c.path, c.token); res.StatusCode != c.status {
			t.Errorf("GET %s: %d, want %d", c.path, res.StatusCode, c.status)
		}
	}
	// Agent a resumes from the start: its tenant's event, not b's.
	res := getWith(t, srv.URL+"/v1/events?last_event_id=0", agentTok)
	sc := bufio.NewScanner(res.Body)
	deadline := time.AfterFunc(10*time.Second, func() { res.Body.Close() })
	defer deadline.Stop()
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev events.Event
		if err := json.Unmarshal([]byte(data), &ev); err != nil || ev.Tenant != "a" {
			t.Fatalf("agent a's stream gave %s", data)
		}
		break
	}
	// a holds one stream; a second is allowed, a third refused; b's are
	// its own.
	getWith(t, srv.URL+"/v1/events", agentTok)
	if res := getWith(t, srv.URL+"/v1/events", agentTok); res.StatusCode != 429 {
		t.Fatalf("a third stream of tenant a: %d, want 429", res.StatusCode)
	}
	if res := getWith(t, srv.URL+"/v1/events", "agent-b-token-0123456789"); res.StatusCode != 200 {
		t.Fatalf("tenant b's first stream: %d", res.StatusCode)
	}
}

// TestForwardedCallRouteNeedsTheHop: the route another replica forwards
// MCP tool calls to is 404 to a client, even with a valid agent token.
func TestForwardedCallRouteNeedsTheHop(t *testing.T) {
	srv, _ := eventsEnv(t, Config{})
	req, _ := http.NewRequest("POST", srv.URL+mcpForwardPath, strings.NewReader(`{"tool":"execute","arguments":{"command":"id"}}`))
	req.Header.Set("Authorization", "Bearer "+agentTok)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 404 {
		t.Fatalf("a client's POST %s: %d, want 404", mcpForwardPath, res.StatusCode)
	}
}
