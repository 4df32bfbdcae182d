package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/confirm"
	"github.com/sandgate/sandgate/egress"
	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/docker"
	"github.com/sandgate/sandgate/executors/gvisor"
	"github.com/sandgate/sandgate/executors/subprocess"
	"github.com/sandgate/sandgate/internal/egresstest"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/risk"
	"github.com/sandgate/sandgate/workspace"
)

// The acceptance of issue 33 (egress by method and path), through the
// HTTP API, in every executor: git, a package index and an API on
// loopback HTTPS servers reached under test host names, with the
// github-readonly and pypi-install presets and per-request rules.
const (
	e2eGit  = "git.e2e.test"
	e2ePyPI = "pypi.e2e.test"
	e2eRest = "rest.e2e.test"
)

// restLog is the API server's log of what reached it: method, path and
// whether the credential came (never the credential).
type restLog struct {
	mu     sync.Mutex
	secret string
	log    []string
}

func (l *restLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	auth := "no"
	if r.Header.Get("Authorization") == "Bearer "+l.secret {
		auth = "yes"
	}
	line := fmt.Sprintf("%s %s auth=%s", r.Method, r.URL.Path, auth)
	l.mu.Lock()
	l.log = append(l.log, line)
	l.mu.Unlock()
	_, _ = io.Copy(io.Discard, r.Body)
	io.WriteString(w, "served "+line)
}

func (l *restLog) served() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.log)
}

type httpE2E struct {
	*egressE2E
	git                        *egresstest.GitServer
	index                      *egresstest.PackageIndex
	rest                       *restLog
	gitPort, pypiPort, apiPort int
	logs                       *bytes.Buffer
}

// httpE2EOptions vary the gateway newHTTPE2E builds.
type httpE2EOptions struct {
	// heldMethods are the API's methods held for approval (default POST).
	heldMethods []string
	// grants enables the approval hub's grants (confirm.Grants, egress
	// grants among them), revoked at a session's end as in main.
	grants bool
}

