package executortest

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
)

// TestProxy is a small real HTTP proxy (CONNECT, and absolute-form plain
// HTTP) that implements executors.Egress for the conformance suite and
// for backends' own tests. It dials only the test servers registered with
// Route (host:port → a 127.0.0.1 address), so a sandbox that reaches it
// can reach nothing else, and it records what it served. It never
// intercepts TLS: CONNECT is a tunnel, and a CA set with CA is only
// reported by CACertPEM, as the gateway's proxy reports its own.
type TestProxy struct {
	mu     sync.Mutex
	routes map[string]string
	ca     []byte
	seen   []string // "CONNECT host:port" or "GET http://…" per request
	active sync.WaitGroup
}

// Interface guard.
var _ executors.Egress = (*TestProxy)(nil)

// NewTestProxy returns a proxy with no routes: every request is refused
// with 403.
func NewTestProxy() *TestProxy { return &TestProxy{routes: map[string]string{}} }

// Route makes requests for hostport (as the client names it) go to addr,
// a listener the test started on loopback.
func (p *TestProxy) Route(hostport, addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.routes[hostport] = addr
}

// SetCA sets what CACertPEM returns.
func (p *TestProxy) SetCA(pemBytes []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ca = pemBytes
}

// CACertPEM implements executors.Egress.
func (p *TestProxy) CACertPEM() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ca
}

// Seen lists the requests served so far, in order.
func (p *TestProxy) Seen() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.seen...)
}

func (p *TestProxy) route(hostport, seen string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen = append(p.seen, seen)
	addr, ok := p.routes[hostport]
	return addr, ok
}

// ServeConn implements executors.Egress: one request per connection (a
// plain HTTP request is answered with Connection: close).
func (p *TestProxy) ServeConn(ctx context.Context, conn net.Conn) {
	p.active.Add(1)
	defer p.active.Done()
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(conn)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	_ = conn.SetReadDeadline(time.Time{})
	if req.Method == http.MethodConnect {
		p.tunnel(conn, br, req)
		return
	}
	p.forward(conn, req)
}

func (p *TestProxy) tunnel(conn net.Conn, br *bufio.Reader, req *http.Request) {
	addr, ok := p.route(req.Host, "CONNECT "+req.Host)
	if !ok {
		_, _ = io.WriteString(conn, "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
		return
	}
	up, err := net.Dial("tcp", addr)
	if err != nil {
		_, _ = io.WriteString(conn, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
		return
	}
	defer up.Close()
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		_, _ = br.WriteTo(up)
		if tc, ok := up.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		close(done)
	}()
	_, _ = io.Copy(conn, up)
	conn.Close()
	<-done
}

func (p *TestProxy) forward(conn net.Conn, req *http.Request) {
	hostport := req.URL.Host
	if req.URL.Port() == "" {
		hostport += ":80"
	}
	addr, ok := p.route(hostport, req.Method+" "+req.URL.String())
	if !ok || req.URL.Scheme != "http" {
		_, _ = io.WriteString(conn, "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		return
	}
	up, err := net.Dial("tcp", addr)
	if err != nil {
		_, _ = io.WriteString(conn, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		return
	}
	defer up.Close()
	req.Close = true
	req.Header.Del("Proxy-Connection")
	if err := req.Write(up); err != nil {
		return
	}
	_, _ = io.Copy(conn, up)
}

// Wait waits for every ServeConn in progress to return.
func (p *TestProxy) Wait() { p.active.Wait() }

// TestCA is a certificate authority for tests: its certificate (PEM) and
// a tls.Config for a server named host, signed by it.
type TestCA struct {
	CertPEM []byte
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
}

// NewTestCA makes a fresh CA.
func NewTestCA(t testing.TB) *TestCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sandgate test CA " + Nonce()},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &TestCA{CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), cert: cert, key: key}
}

// ServerTLS returns a server configuration for host, signed by ca.
func (ca *TestCA) ServerTLS(t testing.TB, host string) *tls.Config {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
}

// EgressTarget is a test web server on 127.0.0.1 that answers every path
// with "egress-ok <path>" and remembers the paths it was asked for.
type EgressTarget struct {
	Server *httptest.Server
	mu     sync.Mutex
	paths  []string
}

// NewEgressTarget starts the server, over TLS with tlsCfg when it is not
// nil, and stops it at the test's end.
func NewEgressTarget(t testing.TB, tlsCfg *tls.Config) *EgressTarget {
	t.Helper()
	et := &EgressTarget{}
	et.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		et.mu.Lock()
		et.paths = append(et.paths, r.URL.Path)
		et.mu.Unlock()
		_, _ = io.WriteString(w, "egress-ok "+r.URL.Path+"\n")
	}))
	if tlsCfg != nil {
		et.Server.TLS = tlsCfg
		et.Server.StartTLS()
	} else {
		et.Server.Start()
	}
	t.Cleanup(et.Server.Close)
	return et
}

// Addr is the server's 127.0.0.1:port.
func (et *EgressTarget) Addr() string { return et.Server.Listener.Addr().String() }

// Asked reports whether some request asked for a path containing s.
func (et *EgressTarget) Asked(s string) bool {
	et.mu.Lock()
	defer et.mu.Unlock()
	for _, p := range et.paths {
		if strings.Contains(p, s) {
			return true
		}
	}
	return false
}
