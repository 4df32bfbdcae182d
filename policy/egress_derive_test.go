package policy

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/storage"
)

// parityRules are egress configurations that exercise every part of the
// rules' matching: request presets with and without hosts of their own,
// host presets, globs and "*", ports, scopes, cidrs, HTTP matchers,
// inspect and connection_only.
var parityRules = [][]any{
	benchEgressRules,
	{
		map[string]any{"name": "ask", "action": "require_approval", "hosts": []any{"*"}},
		map[string]any{"name": "gh", "action": "allow", "hosts": []any{"*.GitHub.com"}},
		map[string]any{"name": "no-gist", "action": "deny", "hosts": []any{"gist.github.com"}},
		map[string]any{"name": "ssh", "action": "allow", "hosts": []any{"github.com"}, "ports": []any{22}},
		map[string]any{"name": "db", "action": "allow", "hosts": []any{"DB.internal"}, "cidrs": []any{"10.1.2.0/24"}},
		map[string]any{"name": "lb", "action": "allow", "hosts": []any{"**.lb.test"}, "cidrs": []any{"127.0.0.0/8"}},
	},
	{
		map[string]any{"name": "api-ask", "action": "require_approval", "hosts": []any{"api.example"}},
		map[string]any{"name": "api-get", "action": "allow", "hosts": []any{"api.example"}, "methods": []any{"get", "HEAD"},
			"path_prefixes": []any{"/v1/"}},
		map[string]any{"name": "api-no-admin", "action": "deny", "hosts": []any{"api.example"}, "paths": []any{"/v1/admin/**"}},
		map[string]any{"name": "ro", "action": "allow", "hosts": []any{"ro.example"}, "request_preset": "http-readonly",
			"modes": []any{"STRICT"}, "tenants": []any{"t"}},
		map[string]any{"name": "watched", "action": "allow", "hosts": []any{"w.example"}, "inspect": true},
		map[string]any{"name": "proposal:p1", "action": "allow", "hosts": []any{"ro.example"}, "sessions": []any{"t/s-1"},
			"connection_only": true},
		map[string]any{"name": "idx", "action": "allow", "request_preset": "pypi-install", "hosts": []any{"pypi.test"},
			"sessions": []any{"t/s-2"}},
		map[string]any{"name": "empty-scope", "action": "deny", "hosts": []any{"x.example"}, "modes": []any{}, "tenants": []any{}},
	},
}

// parityInputs are connections and requests across those rules.
func parityInputs() []EgressInput {
	var out []EgressInput
	hosts := []string{"github.com", "GIST.github.com", "api.github.com", "pypi.org", "files.pythonhosted.org", "registry.npmjs.org",
		"api.example.test", "www.example.org", "db.internal", "a.b.lb.test", "api.example", "ro.example", "w.example",
		"pypi.test", "x.example", "nowhere.test"}
	requests := []*EgressHTTP{nil,
		{Method: "GET", Path: "/v1/items", Query: "page=2"},
		{Method: "POST", Path: "/v1/items"},
		{Method: "GET", Path: "/v1/admin/users"},
		{Method: "GET", Path: "/o/r.git/info/refs", Query: "service=git-receive-pack"},
		{Method: "POST", Path: "/o/r.git/git-upload-pack"},
		{Method: "head", Path: "/"},
	}
	resolved := [][]string{{"203.0.113.10"}, {"10.1.2.3"}, {"127.0.0.1"}, nil}
	n := 0
	for _, h := range hosts {
		for _, port := range []int{443, 22} {
			for _, r := range requests {
				// The scope and the addresses vary with the count, so
				// that each host meets each of them without the product.
				n++
				in := EgressInput{Mode: []string{"STRICT", "PERMISSIVE"}[n/2%2], Host: h, Port: port, Scheme: "https",
					SessionID: []string{"s-1", "s-2"}[n%2], Tenant: "t", Principal: "agent:a", Resolved: resolved[n/3%4],
					GatewayAddresses: []string{"198.51.100.7"}}
				if r != nil {
					hr := *r
					hr.Scheme, hr.Host, hr.Port, hr.HeaderNames = "https", h, port, []string{"Host"}
					in.HTTP = &hr
				}
				out = append(out, in)
			}
		}
	}
	return out
}

