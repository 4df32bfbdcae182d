package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandgate/sandgate/deerflow"
	"github.com/sandgate/sandgate/manager"
)

// stubMCP stands in for the MCP server so that its routes are registered.
type stubMCP struct{}

func (stubMCP) ServeMCP(http.ResponseWriter, *http.Request, manager.Principal) error { return nil }
func (stubMCP) ServeMetadata(http.ResponseWriter, *http.Request)                     {}
func (stubMCP) MetadataURL(*http.Request) string                                     { return "" }
func (stubMCP) ServeForwarded(http.ResponseWriter, *http.Request, manager.Principal, string) error {
	return nil
}

// wiredDeerFlow is the AIO/DeerFlow front end as an approval env wires
// it (on its manager and audit database), so that its real routes are
// registered.
func wiredDeerFlow(t *testing.T) DeerFlowServer {
	var df DeerFlowServer
	newApprovalEnv(t, approvalOpts{deerflow: &deerflow.Config{}, wrap: func(s *Server, h http.Handler) http.Handler {
		df = s.deps.DeerFlow
		return h
	}})
	return df
}

// docOps returns the document's operations as "METHOD /path" keys.
func docOps(t *testing.T) map[string]op {
	t.Helper()
	out := map[string]op{}
	for _, o := range operations() {
		k := o.method + " " + o.path
		if _, dup := out[k]; dup {
			t.Fatalf("operation %s documented twice", k)
		}
		out[k] = o
	}
	return out
}

// routeKey is a mux pattern as the document names it: "GET /{$}" is "GET
// /", and a pattern without a method matches every method of its path.
func routeKey(pattern string) (method, path string) {
	method, path, ok := strings.Cut(pattern, " ")
	if !ok {
		method, path = "", pattern
	}
	return method, strings.TrimSuffix(path, "{$}")
}

// TestOpenAPIMatchesRoutes: the document and the routes a server with
// every optional part registers are the same set of operations. A route
// added without its entry in operations() fails here.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	s := New(Config{}, Deps{MCP: stubMCP{}, DeerFlow: wiredDeerFlow(t), Gatherer: prometheus.NewRegistry()})
	doc := docOps(t)
	covered := map[string]bool{}
	for _, p := range s.patterns {
		method, path := routeKey(p)
		if method == "" {
			n := 0
			for k, o := range doc {
				if o.path == path {
					covered[k] = true
					n++
				}
			}
			if n == 0 {
				t.Errorf("route %q is registered but not in the OpenAPI document (add it to operations() in api/openapi_ops.go)", p)
			}
			continue
		}
		k := method + " " + path
		if _, ok := doc[k]; !ok {
			t.Errorf("route %q is registered but not in the OpenAPI document (add it to operations() in api/openapi_ops.go)", p)
		}
		covered[k] = true
	}
	for k := range doc {
		if !covered[k] {
			t.Errorf("%s is in the OpenAPI document but no route serves it", k)
		}
	}
}

// TestRoutesGoThroughMount: every route is registered through mount (or
// handle), which records it for TestOpenAPIMatchesRoutes; a direct
// s.mux.Handle would slip past the drift check. The only direct ones are
// mount itself and the catch-all "/".
func TestRoutesGoThroughMount(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "s.mux.Handle(") {
				n++
				if !strings.Contains(line, "s.mux.Handle(pattern, h)") && !strings.Contains(line, `s.mux.Handle("/", `) {
					t.Errorf("%s:%d registers a route around mount: %s", f, i+1, strings.TrimSpace(line))
				}
			}
		}
	}
	if n != 2 {
		t.Errorf("%d direct s.mux.Handle calls, want 2 (mount and the catch-all)", n)
	}
}

// servedDoc is GET /v1/openapi.json as a client reads it.
type servedDoc struct {
	OpenAPI string                                `json:"openapi"`
	Paths   map[string]map[string]json.RawMessage `json:"paths"`
	Comps   struct {
		Schemas map[string]*jsonschema.Schema `json:"schemas"`
	} `json:"components"`
	resolved map[string]*jsonschema.Resolved
}

