package egress

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/confirm"
	"github.com/sandgate/sandgate/internal/policytest"
	"github.com/sandgate/sandgate/policy"
)

// rule is one entry of data.sandgate.config.egress.rules.
type rule map[string]any

// policyFS is the shipped policy tree with the egress rules replaced, in
// a MapFS the test can edit and reload.
func policyFS(t testing.TB, rules []rule) fstest.MapFS {
	t.Helper()
	out, err := policy.DefaultTree()
	if err != nil {
		t.Fatal(err)
	}
	setRules(t, out, rules)
	return out
}

func setRules(t testing.TB, fsys fstest.MapFS, rules []rule) {
	t.Helper()
	const p = "sandgate/config/data.json"
	var doc map[string]any
	if err := json.Unmarshal(fsys[p].Data, &doc); err != nil {
		t.Fatal(err)
	}
	doc["egress"].(map[string]any)["rules"] = rules
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	fsys[p] = &fstest.MapFile{Data: b}
}

// testResolver maps test host names to addresses; an entry with several
// answers gives them in turn and then keeps the last (a flipping name).
type testResolver struct {
	mu      sync.Mutex
	answers map[string][][]netip.Addr
	lookups map[string]int
}

func newResolver() *testResolver {
	return &testResolver{answers: map[string][][]netip.Addr{}, lookups: map[string]int{}}
}

func (r *testResolver) set(host string, answers ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var seq [][]netip.Addr
	for _, a := range answers {
		seq = append(seq, []netip.Addr{netip.MustParseAddr(a)})
	}
	r.answers[host] = seq
}

func (r *testResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	seq, ok := r.answers[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	i := min(r.lookups[host], len(seq)-1)
	r.lookups[host]++
	return seq[i], nil
}

// testPKI is a CA for the test's upstream HTTPS servers.
type testPKI struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newPKI(t testing.TB) *testPKI {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test upstream CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testPKI{cert: cert, key: key, pool: pool}
}

func (p *testPKI) serverCert(t testing.TB, names ...string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: names[0]},
		DNSNames: names, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.cert, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// tlsServer is an HTTPS server on 127.0.0.1 with a certificate for names.
func (p *testPKI) tlsServer(t testing.TB, h http.Handler, names ...string) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{p.serverCert(t, names...)}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func portOf(t testing.TB, srv *httptest.Server) int {
	t.Helper()
	u, _ := url.Parse(srv.URL)
	p, _ := strconv.Atoi(u.Port())
	return p
}

// harness is one proxy service with a real policy engine, a real approval
// hub and a real audit database.
type harness struct {
	t    testing.TB
	fsys fstest.MapFS
	eng  *policy.Engine
	db   *audit.SQLite
	hub  *confirm.Hub
	res  *testResolver
	pki  *testPKI
	svc  *Service
	met  *Metrics
	cfg  Config
}

type option func(*harness)

func withConfig(fn func(*Config)) option { return func(h *harness) { fn(&h.cfg) } }

func newHarness(t testing.TB, rules []rule, opts ...option) *harness {
	t.Helper()
	ctx := context.Background()
	h := &harness{t: t, fsys: policyFS(t, rules), res: newResolver(), pki: newPKI(t)}
	h.cfg = Config{Mode: "STRICT", ApprovalTimeout: 10 * time.Second, CADir: filepath.Join(t.TempDir(), "ca"),
		UpstreamRoots: h.pki.pool, GatewayAddresses: []netip.Addr{netip.MustParseAddr("198.51.100.7")}}
	for _, o := range opts {
		o(h)
	}
	var err error
	if h.eng, err = policy.New(ctx, policy.Options{EvalTimeout: policytest.EvalTimeout, FS: h.fsys}); err != nil {
		t.Fatal(err)
	}
	if h.db, err = audit.Open(ctx, filepath.Join(t.TempDir(), "audit.db"), audit.Options{}); err != nil {
		t.Fatal(err)
	}
	if h.hub, err = confirm.NewHub(ctx, confirm.HubOptions{Store: h.db}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = h.hub.Close(context.Background())
		_ = h.db.Close()
	})
	h.met = NewMetrics(prometheus.NewRegistry())
	if h.svc, err = New(h.cfg, Deps{Policy: h.eng, Confirm: h.hub, Audit: h.db, Resolver: h.res, Metrics: h.met}); err != nil {
		t.Fatal(err)
	}
	h.eng.OnReload(func(string) { h.svc.Reloaded(context.Background()) })
	return h
}

func (h *harness) reload(rules []rule) {
	h.t.Helper()
	setRules(h.t, h.fsys, rules)
	if _, err := h.eng.Reload(context.Background()); err != nil {
		h.t.Fatal(err)
	}
}

func binding(tenant, session string) Binding {
	return Binding{Tenant: tenant, SessionID: session, SessionKey: tenant + "/" + session, Principal: "agent",
		RequestID: "req-" + session, Risk: "LOW"}
}

// listen serves b's Handle on a loopback port: what an executor's bridge
// does inside the sandbox. It returns the proxy's address.
func (h *harness) listen(b Binding) string {
	h.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	handle := h.svc.Handle(b)
	var wg sync.WaitGroup
	h.t.Cleanup(func() { cancel(); ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); handle.ServeConn(ctx, c) }()
		}
	}()
	return ln.Addr().String()
}

// client is an HTTP client using proxy, trusting the test upstream CA and
// the gateway CA.
func (h *harness) client(proxy string) *http.Client {
	roots := h.pki.pool.Clone()
	if pem := h.svc.CACertPEM(); pem != nil {
		roots.AppendCertsFromPEM(pem)
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		Proxy:             http.ProxyURL(&url.URL{Scheme: "http", Host: proxy}),
		TLSClientConfig:   &tls.Config{RootCAs: roots},
		DisableKeepAlives: true,
	}}
}

// get fetches u through proxy and returns the status and body, or the
// error text (a refused CONNECT is a transport error).
func (h *harness) get(proxy, u string) (int, string, error) {
	resp, err := h.client(proxy).Get(u)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// records waits for n egress records of session and returns them, newest
// first.
func (h *harness) records(session string, n int) []audit.Record {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		page, err := h.db.Query(context.Background(), audit.Query{SessionID: session, Kind: KindEgress, Limit: 100})
		if err != nil {
			h.t.Fatal(err)
		}
		if len(page.Records) >= n || time.Now().After(deadline) {
			if len(page.Records) != n {
				h.t.Fatalf("session %s has %d egress records, want %d", session, len(page.Records), n)
			}
			return page.Records
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// pendingFor waits for a pending egress approval of session for target.
func (h *harness) pendingFor(session, target string) confirm.View {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, v := range h.hub.Pending() {
			if v.SessionID == session && v.Target == target && v.Kind == confirm.KindEgress {
				return v
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	h.t.Fatalf("no pending egress approval for %s %s", session, target)
	return confirm.View{}
}

func (h *harness) decide(id, decision, scope string) {
	h.t.Helper()
	if _, err := h.hub.Decide(context.Background(), id, confirm.Approver{Name: "alice", Role: "approver"},
		confirm.Decision{Decision: decision, Scope: scope}); err != nil {
		h.t.Fatal(err)
	}
}

func hostPort(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }

func wantRefused(t testing.TB, err error, contains string) {
	t.Helper()
	if err == nil {
		t.Fatalf("the request went through, want it refused (%s)", contains)
	}
	if !strings.Contains(err.Error(), contains) {
		t.Fatalf("error %q does not mention %q", err, contains)
	}
}
