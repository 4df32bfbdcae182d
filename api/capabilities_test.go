package api

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/executortest"
)

// TestNonRootGatewayDeniesNamingTheCapability is the "non-root gateway"
// bug seen from a client: /readyz said "subprocess":"ok", then every run
// got 503 executor_unavailable and the gateway looped. With a subprocess
// executor that cannot isolate the network (process-group mode), every
// SAFE run is now a 403 policy_denied naming the missing capability, the
// executor is never called, and /readyz and GET /v1/policy show what it
// can enforce.
func TestNonRootGatewayDeniesNamingTheCapability(t *testing.T) {
	caps := executors.Capabilities{MemoryLimit: true, RootFS: "host", Isolation: "process-group"}
	fake := &executortest.Fake{KindValue: executors.KindSubprocess, Caps: &caps}
	e := newEnv(t, envOpts{subprocess: fake})
	for i := range 3 {
		r := e.do("POST", "/v1/sessions/nonroot/run_code", agentTok, runCode("print(1)", "python"))
		if r.status != 403 || r.errCode() != "policy_denied" {
			t.Fatalf("run %d: %d %s, want 403 policy_denied", i, r.status, r.raw)
		}
		reasons, _ := r.body["error"].(map[string]any)["reasons"].([]any)
		first, _ := reasons[0].(map[string]any)
		if first["code"] != "executor.capability_missing" ||
			first["message"] != "subprocess cannot enforce network isolation (process-group mode)" {
			t.Fatalf("run %d: reasons %v", i, reasons)
		}
	}
	if n := len(fake.Calls()); n != 0 {
		t.Errorf("the executor ran %d times, want 0", n)
	}
	for _, rec := range e.auditRecords("nonroot") {
		if rec.Outcome != "denied" || rec.HTTPStatus != 403 {
			t.Errorf("audit record outcome %q status %d, want denied 403", rec.Outcome, rec.HTTPStatus)
		}
	}

	r := e.do("GET", "/readyz", "", nil)
	sub, _ := r.body["executors"].(map[string]any)["subprocess"].(map[string]any)
	got, _ := sub["capabilities"].(map[string]any)
	if r.status != 200 || sub["status"] != "ok" || got["network_isolation"] != false ||
		got["memory_limit"] != true || got["isolation"] != "process-group" || got["root_fs"] != "host" {
		t.Fatalf("readyz %d %s, want subprocess ok with its capabilities", r.status, r.raw)
	}

	r = e.do("GET", "/v1/policy", adminTok, nil)
	sub, _ = r.body["executors"].(map[string]any)["subprocess"].(map[string]any)
	got, _ = sub["capabilities"].(map[string]any)
	if r.status != 200 || sub["available"] != true || got["network_isolation"] != false || got["process_limit"] != false {
		t.Fatalf("GET /v1/policy %d %s, want the subprocess capabilities", r.status, r.raw)
	}
}

// TestReadyzShowsTheUnavailableReason: an executor that cannot run shows
// its own reason in /readyz and GET /v1/policy, and a run routed to it is
// denied naming it, not sent to fail.
func TestReadyzShowsTheUnavailableReason(t *testing.T) {
	fake := &executortest.Fake{KindValue: executors.KindSubprocess, AvailableFunc: func(context.Context) error {
		return &executors.UnavailableError{Kind: executors.KindSubprocess, Reason: "user namespaces unavailable"}
	}}
	e := newEnv(t, envOpts{subprocess: fake})
	// Not e.do: a 503 from /readyz is a probe answer, not an error body.
	res, err := e.srv.Client().Get(e.srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var ready struct {
		Ready     bool `json:"ready"`
		Executors map[string]struct {
			Status, Reason string
			Capabilities   map[string]any
		} `json:"executors"`
	}
	if err := json.NewDecoder(res.Body).Decode(&ready); err != nil {
		t.Fatal(err)
	}
	sub := ready.Executors["subprocess"]
	if res.StatusCode != 503 || ready.Ready || sub.Status != "unavailable" || sub.Reason != "user namespaces unavailable" ||
		sub.Capabilities["network_isolation"] != true {
		t.Fatalf("readyz %d %+v", res.StatusCode, ready)
	}
	r := e.do("GET", "/v1/policy", adminTok, nil)
	if sub, _ := r.body["executors"].(map[string]any)["subprocess"].(map[string]any); sub["reason"] != "user namespaces unavailable" {
		t.Fatalf("GET /v1/policy %s", r.raw)
	}
	r = e.do("POST", "/v1/sessions/down/run_code", agentTok, runCode("print(1)", "python"))
	reasons, _ := r.body["error"].(map[string]any)["reasons"].([]any)
	first, _ := reasons[0].(map[string]any)
	if r.status != 503 || r.errCode() != "executor_unavailable" ||
		first["message"] != `executor "subprocess" is not available: user namespaces unavailable` {
		t.Fatalf("run %d %s", r.status, r.raw)
	}
	if n := len(fake.Calls()); n != 0 {
		t.Errorf("the executor ran %d times, want 0", n)
	}
}