func fetchDoc(t *testing.T, e *env) *servedDoc {
	t.Helper()
	r := e.do("GET", "/v1/openapi.json", "", nil)
	if r.status != 200 {
		t.Fatalf("GET /v1/openapi.json: %d %s", r.status, r.raw)
	}
	var d servedDoc
	if err := json.Unmarshal(r.raw, &d); err != nil {
		t.Fatal(err)
	}
	if d.OpenAPI != "3.1.0" {
		t.Fatalf("openapi %q", d.OpenAPI)
	}
	d.resolved = map[string]*jsonschema.Resolved{}
	for name, s := range d.Comps.Schemas {
		rs, err := s.Resolve(nil)
		if err != nil {
			t.Fatalf("schema %s does not resolve: %v", name, err)
		}
		d.resolved[name] = rs
	}
	for _, refs := range regexp.MustCompile(`"#/components/schemas/([A-Za-z]+)"`).FindAllStringSubmatch(string(r.raw), -1) {
		if d.resolved[refs[1]] == nil {
			t.Fatalf("$ref to a missing schema %s", refs[1])
		}
	}
	return &d
}

// responseSpec is what the document says of one answer.
type responseSpec struct {
	Content map[string]struct {
		Schema json.RawMessage `json:"schema"`
	} `json:"content"`
}

// validate checks one captured answer against the document.
func (d *servedDoc) validate(c captured) error {
	if c.pattern == "/" { // no route: the unmatched answer
		if c.status != 404 && c.status != 405 {
			return fmt.Errorf("unrouted answer %d", c.status)
		}
		return d.validateJSON("Error", c.body)
	}
	method, path := routeKey(c.pattern)
	if method == "" {
		method = c.method
	}
	raw, ok := d.Paths[path][strings.ToLower(method)]
	if !ok {
		return fmt.Errorf("no operation %s %s in the document", method, path)
	}
	var item struct {
		Responses map[string]responseSpec `json:"responses"`
	}
	if err := json.Unmarshal(raw, &item); err != nil {
		return err
	}
	spec, ok := item.Responses[strconv.Itoa(c.status)]
	if !ok {
		return fmt.Errorf("status %d not documented", c.status)
	}
	media, _, _ := strings.Cut(c.ctype, ";")
	if c.status == http.StatusNoContent || c.status == http.StatusSwitchingProtocols {
		return nil
	}
	content, ok := spec.Content[media]
	if !ok {
		if len(spec.Content) == 1 && media != mediaJSON && media != mediaNDJSON {
			return nil // a documented non-JSON body (text, bytes, assets)
		}
		return fmt.Errorf("media type %q not documented for %d", media, c.status)
	}
	names := schemaNames(content.Schema)
	switch media {
	case mediaJSON:
		return d.validateJSON(names[0], c.body, names[1:]...)
	case mediaNDJSON:
		for line := range bytes.Lines(c.body) {
			if err := d.validateJSON(names[0], line); err != nil {
				return fmt.Errorf("stream line %s: %w", line, err)
			}
		}
	}
	return nil
}

// schemaNames are the component names a schema refers to (one, or the
// alternatives of a oneOf).
func schemaNames(raw json.RawMessage) []string {
	var out []string
	for _, m := range regexp.MustCompile(`#/components/schemas/([A-Za-z]+)`).FindAllSubmatch(raw, -1) {
		out = append(out, string(m[1]))
	}
	return out
}

// validateJSON checks body against schema name, or against any of alts.
func (d *servedDoc) validateJSON(name string, body []byte, alts ...string) error {
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	var errs []string
	for _, n := range append([]string{name}, alts...) {
		rs := d.resolved[n]
		if rs == nil {
			return fmt.Errorf("no schema %s", n)
		}
		err := rs.Validate(v)
		if err == nil {
			return nil
		}
		errs = append(errs, n+": "+err.Error())
	}
	return fmt.Errorf("%s", strings.Join(errs, "; "))
}

// captured is one answer the server gave.
type captured struct {
	method, path, pattern, ctype string
	status                       int
	body                         []byte
}

// capture records every answer of a server (approvalOpts.wrap).
type capture struct {
	mu  sync.Mutex
	got []captured
}

