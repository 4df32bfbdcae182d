package egresstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// UpstreamCA is a throwaway CA for loopback upstream servers, with one
// server certificate for the test host names. A gateway in this test
// process trusts it through Pool; one started as a process through
// SSL_CERT_FILE naming a file with PEM.
type UpstreamCA struct {
	Pool *x509.CertPool
	PEM  []byte
	Cert tls.Certificate
}

// NewUpstreamCA makes the CA and a certificate for names, valid an hour.
func NewUpstreamCA(t testing.TB, names ...string) *UpstreamCA {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "egresstest upstream CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return &UpstreamCA{Pool: pool, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		Cert: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}}
}

// ServeTLS serves h over HTTPS on 127.0.0.1 with the CA's certificate
// until the test ends, and returns its port.
func (ca *UpstreamCA) ServeTLS(t testing.TB, h http.Handler) int {
	t.Helper()
	s := httptest.NewUnstartedServer(h)
	s.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Cert}}
	s.StartTLS()
	t.Cleanup(s.Close)
	u, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// RequestLog is an API server that answers every request with what it
// saw and logs it: method, path and whether the header Secret names came
// with the value Secret (never the value itself).
type RequestLog struct {
	Header, Secret string

	mu  sync.Mutex
	log []string
}

func (l *RequestLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	auth := "no"
	if l.Header != "" && r.Header.Get(l.Header) == l.Secret {
		auth = "yes"
	}
	line := fmt.Sprintf("%s %s auth=%s", r.Method, r.URL.Path, auth)
	l.mu.Lock()
	l.log = append(l.log, line)
	l.mu.Unlock()
	_, _ = io.Copy(io.Discard, r.Body)
	_, _ = io.WriteString(w, "served "+line)
}

// Served is what reached the server, in order.
func (l *RequestLog) Served() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.log)
}
