package api

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/risk"
	"github.com/sandgate/sandgate/workspace"
)

// The acceptance of issue 17, through the HTTP API, in every executor: a
// gateway with the real egress proxy, policy, approval hub and audit
// database, code run by a real executor whose only way out is the
// proxy, and servers the test starts on 127.0.0.1 that the proxy reaches
// under test host names (a test resolver; loopback is reachable only
// because the test's rules name it).

// Test host names; each resolves to 127.0.0.1 except flip, whose second
// answer is a private address.
const (
	e2ePlain  = "plain.e2e.test"  // allowed, plain HTTP
	e2eDenied = "denied.e2e.test" // a deny rule
	e2eAsk    = "ask.e2e.test"    // require_approval
	e2eFlip   = "flip.e2e.test"   // allowed, rebinds to 10.9.9.9
	e2eAPI    = "api.e2e.test"    // allowed, HTTPS, a bound credential
	e2eSNI    = "sni.e2e.test"    // allowed, HTTPS
)

// flipResolver answers 127.0.0.1 for every test host, and for e2eFlip
// only the first time: then 10.9.9.9 (DNS rebinding).
type flipResolver struct {
	mu    sync.Mutex
	flips int
}

func (r *flipResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if !strings.HasSuffix(host, ".e2e.test") {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	if host == e2eFlip {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.flips++; r.flips > 1 {
			return []netip.Addr{netip.MustParseAddr("10.9.9.9")}, nil
		}
	}
	return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
}

type egressE2E struct {
	t         *testing.T
	srv       *httptest.Server
	audit     *audit.SQLite
	hub       *confirm.Hub
	plainPort int
	tlsPort   int
	rawPort   int
	secret    string
}

// egressPolicy is the shipped policy with every level routed to kind (so
// each executor is exercised whatever the risk of the test's code) and
// the test's egress rules, scoped to tenant "a" (which also grants its
// sessions network).
func egressPolicy(t *testing.T, kind string, plainPort, tlsPort int) fs.FS {
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
	rule := func(name, action string, port int, hosts ...string) map[string]any {
		return map[string]any{"name": name, "action": action, "hosts": hosts, "ports": []int{port},
			"cidrs": []string{"127.0.0.1/32"}, "tenants": []string{"a"}}
	}
	doc["egress"].(map[string]any)["rules"] = []any{
		rule("e2e-deny", "deny", plainPort, e2eDenied),
		rule("e2e-plain", "allow", plainPort, e2ePlain, e2eFlip),
		rule("e2e-tls", "allow", tlsPort, e2eAPI, e2eSNI),
		rule("e2e-ask", "require_approval", plainPort, e2eAsk),
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	out[p] = &fstest.MapFile{Data: b}
	return out
}

// e2eCA signs the HTTPS test server's certificate; the gateway trusts it
// upstream. The sandbox never does: it trusts the gateway CA, which is
// all it needs for the intercepted host.
func e2eCA(t *testing.T, names ...string) (*x509.CertPool, tls.Certificate) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "e2e upstream CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return pool, tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func newEgressE2E(t *testing.T, kind string, exec executors.Executor) *egressE2E {
	t.Helper()
	ctx := context.Background()
	var sb [16]byte
	_, _ = rand.Read(sb[:])
	e := &egressE2E{t: t, secret: "sg-secret-" + hex.EncodeToString(sb[:])}

	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s%s", strings.Split(r.Host, ":")[0], r.URL.Path)
	}))
	t.Cleanup(plain.Close)
	roots, cert := e2eCA(t, e2eAPI, e2eSNI)
	secure := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+e.secret {
			http.Error(w, "no credential", http.StatusUnauthorized)
			return
		}
		io.WriteString(w, "authorized")
	}))
	secure.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	secure.StartTLS()
	t.Cleanup(secure.Close)
	e.plainPort, e.tlsPort = urlPort(t, plain.URL), urlPort(t, secure.URL)
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	e.rawPort = raw.Addr().(*net.TCPAddr).Port

	dataDir := t.TempDir()
	traversable(t, dataDir)
	if e.audit, err = audit.Open(ctx, filepath.Join(dataDir, "audit.db"), audit.Options{}); err != nil {
		t.Fatal(err)
	}
	ws, err := workspace.New(filepath.Join(dataDir, "workspaces"), workspace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := policy.New(ctx, policy.Options{EvalTimeout: testEvalTimeout, FS: egressPolicy(t, kind, e.plainPort, e.tlsPort)})
	if err != nil {
		t.Fatal(err)
	}
	if e.hub, err = confirm.NewHub(ctx, confirm.HubOptions{Store: e.audit}); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	proxy, err := egress.New(egress.Config{
		Mode: "STRICT", ApprovalTimeout: time.Minute, TLSPorts: []int{e.tlsPort}, UpstreamRoots: roots,
		CADir:       filepath.Join(dataDir, "egress"),
		Credentials: []egress.Credential{{Host: e2eAPI, Header: "Authorization", Value: "Bearer " + e.secret}},
	}, egress.Deps{Policy: eng, Confirm: e.hub, Audit: e.audit, Resolver: &flipResolver{}, Metrics: egress.NewMetrics(reg)})
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := manager.New(manager.Config{Mode: "STRICT", ApprovalTimeout: time.Minute}, manager.Deps{
		Assessor: risk.NewAssessor(nil, nil), Policy: eng, Confirm: e.hub, Executors: []executors.Executor{exec},
		Workspaces: ws, Audit: e.audit, Metrics: manager.NewMetrics(reg), Egress: proxy,
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
		Gatherer: reg, Approvals: e.hub}))
	t.Cleanup(func() {
		e.srv.Close()
		_ = e.hub.Close(context.Background())
		_ = e.audit.Close()
	})
	return e
}