func (c *capture) wrap(s *Server, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, pattern := s.mux.Handler(r)
		rec := &recorder{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(rec, r)
		if rec.hijacked {
			pattern, rec.status = "GET /v1/approvals/ws", http.StatusSwitchingProtocols
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		c.got = append(c.got, captured{method: r.Method, path: r.URL.Path, pattern: pattern,
			ctype: rec.Header().Get("Content-Type"), status: rec.status, body: rec.body.Bytes()})
	})
}

// check validates every answer against the document and returns the
// operations (method and path) they exercised.
func (c *capture) check(t *testing.T, d *servedDoc) map[string]bool {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := map[string]bool{}
	for _, a := range c.got {
		if err := d.validate(a); err != nil {
			t.Errorf("%s %s (%s) answered %d %s: %v\n%s", a.method, a.path, a.pattern, a.status, a.ctype, err, cut(string(a.body), 2000))
		}
		method, path := routeKey(a.pattern)
		if method == "" {
			method = a.method
		}
		seen[method+" "+path] = true
	}
	return seen
}

func cut(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

type recorder struct {
	http.ResponseWriter
	status   int
	wrote    bool
	hijacked bool
	body     bytes.Buffer
}

func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	r.wrote = true
	r.body.Write(p)
	return r.ResponseWriter.Write(p)
}

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	r.hijacked = true
	return http.NewResponseController(r.ResponseWriter).Hijack()
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// requireCovered fails unless every operation of tags was exercised.
func requireCovered(t *testing.T, seen map[string]bool, tags []string, exempt ...string) {
	t.Helper()
	for k, o := range docOps(t) {
		if slices.Contains(tags, o.tag) && !slices.Contains(exempt, o.id) && !seen[k] {
			t.Errorf("%s (%s) was not exercised against the document", k, o.id)
		}
	}
}

