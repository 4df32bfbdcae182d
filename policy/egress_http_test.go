package policy

import (
	"context"
	"testing"
)

// TestEgressHTTPInput: a request on an inspected connection reaches the
// policy as input.http; the decision log's copy has no query; inspect
// must be a boolean.
func TestEgressHTTPInput(t *testing.T) {
	in := EgressInput{Mode: "STRICT", Host: "api.example", Port: 443, Scheme: "https", Resolved: []string{"203.0.113.5"},
		HTTP: &EgressHTTP{Method: "GET", Scheme: "https", Host: "api.example", Port: 443, Path: "/v1/x", Query: "token=s3cret",
			HeaderNames: []string{"Accept", "Host"}}}
	m := in.Map()["http"].(map[string]any)
	if m["method"] != "GET" || m["path"] != "/v1/x" || m["query"] != "token=s3cret" || len(m["header_names"].([]any)) != 2 {
		t.Errorf("input.http %v", m)
	}
	logged := in.logged().Map()["http"].(map[string]any)
	if logged["query"] != "" || in.HTTP.Query != "token=s3cret" {
		t.Errorf("the decision log gets query %q; the decided input keeps %q", logged["query"], in.HTTP.Query)
	}
	if _, ok := (EgressInput{Host: "h"}).Map()["http"]; ok {
		t.Error("a connection's input has http")
	}
	for _, tc := range []struct {
		v       map[string]any
		inspect bool
		ok      bool
	}{
		{map[string]any{"action": "allow", "rule": "r", "reasons": []any{}, "inspect": true}, true, true},
		{map[string]any{"action": "allow", "rule": "r", "reasons": []any{}}, false, true},
		{map[string]any{"action": "allow", "rule": "r", "reasons": []any{}, "inspect": "yes"}, false, false},
	} {
		d, err := parseEgressDecision(tc.v)
		if (err == nil) != tc.ok || d.Inspect != tc.inspect {
			t.Errorf("%v: %+v %v", tc.v, d, err)
		}
	}
}

// TestEgressRequestDecision: the engine decides a connection and its
// requests with the shipped github-readonly preset (the Rego tests cover
// the rules one by one).
func TestEgressRequestDecision(t *testing.T) {
	fsys := treeWithEgress(t, func(eg map[string]any) {
		eg["rules"] = []any{map[string]any{"name": "gh", "action": "allow", "request_preset": "github-readonly"}}
	})
	eng, err := New(context.Background(), Options{FS: fsys})
	if err != nil {
		t.Fatal(err)
	}
	conn := EgressInput{Mode: "STRICT", Host: "github.com", Port: 443, Scheme: "https", Resolved: []string{"140.82.112.3"}}
	if d := eng.DecideEgress(context.Background(), conn); d.Action != ActionAllow || !d.Inspect {
		t.Fatalf("connection: %+v", d)
	}
	for _, tc := range []struct{ method, path, query, action, rule string }{
		{"GET", "/o/r.git/info/refs", "service=git-upload-pack", ActionAllow, "gh/read"},
		{"POST", "/o/r.git/git-upload-pack", "", ActionAllow, "gh/git-fetch"},
		{"GET", "/o/r.git/info/refs", "service=git-receive-pack", ActionDeny, "gh/no-push"},
		{"POST", "/o/r.git/git-receive-pack", "", ActionDeny, "gh"},
	} {
		in := conn
		in.HTTP = &EgressHTTP{Method: tc.method, Scheme: "https", Host: "github.com", Port: 443, Path: tc.path, Query: tc.query,
			HeaderNames: []string{"Host"}}
		if d := eng.DecideEgress(context.Background(), in); d.Action != tc.action || d.Rule != tc.rule || d.Inspect {
			t.Errorf("%s %s?%s: %+v, want %s by %s", tc.method, tc.path, tc.query, d, tc.action, tc.rule)
		}
	}
}