// TestDerivedEgressRulesDecideAsExpandedOnes: every decision with the
// derived rules (what the gateway serves) is the decision the policy
// makes expanding the rules itself (what `opa test` checks), over the
// shipped data and an overlay.
func TestDerivedEgressRulesDecideAsExpandedOnes(t *testing.T) {
	ctx := context.Background()
	inputs := parityInputs()
	for n, rules := range parityRules {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			e := newEngine(t, Options{})
			overlay := make([]map[string]any, len(rules))
			for i, r := range rules {
				overlay[i] = r.(map[string]any)
			}
			if err := e.SetEgressOverlay(ctx, overlay); err != nil {
				t.Fatal(err)
			}
			c := e.cur.Load()
			if !hasDerived(t, c) {
				t.Fatal("the overlay left no derived rules")
			}
			derived := make([]EgressDecision, len(inputs))
			for i, in := range inputs {
				derived[i] = e.decideEgress(ctx, c, in.Map())
			}
			err := storage.Txn(ctx, c.store, storage.WriteParams, func(txn storage.Transaction) error {
				return removeDerived(ctx, c.store, txn, derivedEgressPath)
			})
			if err != nil || hasDerived(t, c) {
				t.Fatalf("derived rules not removed: %v", err)
			}
			kinds := map[string]int{}
			for i, in := range inputs {
				want := e.decideEgress(ctx, c, in.Map())
				if !reflect.DeepEqual(derived[i], want) {
					t.Fatalf("%+v (http %+v):\nderived  %+v\nexpanded %+v", in, in.HTTP, derived[i], want)
				}
				kinds[want.Action+" "+want.Rule]++
			}
			if len(kinds) < 5 {
				t.Fatalf("the inputs reach too few outcomes to compare: %v", kinds)
			}
		})
	}
}

func hasDerived(t *testing.T, c *compiled) bool {
	t.Helper()
	_, err := storage.ReadOne(context.Background(), c.store, derivedEgressPath)
	if err != nil && !storage.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

// TestEgressReplayDecidesAsTheCandidateInTheStore: a replay's decisions
// (the candidate's store, evaluated in parallel) are those the policy
// makes once the candidate is its overlay, its Now answers are the live
// ones before, and the candidate never reaches live decisions.
func TestEgressReplayDecidesAsTheCandidateInTheStore(t *testing.T) {
	ctx := context.Background()
	inputs := parityInputs()
	e := newEngine(t, Options{})
	overlay := make([]map[string]any, 0, len(parityRules[2]))
	for _, r := range parityRules[2] {
		overlay = append(overlay, r.(map[string]any))
	}
	if err := e.SetEgressOverlay(ctx, overlay); err != nil {
		t.Fatal(err)
	}
	extra := []map[string]any{
		{"name": "proposal:p1", "action": "allow", "hosts": []any{"api.github.com"}, "sessions": []any{"t/s-1"}, "connection_only": true},
		{"name": "cand-deny", "action": "deny", "hosts": []any{"w.example"}},
	}
	r, err := e.NewEgressReplay(ctx, extra)
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.Candidate(ctx, inputs)
	if err != nil {
		t.Fatal(err)
	}
	now, err := r.Now(ctx, inputs)
	if err != nil {
		t.Fatal(err)
	}
	changed := 0
	for i, in := range inputs {
		if live := e.DecideEgressQuietly(ctx, in); !reflect.DeepEqual(now[i], live) {
			t.Fatalf("%+v: now %+v, live %+v", in, now[i], live)
		}
		if now[i].Action != got[i].Action {
			changed++
		}
	}
	if changed == 0 {
		t.Fatal("the candidate changes no decision: the comparison shows nothing")
	}
	if d := e.DecideEgressQuietly(ctx, EgressInput{Mode: "STRICT", Host: "api.github.com", Port: 443, Scheme: "https",
		SessionID: "s-1", Tenant: "t", Resolved: []string{"203.0.113.10"}}); d.Rule == "proposal:p1" {
		t.Fatal("the candidate leaked into live decisions")
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := r.Candidate(cancelled, inputs); err == nil {
		t.Fatal("a cancelled replay went on")
	}
	// The reference: the candidate as the live overlay.
	if err := e.SetEgressOverlay(ctx, append(overlay, extra...)); err != nil {
		t.Fatal(err)
	}
	for i, in := range inputs {
		if want := e.DecideEgressQuietly(ctx, in); !reflect.DeepEqual(got[i], want) {
			t.Fatalf("%+v (http %+v):\nreplay      %+v\nas overlay  %+v", in, in.HTTP, got[i], want)
		}
	}
}

// TestEgressInputValue: the input built directly for replays is the
// input Map converts to.
func TestEgressInputValue(t *testing.T) {
	for _, in := range parityInputs()[:40] {
		want, err := ast.InterfaceToValue(in.Map())
		if err != nil {
			t.Fatal(err)
		}
		if got := in.value(); got.Compare(want) != 0 {
			t.Fatalf("value %v, Map %v", got, want)
		}
	}
}
