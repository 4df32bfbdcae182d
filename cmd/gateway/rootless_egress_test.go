package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/egresstest"
)

const (
	rootlessAPIHost  = "rest.rootless.test"
	rootlessAgent    = "agent-rootless-egress"
	rootlessApprover = "approver-rootless-egress"
)

// rootlessFetch is Python that sends a request through the proxy
// variables and prints the status and the body, or the proxy's refusal.
const rootlessFetch = `import urllib.request, urllib.error, json
def send(method, u, data=None):
    try:
        r = urllib.request.urlopen(urllib.request.Request(u, data=data, method=method), timeout=90)
        return "%d %s" % (r.status, r.read().decode())
    except urllib.error.HTTPError as e:
        d = json.loads(e.read().decode())
        return "%d %s rule=%s" % (e.code, d["decision"], d["rule"])
    except Exception as e:
        return "failed " + repr(e)
`

// TestGatewayAsNonRootUserEgressRequests is issue 33's per-request egress
// with the real gateway binary started as an unprivileged user, the
// subprocess executor behind it (its runs reach the proxy through socat
// in their own namespaces) and the docker executor (the engine socket's
// group the one privilege given): on an inspected HTTPS host reached by a
// test host name, a GET is allowed with the credential scoped to it, a
// DELETE is refused with the structured 403, and a POST is held, then
// runs once an approver approves it; the upstream sees only what was
// allowed.
func TestGatewayAsNonRootUserEgressRequests(t *testing.T) {
	for _, tc := range []struct{ executor, require string }{
		{"subprocess", ""},
		{"docker", "SANDGATE_REQUIRE_DOCKER"},
	} {
		t.Run(tc.executor, func(t *testing.T) { testRootlessEgress(t, tc.executor, tc.require) })
	}
}

func testRootlessEgress(t *testing.T, executor, require string) {
	if os.Geteuid() != 0 {
		if os.Getenv("SANDGATE_REQUIRE_ROOT") == "1" {
			t.Fatal("SANDGATE_REQUIRE_ROOT=1 but not running as root")
		}
		t.Skip("needs root to create an unprivileged user and drop to it")
	}
	if os.Getenv("SANDGATE_RUNTIME_ROOT") == "" {
		// Without the runtime root's socat a non-root gateway grants no
		// network (executors/subprocess/capabilities.go).
		if os.Getenv("SANDGATE_REQUIRE_RUNTIME_ROOT") == "1" {
			t.Fatal("SANDGATE_REQUIRE_RUNTIME_ROOT=1 but SANDGATE_RUNTIME_ROOT is not set")
		}
		t.Skip("a non-root gateway grants network only with the runtime root (SANDGATE_RUNTIME_ROOT)")
	}
	ensureUser(t, rootlessUser)
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var sb [16]byte
	_, _ = rand.Read(sb[:])
	secret := "Bearer sg-rootless-" + hex.EncodeToString(sb[:])
	ca := egresstest.NewUpstreamCA(t, rootlessAPIHost)
	upstream := &egresstest.RequestLog{Header: "Authorization", Secret: secret}
	port := ca.ServeTLS(t, upstream)
	caFile := filepath.Join(dir, "upstream-ca.pem")
	if err := os.WriteFile(caFile, ca.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	pol := rootlessEgressPolicy(t, filepath.Join(dir, "policy"), executor, port)
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o711); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("chown", rootlessUser+":"+rootlessUser, data).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v: %s", err, out)
	}
	cfg := filepath.Join(dir, "config.yaml")
	yaml := "executors:\n  subprocess: {enabled: true, root_dir: \"" + os.Getenv("SANDGATE_RUNTIME_ROOT") + "\"}\n" +
		"  docker: {enabled: " + strconv.FormatBool(executor == "docker") + "}\n  gvisor: {enabled: false}\n  aio: {enabled: false}\nbrowser: {enabled: false}\n" +
		"approval: {timeout: 60s}\n" +
		"egress:\n  hosts: {\"" + rootlessAPIHost + "\": [\"127.0.0.1\"]}\n" +
		"  credentials: [{host: \"" + rootlessAPIHost + "\", header: Authorization, value_env: API_TOKEN, methods: [GET], path_prefix: /v1/}]\n" +
		"policy: {dir: \"" + pol + "\", eval_timeout: 10s}\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	groups := []string{"--clear-groups"}
	if executor == "docker" {
		groups = []string{"--groups", engineSocketGroup(t)}
	}
	run := exec.Command("setpriv", append(append([]string{"--reuid", rootlessUser, "--regid", rootlessUser},
		groups...), "--", gatewayBinary(t), "--config", cfg, "--listen", "127.0.0.1:0", "--mode", "STRICT", "--data-dir", data)...)
	run.Dir = dir
	// SSL_CERT_FILE: the gateway verifies the loopback upstream with the
	// test CA, as it would a public server with the system roots.
	run.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SSL_CERT_FILE=" + caFile, "API_TOKEN=" + secret,
		"SANDGATE_AGENT_TOKEN=" + rootlessAgent, "SANDGATE_APPROVER_TOKEN=" + rootlessApprover,
		"SANDGATE_ADMIN_TOKEN=admin-rootless-egress"}
	base, logs := startAndWait(t, run)
	defer func() {
		if t.Failed() {
			t.Logf("gateway logs:\n%s", logs.String())
		}
	}()
	if st := executorStatus(t, base, executor); st != "ok" {
		msg := executor + " is not ready (" + st + ")"
		if require == "" || os.Getenv(require) == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg + ": needs " + require)
	}

	api := fmt.Sprintf("https://%s:%d", rootlessAPIHost, port)
	send := func(method, path string) string {
		out := postRunAs(t, base, rootlessAgent, "egress", rootlessFetch+fmt.Sprintf("print(send(%q, %q, %s))\n",
			method, api+path, map[bool]string{true: "None", false: "b'{}'"}[method == "GET" || method == "DELETE"]))
		if out["sandbox_type"] != executor {
			t.Errorf("ran in %v, want %s: %v", out["sandbox_type"], executor, out)
		}
		s, _ := out["stdout"].(string)
		return strings.TrimSpace(s)
	}
	if got := send("GET", "/v1/items"); got != "200 served GET /v1/items auth=yes" {
		t.Errorf("GET: %q", got)
	}
	if got := send("DELETE", "/v1/items/1"); got != "403 deny rule=api-read" {
		t.Errorf("DELETE: %q", got)
	}
	done := make(chan string, 1)
	go func() { done <- send("POST", "/v1/items") }()
	id := pendingEgress(t, base, fmt.Sprintf("POST %s:%d/v1/items", rootlessAPIHost, port))
	if st := httpJSON(t, "POST", base+"/v1/approvals/"+id+"/decision", rootlessApprover, map[string]any{"decision": "approve"}, nil); st != 200 {
		t.Fatalf("decision: %d", st)
	}
	if got := <-done; got != "200 served POST /v1/items auth=no" {
		t.Errorf("POST after approval: %q", got)
	}
	want := []string{"GET /v1/items auth=yes", "POST /v1/items auth=no"}
	if got := upstream.Served(); !slices.Equal(got, want) {
		t.Errorf("the upstream served %q, want only what was allowed %q", got, want)
	}
	if strings.Contains(logs.String(), secret) {
		t.Error("the gateway's log holds the credential")
	}
}