// TestOpenAPIResponses: every answer of a real gateway, driven through
// each non-DeerFlow operation (the DeerFlow ones are checked by
// TestDeerFlowProvisionerFlow), has a documented status, media type and
// body.
func TestOpenAPIResponses(t *testing.T) {
	c := &capture{}
	e := newApprovalEnv(t, approvalOpts{wrap: c.wrap})
	doc := fetchDoc(t, e.env)

	page := e.do("GET", "/", "", nil)
	asset := regexp.MustCompile(`/assets/[A-Za-z0-9._-]+`).FindString(string(page.raw))
	if asset == "" {
		t.Fatalf("no asset in the page: %s", page.raw)
	}
	for _, p := range []string{"/healthz", "/readyz", asset, "/no/such/route"} {
		e.do("GET", p, "", nil)
	}
	e.do("GET", "/metrics", adminTok, nil)
	e.do("GET", "/v1/policy", adminTok, nil)
	e.do("POST", "/v1/policy/reload", adminTok, nil)
	e.do("GET", "/v1/policy/shadow", adminTok, nil)
	e.do("GET", "/v1/sessions", "", nil) // 401

	e.do("POST", "/v1/sessions/s1/run_code", agentTok, runCode("print(1)", "python"))
	e.do("POST", "/v1/sessions/s1/run_code", agentTok, `{"code":`) // 400
	e.doWith("POST", "/v1/sessions/s1/run_code", agentTok, runCode("print(2)", "python"), map[string]string{"Accept": mediaNDJSON})
	e.do("POST", "/v1/sessions/s1/execute", agentTok, map[string]any{"command": "echo hi"})
	e.doWith("POST", "/v1/sessions/s1/execute", agentTok, map[string]any{"command": "echo hi"}, map[string]string{"Accept": mediaNDJSON})
	e.do("POST", "/v1/policy/evaluate", agentTok, map[string]any{"session_id": "s1", "code": "print(1)", "language": "python"})
	e.do("POST", "/v1/sessions/s1/kernel/restart", agentTok, nil)                          // no kernel: restarted false
	e.do("POST", "/v1/sessions/s1/browser", agentTok, map[string]any{"action": "content"}) // no browser: 503

	files := "/v1/sessions/s1/files"
	e.do("PUT", files+"/content?path=a.txt", agentTok, "one\ntwo\n")
	e.do("PUT", files+"/content?path=a.txt", agentTok, "one\ntwo\nthree\n")
	e.do("GET", files+"/content?path=a.txt", agentTok, nil)
	e.do("GET", files+"/read?path=a.txt", agentTok, nil)
	e.do("POST", files+"/edit", agentTok, map[string]any{"path": "a.txt", "old": "two", "new": "2"})
	e.do("POST", files+"/edit", agentTok, map[string]any{"path": "a.txt", "old": "absent", "new": "2"}) // 409
	e.do("GET", files+"/list?path=", agentTok, nil)
	e.do("GET", files+"/glob?pattern=*.txt", agentTok, nil)
	e.do("GET", files+"/grep?pattern=one", agentTok, nil)
	e.do("GET", files+"/read?path=../x", agentTok, nil) // path_traversal
	e.do("DELETE", files+"?path=a.txt", agentTok, nil)

	e.do("GET", "/v1/sessions", agentTok, nil)
	e.do("GET", "/v1/sessions/s1", agentTok, nil)
	e.do("POST", "/v1/sessions", agentTok, map[string]any{"id": "s2", "labels": map[string]string{"team": "a"}, "timeout_s": 300})
	e.do("POST", "/v1/sessions", agentTok, map[string]any{"id": "s2"})      // 409
	e.do("POST", "/v1/sessions", agentTok, map[string]any{"timeout_s": -1}) // 400
	e.do("PATCH", "/v1/sessions/s2", agentTok, map[string]any{"timeout_s": 600})
	e.do("GET", "/v1/sessions?label=team=a", agentTok, nil)
	e.do("POST", "/v1/sessions/s2/pause", agentTok, nil)
	e.do("POST", "/v1/sessions/s2/resume", agentTok, nil)
	e.do("POST", "/v1/sessions/nosuch/pause", agentTok, nil) // 404
	e.do("POST", "/v1/sessions/s2/fork", agentTok, map[string]any{"count": 1})
	e.do("POST", "/v1/sessions/s2/fork", agentTok, map[string]any{"count": 0}) // 400
	e.do("POST", "/v1/sessions/s2/snapshots", agentTok, map[string]any{"name": "n1"})
	e.do("POST", "/v1/sessions/s2/snapshots", agentTok, map[string]any{"name": "n1"}) // 409
	e.do("GET", "/v1/snapshots", agentTok, nil)
	e.do("DELETE", "/v1/snapshots/snap-0000000000000000", agentTok, nil) // 404
	e.do("GET", "/v1/audit?limit=5", adminTok, nil)
	e.do("GET", "/v1/audit?outcome=Denied", adminTok, nil) // 400
	e.do("GET", "/v1/audit/records/1", adminTok, nil)
	e.do("GET", "/v1/audit/records/999999", adminTok, nil) // 404
	e.do("GET", "/v1/audit/verify", adminTok, nil)
	e.do("GET", "/v1/audit/export?kind=run_code", adminTok, nil)

	call := e.runAsync("s2", highRisk)
	v := pendingForTenant(t, e.hub, "a", "s2")
	e.do("GET", "/v1/approvals?status=pending", approverTok, nil)
	e.do("GET", "/v1/approvals/"+v.ID, approverTok, nil)
	e.do("POST", "/v1/approvals/"+v.ID+"/decision", approverTok, map[string]any{"decision": "approve"})
	e.do("POST", "/v1/approvals/"+v.ID+"/decision", approverTok, map[string]any{"decision": "deny"}) // 409
	call.wait(t)
	e.do("GET", "/v1/approvals?status=resolved", approverTok, nil)
	e.do("GET", "/v1/approvals/connections?session_id=s2", approverTok, nil)
	e.do("GET", "/v1/fleet/approvals/"+v.ID, approverTok, nil) // 404: not a signed peer request
	e.do("POST", "/v1/channels/none/callback", "", nil)        // 404: no such approval channel
	ws, _, err := e.dialWS(http.Header{"Authorization": {"Bearer " + approverTok}})
	if err != nil {
		t.Fatal(err)
	}
	ws.Close()
	e.do("DELETE", "/v1/sessions/s1", agentTok, nil)
	e.do("GET", "/v1/openapi.json", "", nil)

	deadline := time.Now().Add(5 * time.Second)
	for len(c.got) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	seen := c.check(t, doc)
	requireCovered(t, seen, []string{"execution", "policy", "browser", "sessions", "audit", "operations", "files", "approvals"})
}
