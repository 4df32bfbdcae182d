package policy

import (
	"context"
	"strconv"
	"testing"
)

// benchEgressRules is a realistic egress configuration: request presets
// (expanded into several rules each), host presets, plain host rules and
// session-scoped rules.
var benchEgressRules = []any{
	map[string]any{"name": "gh", "action": "allow", "request_preset": "github-readonly"},
	map[string]any{"name": "pypi", "action": "allow", "request_preset": "pypi-install", "tenants": []any{"t"}},
	map[string]any{"name": "npm", "action": "allow", "presets": []any{"npm"}, "sessions": []any{"t/s-1"}},
	map[string]any{"name": "api-read", "action": "allow", "hosts": []any{"api.example.test"}, "methods": []any{"GET"}},
	map[string]any{"name": "api-write", "action": "require_approval", "hosts": []any{"api.example.test"},
		"methods": []any{"POST"}, "path_prefixes": []any{"/v1/"}},
	map[string]any{"name": "no-gist", "action": "deny", "hosts": []any{"gist.github.com"}},
	map[string]any{"name": "ask", "action": "require_approval", "hosts": []any{"*.example.org"}},
}

// benchEgressEngine is the shipped policy with benchEgressRules as its
// egress rules.
func benchEgressEngine(b *testing.B) *Engine {
	b.Helper()
	return newEngine(b, Options{FS: treeWithEgress(b, func(eg map[string]any) { eg["rules"] = benchEgressRules })})
}

// BenchmarkDecideEgress is one egress decision in process: a connection
// (to a host a request preset governs) and one request on it.
func BenchmarkDecideEgress(b *testing.B) {
	e := benchEgressEngine(b)
	ctx := context.Background()
	conn := EgressInput{Mode: "STRICT", Host: "github.com", Port: 443, Scheme: "https", SessionID: "s-1", Tenant: "t",
		Principal: "agent:a", Risk: "LOW", Resolved: []string{"140.82.112.3"}}
	req := conn
	req.HTTP = &EgressHTTP{Method: "GET", Scheme: "https", Host: "github.com", Port: 443, Path: "/o/r.git/info/refs",
		Query: "service=git-upload-pack", HeaderNames: []string{"Host"}}
	for _, tc := range []struct {
		name   string
		in     EgressInput
		action string
	}{{"connection", conn, ActionAllow}, {"request", req, ActionAllow}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if d := e.DecideEgress(ctx, tc.in); d.Action != tc.action {
					b.Fatalf("unexpected %+v", d)
				}
			}
		})
	}
}

// BenchmarkReplayEgress is a proposal's replay of 1,000 distinct
// connections against a candidate rule, against deciding them one by one
// without a candidate (DecideEgressQuietly) as its baseline.
func BenchmarkReplayEgress(b *testing.B) {
	e := benchEgressEngine(b)
	ctx := context.Background()
	ins := make([]EgressInput, 1000)
	for i := range ins {
		ins[i] = EgressInput{Mode: "STRICT", Host: "h" + strconv.Itoa(i) + ".example.net", Port: 443, Scheme: "https",
			SessionID: "s-" + strconv.Itoa(i%8), Tenant: "t", Principal: "agent:a", Resolved: []string{"198.51.100.7"}}
	}
	cand := []map[string]any{{"name": "proposal:p", "action": "allow", "hosts": []any{"h1.example.net"},
		"sessions": []any{"t/s-1"}, "connection_only": true}}
	b.Run("replay", func(b *testing.B) {
		for b.Loop() {
			if _, err := e.ReplayEgress(ctx, cand, ins); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decide", func(b *testing.B) {
		for b.Loop() {
			for _, in := range ins {
				e.DecideEgressQuietly(ctx, in)
			}
		}
	})
}