func urlPort(t *testing.T, u string) int {
	t.Helper()
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(pu.Port())
	return p
}

func (e *egressE2E) env() *env { return &env{t: e.t, srv: e.srv} }

// run runs code in session and returns its stdout, failing on anything
// but a completed run.
func (e *egressE2E) run(session, lang, code string) string {
	e.t.Helper()
	path := "/v1/sessions/" + session + "/run_code"
	r := e.env().do("POST", path, agentTok, map[string]any{"code": code, "language": lang, "timeout_s": 120})
	if r.status != 200 {
		e.t.Fatalf("run_code in %s: %d %s", session, r.status, r.raw)
	}
	out, _ := r.body["stdout"].(string)
	if errOut, _ := r.body["stderr"].(string); errOut != "" {
		e.t.Logf("stderr of %s: %s", session, errOut)
	}
	return out
}

// pending waits for the pending egress approval of session for target.
func (e *egressE2E) pending(session, target string) string {
	e.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		r := e.env().do("GET", "/v1/approvals", approverTok, nil)
		list, _ := r.body["approvals"].([]any)
		for _, a := range list {
			v, _ := a.(map[string]any)
			if v["kind"] == "egress" && v["session_id"] == session && v["target"] == target {
				return v["id"].(string)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.t.Fatalf("no pending egress approval for %s %s", session, target)
	return ""
}

func (e *egressE2E) decide(id, decision, scope string) {
	e.t.Helper()
	r := e.env().do("POST", "/v1/approvals/"+id+"/decision", approverTok, map[string]any{"decision": decision, "scope": scope})
	if r.status != 200 {
		e.t.Fatalf("decision: %d %s", r.status, r.raw)
	}
}

func wantLine(t *testing.T, out, want string) {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if strings.TrimSpace(l) == want {
			return
		}
	}
	t.Errorf("output lacks the line %q:\n%s", want, out)
}

// e2eFetch is Python that fetches a URL through the proxy variables and
// prints the body or the refusal.
const e2eFetch = `import urllib.request, urllib.error
def fetch(u):
    try:
        return urllib.request.urlopen(u, timeout=90).read().decode()
    except urllib.error.HTTPError as e:
        return "refused " + str(e.code) + " " + e.read().decode().strip()
    except Exception as e:
        return "failed " + repr(e)
`

// e2eProbe is the Python half of the acceptance: raw socket, urllib,
// rebinding, SNI mismatch, the credential and the search for it.
const e2eProbe = e2eFetch + `import os, socket, ssl, re, stat
try:
    socket.create_connection(("127.0.0.1", %[1]d), timeout=3).close()
    print("raw connected")
except OSError:
    print("raw refused")
print(fetch("http://` + e2ePlain + `:%[2]d/urllib"))
print("flip1", fetch("http://` + e2eFlip + `:%[2]d/one")[:40])
print("flip2", fetch("http://` + e2eFlip + `:%[2]d/two")[:40])
s = socket.create_connection(("127.0.0.1", 3128), timeout=30)
s.sendall(b"CONNECT ` + e2eSNI + `:%[3]d HTTP/1.1\r\nHost: ` + e2eSNI + `:%[3]d\r\n\r\n")
head = s.recv(4096).decode()
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
try:
    ctx.wrap_socket(s, server_hostname="other.e2e.test").do_handshake()
    print("sni accepted")
except (ssl.SSLError, OSError):
    print("sni refused", head.split("\r\n")[0])
print("api", fetch("https://` + e2eAPI + `:%[3]d/v1"))
import hashlib
# The sandbox is given only the secret's SHA-256, never the secret: it
# looks for "sg-secret-" followed by 32 hex digits whose hash matches.
# The control is a value of the same shape this program makes and writes
# to a file, which the same search must find (so it can fail).
control = "sg-secret-" + os.urandom(16).hex()
open("/tmp/control", "w").write(control)
wants = {"secret": "%[4]s", "control": hashlib.sha256(control.encode()).hexdigest()}
def hits(data):
    out = set()
    i = data.find(b"sg-secret-")
    while i >= 0:
        h = hashlib.sha256(data[i:i+42]).hexdigest()
        out |= {k for k, v in wants.items() if v == h}
        i = data.find(b"sg-secret-", i + 1)
    return out
found = {"secret": [], "control": []}
def look(where, data):
    for k in hits(data):
        found[k].append(where)
for k, v in os.environ.items():
    look("env " + k, v.encode())
for pid in os.listdir("/proc"):
    if pid.isdigit():
        for f in ("environ", "cmdline"):
            try:
                look("proc %%s %%s" %% (pid, f), open("/proc/%%s/%%s" %% (pid, f), "rb").read())
            except OSError:
                pass
for root in ("/workspace", "/tmp", "/run", "/etc", "/root", "/home", "/var/tmp"):
    for d, _, files in os.walk(root):
        for name in files:
            p = os.path.join(d, name)
            try:
                st = os.lstat(p)
                # Regular files only: opening the bridge's socket (gVisor
                # lets a sandbox open host sockets) would connect to it.
                if stat.S_ISREG(st.st_mode) and st.st_size < (8 << 20):
                    look("file " + p, open(p, "rb").read())
            except OSError:
                pass
with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", 0) as mem:
    for line in maps:
        m = re.match(r"([0-9a-f]+)-([0-9a-f]+) r", line)
        if not m or "[vvar]" in line or "[vsyscall]" in line:
            continue
        lo, hi = int(m.group(1), 16), int(m.group(2), 16)
        try:
            mem.seek(lo)
            look("memory", mem.read(hi - lo))
        except (OSError, ValueError, OverflowError):
            pass
print("secret found:", found["secret"] or "nowhere")
print("control found in file:", "file /tmp/control" in found["control"], "in memory:", "memory" in found["control"])
`

func testEgressAcceptance(t *testing.T, kind string, exec executors.Executor) {
	e := newEgressE2E(t, kind, exec)
	plain := func(path string) string { return fmt.Sprintf("http://%s:%d/%s", e2ePlain, e.plainPort, path) }

	// curl: an allowed host, and a denied one with the proxy's error.
	out := e.run("s1", "bash", fmt.Sprintf("curl -sS --max-time 60 %s; echo\ncurl -s --max-time 60 -w ' status=%%{http_code}' http://%s:%d/; echo",
		plain("curl"), e2eDenied, e.plainPort))
	wantLine(t, out, "hello "+e2ePlain+"/curl")
	if !strings.Contains(out, "sandgate egress: "+e2eDenied) || !strings.Contains(out, "status=403") {
		t.Errorf("the denied host's answer is not the proxy's clear refusal:\n%s", out)
	}

	// Python: raw socket, urllib, rebinding, SNI, the credential.
	sum := sha256.Sum256([]byte(e.secret))
	out = e.run("s1", "python", fmt.Sprintf(e2eProbe, e.rawPort, e.plainPort, e.tlsPort, hex.EncodeToString(sum[:])))
	wantLine(t, out, "raw refused")
	wantLine(t, out, "hello "+e2ePlain+"/urllib")
	wantLine(t, out, "flip1 hello "+e2eFlip+"/one")
	if !strings.Contains(out, "flip2 refused 403") {
		t.Errorf("the rebound name was not refused:\n%s", out)
	}
	wantLine(t, out, "sni refused HTTP/1.1 200 Connection established")
	wantLine(t, out, "api authorized")
	wantLine(t, out, "secret found: nowhere")
	wantLine(t, out, "control found in file: True in memory: True")

	// Approval for the session: the second connection does not ask.
	ask := fmt.Sprintf("%s:%d", e2eAsk, e.plainPort)
	twice := e2eFetch + fmt.Sprintf("print('first', fetch('http://%[1]s/1'))\nprint('second', fetch('http://%[1]s/2'))\n", ask)
	done := make(chan string, 1)
	go func() { done <- e.run("s1", "python", twice) }()
	e.decide(e.pending("s1", ask), "approve", "session")
	out = <-done
	wantLine(t, out, "first hello "+e2eAsk+"/1")
	wantLine(t, out, "second hello "+e2eAsk+"/2")

	// Session s2 inherits nothing: it asks, and a denial refuses it.
	go func() { done <- e.run("s2", "python", e2eFetch+fmt.Sprintf("print(fetch('http://%s/3'))\n", ask)) }()
	e.decide(e.pending("s2", ask), "deny", "")
	if out = <-done; !strings.Contains(out, "refused 403") {
		t.Errorf("session s2 after a denial:\n%s", out)
	}

	// The approval page's view of a session's connections.
	r := e.env().do("GET", "/v1/approvals/connections?tenant=a&session_id=s2", approverTok, nil)
	if conns, _ := r.body["connections"].([]any); r.status != 200 || len(conns) != 1 ||
		conns[0].(map[string]any)["host"] != e2eAsk || conns[0].(map[string]any)["rule"] != "approval_denied" {
		t.Errorf("connections of s2: %d %s", r.status, r.raw)
	}
	if r := e.env().do("GET", "/v1/approvals/connections?tenant=a&session_id=s2", agentTok, nil); r.status != 403 {
		t.Errorf("an agent read the connections: %d", r.status)
	}

	// Every connection above has its audit record.
	wantRecords := map[string][]string{
		"s1": {e2ePlain + " allow", e2eDenied + " deny", e2ePlain + " allow", e2eFlip + " allow", e2eFlip + " deny",
			e2eSNI + " deny", e2eAPI + " allow", e2eAsk + " allow", e2eAsk + " allow"},
		"s2": {e2eAsk + " deny"},
	}
	for session, want := range wantRecords {
		r := e.env().do("GET", "/v1/audit?kind=egress&session_id="+session, adminTok, nil)
		recs, _ := r.body["records"].([]any)
		// Records are written as connections end, which a client may not
		// wait for: compare the sets, not the order.
		var got []string
		for _, x := range recs {
			rec := x.(map[string]any)
			detail, _ := rec["detail"].(map[string]any)
			got = append(got, fmt.Sprint(detail["host"], " ", rec["action"]))
		}
		slices.Sort(got)
		slices.Sort(want)
		if strings.Join(got, ", ") != strings.Join(want, ", ") {
			t.Errorf("session %s egress records:\n got  %v\n want %v", session, got, want)
		}
	}
}

func TestEgressAcceptanceSubprocess(t *testing.T) {
	t.Parallel() // each has its own gateway, servers and resolver
	requireRoot(t)
	sp, err := subprocess.New(context.Background(), subprocess.Config{RootDir: os.Getenv("SANDGATE_RUNTIME_ROOT")})
	if err != nil {
		t.Fatal(err)
	}
	if !sp.Capabilities().NetworkGrant {
		t.Fatalf("the subprocess executor cannot grant network as root (isolation %s)", sp.Isolation())
	}
	testEgressAcceptance(t, "subprocess", sp)
}

func TestEgressAcceptanceDocker(t *testing.T) {
	t.Parallel() // each has its own gateway, servers and resolver
	testEgressAcceptance(t, "docker", newDockerExecutor(t))
}

func TestEgressAcceptanceAIO(t *testing.T) {
	t.Parallel() // each has its own gateway, servers and resolver
	testEgressAcceptance(t, "aio", newAIOExecutor(t))
}

// TestEgressAcceptanceGVisor is docker's path under runsc, which bridges
// only when runsc may use host sockets (scripts/dockerd.sh registers it
// so). SANDGATE_REQUIRE_GVISOR=1 (make test) makes a missing runsc a
// failure.
func TestEgressAcceptanceGVisor(t *testing.T) {
	t.Parallel() // each has its own gateway, servers and resolver
	var b [6]byte
	_, _ = rand.Read(b[:])
	g, err := gvisor.New(t.Context(), docker.Config{Instance: "api-egress-" + hex.EncodeToString(b[:])})
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
	testEgressAcceptance(t, "gvisor", g)
}