// httpPolicy is the shipped policy with every level routed to kind and
// the rules, scoped to tenant "a".
func httpPolicy(t *testing.T, kind string, gitPort, pypiPort, apiPort int, heldMethods []string) fs.FS {
	t.Helper()
	out, err := policy.DefaultTree()
	if err != nil {
		t.Fatal(err)
	}
	const p = "sandgate/config/data.json"
	var doc map[string]any
	if err := json.Unmarshal(out[p].Data, &doc); err != nil {
		t.Fatal(err)
	}
	row := map[string]any{"action": "allow", "executor": kind}
	doc["modes"].(map[string]any)["STRICT"] = map[string]any{"SAFE": row, "LOW": row, "MEDIUM": row, "HIGH": row, "CRITICAL": row}
	doc["isolation_upgrade"].(map[string]any)["modes"] = []string{}
	rule := func(name, action string, port int, host string, extra map[string]any) map[string]any {
		r := map[string]any{"name": name, "action": action, "hosts": []string{host}, "ports": []int{port},
			"cidrs": []string{"127.0.0.1/32"}, "tenants": []string{"a"}}
		for k, v := range extra {
			r[k] = v
		}
		return r
	}
	doc["egress"].(map[string]any)["rules"] = []any{
		rule("gh", "allow", gitPort, e2eGit, map[string]any{"request_preset": "github-readonly"}),
		rule("pypi", "allow", pypiPort, e2ePyPI, map[string]any{"request_preset": "pypi-install"}),
		rule("api-read", "allow", apiPort, e2eRest, map[string]any{"methods": []string{"GET"}}),
		rule("api-write", "require_approval", apiPort, e2eRest, map[string]any{"methods": heldMethods}),
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	out[p] = &fstest.MapFile{Data: b}
	return out
}

func newHTTPE2E(t *testing.T, kind string, exec executors.Executor) *httpE2E {
	t.Helper()
	return newHTTPE2EWith(t, kind, exec, httpE2EOptions{})
}

func newHTTPE2EWith(t *testing.T, kind string, exec executors.Executor, opts httpE2EOptions) *httpE2E {
	t.Helper()
	if opts.heldMethods == nil {
		opts.heldMethods = []string{"POST"}
	}
	ctx := context.Background()
	var sb [16]byte
	_, _ = rand.Read(sb[:])
	e := &httpE2E{egressE2E: &egressE2E{t: t, secret: "sg-secret-" + hex.EncodeToString(sb[:])}, logs: &bytes.Buffer{}}
	e.git, e.index, e.rest = egresstest.NewGitServer(t), egresstest.NewPackageIndex(t), &restLog{secret: e.secret}
	roots, cert := e2eCA(t, e2eGit, e2ePyPI, e2eRest)
	serve := func(h http.Handler) int {
		s := httptest.NewUnstartedServer(h)
		s.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
		s.StartTLS()
		t.Cleanup(s.Close)
		return urlPort(t, s.URL)
	}
	e.gitPort, e.pypiPort, e.apiPort = serve(e.git), serve(e.index), serve(e.rest)

	dataDir := t.TempDir()
	traversable(t, dataDir)
	var err error
	if e.audit, err = audit.Open(ctx, filepath.Join(dataDir, "audit.db"), audit.Options{}); err != nil {
		t.Fatal(err)
	}
	ws, err := workspace.New(filepath.Join(dataDir, "workspaces"), workspace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := policy.New(ctx, policy.Options{EvalTimeout: testEvalTimeout, FS: httpPolicy(t, kind, e.gitPort, e.pypiPort, e.apiPort, opts.heldMethods)})
	if err != nil {
		t.Fatal(err)
	}
	hubOpts := confirm.HubOptions{Store: e.audit}
	var resources []manager.SessionResource
	if opts.grants {
		if hubOpts.Grants, err = confirm.OpenGrants(ctx, confirm.GrantOptions{Store: e.audit, Audit: e.audit,
			Policy: confirm.EngineGrants(eng, "STRICT")}); err != nil {
			t.Fatal(err)
		}
		resources = append(resources, manager.SessionResource{Name: "grants", Durable: true, Release: func(ctx context.Context, key string) error {
			tenant, id := workspace.SplitKey(key)
			return hubOpts.Grants.EndSession(ctx, tenant, id)
		}})
	}
	if e.hub, err = confirm.NewHub(ctx, hubOpts); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: e.logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	proxy, err := egress.New(egress.Config{
		Mode: "STRICT", ApprovalTimeout: time.Minute, UpstreamRoots: roots, CADir: filepath.Join(dataDir, "egress"),
		Credentials: []egress.Credential{{Host: e2eRest, Header: "Authorization", Value: "Bearer " + e.secret,
			Methods: []string{"GET"}, PathPrefix: "/v1/"}},
	}, egress.Deps{Policy: eng, Confirm: e.hub, Audit: e.audit, Resolver: &flipResolver{}, Metrics: egress.NewMetrics(reg), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := manager.New(manager.Config{Mode: "STRICT", ApprovalTimeout: time.Minute}, manager.Deps{
		Assessor: risk.NewAssessor(nil, nil), Policy: eng, Confirm: e.hub, Executors: []executors.Executor{exec},
		Workspaces: ws, Audit: e.audit, Metrics: manager.NewMetrics(reg), Egress: proxy, Logger: logger, Resources: resources,
	})
	if err != nil {
		t.Fatal(err)
	}
	auth, err := NewAuth([]Token{NewToken("a", RoleAgent, agentTok), NewToken("p", RoleApprover, approverTok),
		NewToken("root", RoleAdmin, adminTok)})
	if err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewServer(New(Config{}, Deps{Manager: mgr, Policy: eng, Audit: e.audit, Auth: auth,
		Gatherer: reg, Approvals: e.hub, Logger: logger}))
	t.Cleanup(func() {
		e.srv.Close()
		_ = e.hub.Close(context.Background())
		_ = e.audit.Close()
	})
	return e
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// httpFetch is Python that sends a request through the proxy variables
// and prints the status and body, the proxy's refusal included.
const httpFetch = `import urllib.request, urllib.error, json
def send(method, u, data=None):
    req = urllib.request.Request(u, data=data, method=method)
    try:
        r = urllib.request.urlopen(req, timeout=90)
        return "%d %s" % (r.status, r.read().decode())
    except urllib.error.HTTPError as e:
        body = e.read().decode()
        try:
            d = json.loads(body)
            return "%d %s rule=%s header=%s" % (e.code, d["decision"], d["rule"], e.headers.get("X-Sandgate-Denied"))
        except ValueError:
            return "%d %s" % (e.code, body.strip())
    except Exception as e:
        return "failed " + repr(e)
`

func testEgressHTTPAcceptance(t *testing.T, kind string, exec executors.Executor) {
	e := newHTTPE2E(t, kind, exec)

	// github-readonly: clone and fetch work, push is refused and git shows why.
	repo := fmt.Sprintf("https://%s:%d/repo.git", e2eGit, e.gitPort)
	out := e.run("g", "bash", "git clone -q "+repo+" repo 2>&1 && cat repo/README")
	wantLine(t, out, "hello from git")
	e.git.Commit(t, "NEWS", "fetched\n")
	out = e.run("g", "bash", `cd repo && git fetch -q origin 2>&1 && git show origin/main:NEWS
git -c user.name=a -c user.email=a@e2e.test commit -q --allow-empty -m push-me
git push origin HEAD:main 2>&1; echo "push exit=$?"`)
	wantLine(t, out, "fetched")
	if !strings.Contains(out, "remote: sandgate egress: GET "+e2eGit) || !strings.Contains(out, `"rule":"gh/no-push"`) ||
		strings.Contains(out, "push exit=0") {
		t.Errorf("git push was not refused with the proxy's message:\n%s", out)
	}
	for _, r := range e.git.Served() {
		if strings.Contains(r, "receive-pack") {
			t.Errorf("the git server was asked %q", r)
		}
	}

	// pypi-install: the simple index and the wheel download; an upload is
	// refused. (The runtime image has no pip: images/runtime/packages
	// leaves it out, so urllib does what pip download does.)
	sum := sha256.Sum256(e.index.Wheel)
	index := fmt.Sprintf("https://%s:%d", e2ePyPI, e.pypiPort)
	out = e.run("p", "python", httpFetch+fmt.Sprintf(`import re, hashlib
page = urllib.request.urlopen("%[1]s/simple/%[2]s/", timeout=90).read().decode()
href = re.search(r'href="([^"#]+)#sha256=([0-9a-f]+)"', page)
whl = urllib.request.urlopen("%[1]s" + href.group(1), timeout=90).read()
print("wheel", hashlib.sha256(whl).hexdigest() == href.group(2) == "%[3]s")
print("upload", send("POST", "%[1]s/legacy/", b"--x--"))
`, index, egresstest.Package, hex.EncodeToString(sum[:])))
	wantLine(t, out, "wheel True")
	wantLine(t, out, `upload 403 deny rule=pypi header=decision=deny; rule="pypi"`)
	if slices.ContainsFunc(e.index.Served(), func(s string) bool { return strings.HasPrefix(s, "POST") }) {
		t.Errorf("the index was sent an upload: %q", e.index.Served())
	}

	// The API: GET allowed (with the credential under /v1/ only), POST
	// held, then run after approval and refused after a denial.
	api := fmt.Sprintf("https://%s:%d", e2eRest, e.apiPort)
	target := fmt.Sprintf("%s:%d", e2eRest, e.apiPort)
	out = e.run("r", "python", httpFetch+fmt.Sprintf("print('get', send('GET', '%[1]s/v1/items?page=2'))\nprint('v2', send('GET', '%[1]s/v2/items'))\nprint('delete', send('DELETE', '%[1]s/v1/items/1'))\n", api))
	wantLine(t, out, "get 200 served GET /v1/items auth=yes")
	wantLine(t, out, "v2 200 served GET /v2/items auth=no")
	wantLine(t, out, "delete 403 deny rule=api-read header=decision=deny; rule=\"api-read\"")
	done := make(chan string, 1)
	go func() {
		done <- e.run("r", "python", httpFetch+fmt.Sprintf("print('post', send('POST', '%s/v1/items', b'{}'))\n", api))
	}()
	e.decide(e.pending("r", "POST "+target+"/v1/items"), "approve", "once")
	wantLine(t, <-done, "post 200 served POST /v1/items auth=no")
	go func() {
		done <- e.run("r", "python", httpFetch+fmt.Sprintf("print('post', send('POST', '%s/v1/orders', b'{}'))\n", api))
	}()
	e.decide(e.pending("r", "POST "+target+"/v1/orders"), "deny", "")
	wantLine(t, <-done, "post 403 approval_denied rule=approval_denied header=decision=approval_denied; rule=\"approval_denied\"")

	// Pipelining: the second request on one connection is denied though
	// the first was allowed.
	out = e.run("r", "python", fmt.Sprintf(`import socket, ssl, re
s = socket.create_connection(("127.0.0.1", 3128), timeout=60)
s.sendall(b"CONNECT %[1]s HTTP/1.1\r\nHost: %[1]s\r\n\r\n")
assert s.recv(4096).startswith(b"HTTP/1.1 200")
t = ssl.create_default_context().wrap_socket(s, server_hostname="%[2]s")
t.sendall(b"GET /v1/first HTTP/1.1\r\nHost: %[1]s\r\n\r\nDELETE /v1/second HTTP/1.1\r\nHost: %[1]s\r\n\r\n")
data = b""
while data.count(b"HTTP/1.1 ") < 2 or not data.rstrip().endswith(b"}"):
    chunk = t.recv(65536)
    if not chunk:
        break
    data += chunk
print("statuses", [m.decode() for m in re.findall(rb"HTTP/1\.1 (\d{3}) ", data)])
`, target, e2eRest))
	wantLine(t, out, "statuses ['200', '403']")
	want := []string{"GET /v1/items auth=yes", "GET /v2/items auth=no", "POST /v1/items auth=no", "GET /v1/first auth=yes"}
	if got := e.rest.served(); !slices.Equal(got, want) {
		t.Errorf("the API server served\n %q\nwant only what was allowed\n %q", got, want)
	}

	// The credential is nowhere in the sandbox, the audit or the logs.
	hash := sha256.Sum256([]byte(e.secret))
	out = e.run("r", "python", fmt.Sprintf(`import os, hashlib
want = "%s"
found = []
def look(where, data):
    i = data.find(b"sg-secret-")
    while i >= 0:
        if hashlib.sha256(data[i:i+42]).hexdigest() == want:
            found.append(where)
        i = data.find(b"sg-secret-", i + 1)
for k, v in os.environ.items():
    look("env " + k, v.encode())
for pid in os.listdir("/proc"):
    if pid.isdigit():
        for f in ("environ", "cmdline"):
            try:
                look("proc", open("/proc/%%s/%%s" %% (pid, f), "rb").read())
            except OSError:
                pass
for root in ("/workspace", "/tmp", "/run", "/etc", "/root", "/home"):
    for d, _, files in os.walk(root):
        for name in files:
            p = os.path.join(d, name)
            try:
                if os.path.isfile(p) and not os.path.islink(p) and os.path.getsize(p) < (8 << 20):
                    look("file " + p, open(p, "rb").read())
            except OSError:
                pass
print("secret found:", found or "nowhere")
`, hex.EncodeToString(hash[:])))
	wantLine(t, out, "secret found: nowhere")
	for _, kind := range []string{"egress", egress.KindEgressRequest} {
		r := e.env().do("GET", "/v1/audit?kind="+kind+"&limit=500", adminTok, nil)
		if r.status != 200 || strings.Contains(string(r.raw), e.secret) {
			t.Errorf("audit of %s: %d, or it holds the secret", kind, r.status)
		}
		if kind == egress.KindEgressRequest && !strings.Contains(string(r.raw), `"path":"/v1/items"`) {
			t.Errorf("no request record of GET /v1/items: %s", r.raw)
		}
	}
	if strings.Contains(e.logs.String(), e.secret) {
		t.Error("the gateway's log holds the secret")
	}
}

func TestEgressHTTPAcceptanceSubprocess(t *testing.T) {
	t.Parallel() // each has its own gateway, servers and resolver
	requireRoot(t)
	sp, err := subprocess.New(context.Background(), subprocess.Config{RootDir: os.Getenv("SANDGATE_RUNTIME_ROOT")})
	if err != nil {
		t.Fatal(err)
	}
	if !sp.Capabilities().NetworkGrant {
		t.Fatalf("the subprocess executor cannot grant network as root (isolation %s)", sp.Isolation())
	}
	testEgressHTTPAcceptance(t, "subprocess", sp)
}

func TestEgressHTTPAcceptanceDocker(t *testing.T) {
	t.Parallel() // each has its own gateway, servers and resolver
	testEgressHTTPAcceptance(t, "docker", newDockerExecutor(t))
}

// TestEgressHTTPAcceptanceGVisor is docker's path under runsc, as
// TestEgressAcceptanceGVisor.
func TestEgressHTTPAcceptanceGVisor(t *testing.T) {
	t.Parallel() // each has its own gateway, servers and resolver
	var b [6]byte
	_, _ = rand.Read(b[:])
	g, err := gvisor.New(t.Context(), docker.Config{Instance: "api-egress-http-" + hex.EncodeToString(b[:])})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = g.Close(ctx)
	})
	if err := g.Available(t.Context()); err != nil || !g.Capabilities().NetworkGrant {
		if os.Getenv("SANDGATE_REQUIRE_GVISOR") == "1" {
			t.Fatalf("gVisor with the egress bridge required (SANDGATE_REQUIRE_GVISOR=1): available %v, network_grant %v",
				err, g.Capabilities().NetworkGrant)
		}
		t.Skipf("gVisor not usable with the egress bridge: %v", err)
	}
	testEgressHTTPAcceptance(t, "gvisor", g)
}

func TestEgressHTTPAcceptanceAIO(t *testing.T) {
	t.Parallel() // each has its own gateway, servers and resolver
	testEgressHTTPAcceptance(t, "aio", newAIOExecutor(t))
}
