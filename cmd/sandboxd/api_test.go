package main

import (
	"net/http"
	"strings"
	"testing"
)

func TestAuth(t *testing.T) {
	ts := newTestServer(t)
	cases := []struct {
		name string
		hdr  []string
		want int
	}{
		{"none", []string{"X-Other", "x"}, http.StatusUnauthorized},
		{"wrong key", []string{"X-AIO-API-Key", "nope"}, http.StatusUnauthorized},
		{"key prefix", []string{"X-AIO-API-Key", testKey[:10]}, http.StatusUnauthorized},
		{"wrong bearer", []string{"Authorization", "Bearer nope"}, http.StatusUnauthorized},
		{"basic", []string{"Authorization", "Basic " + testKey}, http.StatusUnauthorized},
		{"header key", []string{"X-AIO-API-Key", testKey}, http.StatusOK},
		{"bearer", []string{"Authorization", "Bearer " + testKey}, http.StatusOK},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := ts.do(http.MethodGet, "/v1/sandbox", nil, c.hdr...)
			if r.status != c.want {
				t.Fatalf("status %d, want %d: %s", r.status, c.want, r.raw)
			}
			if c.want == http.StatusUnauthorized && strings.Contains(string(r.raw), testKey) {
				t.Fatalf("401 body echoes the key: %s", r.raw)
			}
		})
	}
	// Unknown routes are hidden behind auth too.
	if r := ts.do(http.MethodGet, "/v1/nothing", nil, "X-Other", "x"); r.status != http.StatusUnauthorized {
		t.Errorf("unauthenticated unknown route: %d", r.status)
	}
}

// TestNotFoundForms: FastAPI's bodies for an unknown route and a wrong
// method; the client tells "endpoint missing" from these.
func TestNotFoundForms(t *testing.T) {
	ts := newTestServer(t)
	r := ts.do(http.MethodPost, "/v1/jupyter/execute", map[string]any{"code": "1"})
	if r.status != http.StatusNotFound || string(r.raw) != `{"detail":"Not Found"}` {
		t.Errorf("unknown route: %d %s", r.status, r.raw)
	}
	r = ts.do(http.MethodGet, "/v1/bash/exec", nil)
	if r.status != http.StatusMethodNotAllowed || string(r.raw) != `{"detail":"Method Not Allowed"}` {
		t.Errorf("wrong method: %d %s", r.status, r.raw)
	}
	r = ts.do(http.MethodPost, "/v1/bash/sessions/x/y/close", nil)
	if r.status != http.StatusNotFound {
		t.Errorf("nested param route: %d %s", r.status, r.raw)
	}
}

// TestValidation422: FastAPI's {"detail":[{type, loc, msg, input}]} form.
func TestValidation422(t *testing.T) {
	ts := newTestServer(t)
	item := func(t *testing.T, r reply) map[string]any {
		t.Helper()
		if r.status != http.StatusUnprocessableEntity {
			t.Fatalf("status %d, want 422: %s", r.status, r.raw)
		}
		d, ok := r.body["detail"].([]any)
		if !ok || len(d) == 0 {
			t.Fatalf("detail is not a non-empty list: %s", r.raw)
		}
		it := d[0].(map[string]any)
		for _, k := range []string{"type", "loc", "msg"} {
			if _, ok := it[k]; !ok {
				t.Fatalf("detail item has no %s: %s", k, r.raw)
			}
		}
		return it
	}
	t.Run("missing", func(t *testing.T) {
		it := item(t, ts.post("/v1/bash/exec", map[string]any{"session_id": "x"}))
		if it["type"] != "missing" || it["msg"] != "Field required" || !locIs(it, "body", "command") {
			t.Errorf("item %v", it)
		}
	})
	t.Run("null required", func(t *testing.T) {
		it := item(t, ts.post("/v1/bash/exec", `{"command": null}`))
		if it["type"] != "string_type" || !locIs(it, "body", "command") {
			t.Errorf("item %v", it)
		}
	})
	t.Run("wrong type", func(t *testing.T) {
		it := item(t, ts.post("/v1/bash/exec", map[string]any{"command": "true", "async_mode": "yes"}))
		if it["type"] != "bool_type" || !locIs(it, "body", "async_mode") {
			t.Errorf("item %v", it)
		}
	})
	t.Run("bad json", func(t *testing.T) {
		it := item(t, ts.post("/v1/bash/exec", `{"command": `))
		if it["type"] != "json_invalid" {
			t.Errorf("item %v", it)
		}
	})
	t.Run("not an object", func(t *testing.T) {
		it := item(t, ts.post("/v1/bash/exec", `[1,2]`))
		if it["type"] != "model_attributes_type" {
			t.Errorf("item %v", it)
		}
	})
	t.Run("empty body", func(t *testing.T) {
		it := item(t, ts.post("/v1/code/execute", ""))
		if it["type"] != "missing" || !locIs(it, "body") {
			t.Errorf("item %v", it)
		}
	})
	t.Run("literal", func(t *testing.T) {
		it := item(t, ts.post("/v1/code/execute", map[string]any{"language": "ruby", "code": "1"}))
		if it["type"] != "literal_error" || !locIs(it, "body", "language") || it["msg"] != "Input should be 'python' or 'javascript'" {
			t.Errorf("item %v", it)
		}
	})
	t.Run("unknown fields ignored", func(t *testing.T) {
		r := ts.post("/v1/bash/exec", map[string]any{"command": "true", "no_such_field": 1})
		r.envelope(t, true)
	})
}

func locIs(item map[string]any, want ...string) bool {
	loc, _ := item["loc"].([]any)
	if len(loc) != len(want) {
		return false
	}
	for i := range want {
		if loc[i] != want[i] {
			return false
		}
	}
	return true
}

// TestSandboxContext: SandboxResponse has the envelope plus top-level
// home_dir, workspace, version and detail; data is a string.
func TestSandboxContext(t *testing.T) {
	ts := newTestServer(t)
	r := ts.do(http.MethodGet, "/v1/sandbox", nil)
	if r.status != http.StatusOK {
		t.Fatalf("status %d", r.status)
	}
	for _, k := range []string{"success", "message", "data", "hint", "home_dir", "workspace", "version", "detail"} {
		if _, ok := r.body[k]; !ok {
			t.Errorf("no %q: %s", k, r.raw)
		}
	}
	if _, ok := r.body["data"].(string); !ok {
		t.Errorf("data is not a string")
	}
	if r.body["home_dir"] != ts.ws || r.body["workspace"] != ts.ws || !hasNull(r.body, "hint") {
		t.Errorf("home_dir %v workspace %v hint %v", r.body["home_dir"], r.body["workspace"], r.body["hint"])
	}
	d := r.body["detail"].(map[string]any)
	sys := d["system"].(map[string]any)
	for _, k := range []string{"os", "os_version", "arch", "user", "home_dir", "timezone", "occupied_ports"} {
		if _, ok := sys[k]; !ok {
			t.Errorf("detail.system has no %q", k)
		}
	}
	rt := d["runtime"].(map[string]any)
	py, _ := rt["python"].([]any)
	if len(py) == 0 {
		t.Errorf("no python runtime reported: %v", rt)
	} else if spec := py[0].(map[string]any); spec["ver"] == nil || spec["bin"] == nil {
		t.Errorf("python tool spec %v", spec)
	}
}