// rootlessEgressPolicy is the shipped policy with every STRICT level run
// in executor, network for STRICT runs, and the API's rules: GET allowed,
// POST held, anything else refused.
func rootlessEgressPolicy(t *testing.T, dir, executor string, port int) string {
	t.Helper()
	onlyExecutorPolicy(t, dir, executor)
	p := filepath.Join(dir, "sandgate", "config", "data.json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	row := map[string]any{"action": "allow", "executor": executor}
	doc["modes"].(map[string]any)["STRICT"] = map[string]any{"SAFE": row, "LOW": row, "MEDIUM": row, "HIGH": row, "CRITICAL": row}
	doc["isolation_upgrade"].(map[string]any)["modes"] = []string{}
	eg := doc["egress"].(map[string]any)
	eg["network_modes"] = []string{"STRICT"}
	rule := func(name, action string, methods ...string) map[string]any {
		return map[string]any{"name": name, "action": action, "hosts": []string{rootlessAPIHost}, "ports": []int{port},
			"cidrs": []string{"127.0.0.1/32"}, "methods": methods}
	}
	eg["rules"] = []any{rule("api-read", "allow", "GET"), rule("api-write", "require_approval", "POST")}
	if b, err = json.Marshal(doc); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// executorStatus is executor's status in /readyz.
func executorStatus(t *testing.T, base, executor string) string {
	t.Helper()
	var ready struct {
		Executors map[string]struct{ Status string } `json:"executors"`
	}
	httpJSON(t, "GET", base+"/readyz", "", nil, &ready)
	return ready.Executors[executor].Status
}

// postRunAs runs code in session with token and returns the answer.
func postRunAs(t *testing.T, base, token, session, code string) map[string]any {
	t.Helper()
	var out map[string]any
	if st := httpJSON(t, "POST", base+"/v1/sessions/"+session+"/run_code", token,
		map[string]any{"code": code, "language": "python", "timeout_s": 120}, &out); st != 200 {
		t.Errorf("run_code: %d %v", st, out)
	}
	return out
}

// pendingEgress waits for the pending egress approval of target.
func pendingEgress(t *testing.T, base, target string) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		var list struct {
			Approvals []struct{ ID, Kind, Target string } `json:"approvals"`
		}
		httpJSON(t, "GET", base+"/v1/approvals", rootlessApprover, nil, &list)
		for _, a := range list.Approvals {
			if a.Kind == "egress" && a.Target == target {
				return a.ID
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no pending egress approval for %s", target)
	return ""
}

// httpJSON sends body as JSON with token and decodes the answer into out
// (when not nil); it returns the status.
func httpJSON(t *testing.T, method, url, token string, body, out any) int {
	t.Helper()
	var rd *strings.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = strings.NewReader(string(b))
	} else {
		rd = strings.NewReader("")
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if out != nil {
		_ = json.NewDecoder(res.Body).Decode(out)
	}
	return res.StatusCode
}
