package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"testing/fstest"
	"time"

	"github.com/sandgate/sandgate/egress"
	"github.com/sandgate/sandgate/policy"
)

// Hosts of the per-request scenario (issue 33): one a rule inspects
// (each request decided), one intercepted only for its credential (no
// decision per request), both served by one HTTPS server on 127.0.0.1.
const (
	inspectHost = "inspect.bench.test"
	credHost    = "cred.bench.test"
)

// egressHTTPResult is the proxy's per-request path: a 50 MB download from
// an inspected host against direct, and one small request on a keep-alive
// connection to an inspected host against the same on an intercepted
// one that decides nothing per request.
type egressHTTPResult struct {
	Download abResult `json:"download"`
	Request  abResult `json:"request"`
	// ThroughputRatio is the inspected download's throughput over direct's
	// (p50 against p50); the target is ≥ 0.5.
	ThroughputRatio float64 `json:"throughput_ratio"`
	// DecisionOverheadMS is the p50 request on the inspected connection
	// minus the p50 on the intercepted one; the target is ≤ 0.5 ms.
	DecisionOverheadMS float64 `json:"decision_overhead_ms"`
}

type egressHTTPBench struct {
	proxy, server string
	port          int
	roots         *x509.CertPool // the server's and the gateway CA
	stopFunc      func()
}

func startEgressHTTPBench(ctx context.Context) (*egressHTTPBench, error) {
	roots, cert, err := benchCertFor(inspectHost, credHost)
	if err != nil {
		return nil, err
	}
	payload := make([]byte, egressDownloadBytes)
	_, _ = rand.Read(payload)
	srvLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/small" {
			_, _ = io.WriteString(w, "ok")
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(payload)))
		_, _ = w.Write(payload)
	}), TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}, ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = srv.ServeTLS(srvLn, "", "") }()
	port := srvLn.Addr().(*net.TCPAddr).Port
	fsys, err := policy.DefaultTree()
	if err != nil {
		return nil, err
	}
	const p = "sandgate/config/data.json"
	var doc map[string]any
	if err := json.Unmarshal(fsys[p].Data, &doc); err != nil {
		return nil, err
	}
	doc["egress"].(map[string]any)["rules"] = []any{
		map[string]any{"name": "inspected", "action": "allow", "hosts": []string{inspectHost}, "methods": []string{"GET", "HEAD"},
			"ports": []int{port}, "cidrs": []string{"127.0.0.1/32"}},
		map[string]any{"name": "intercepted", "action": "allow", "hosts": []string{credHost}, "ports": []int{port}, "cidrs": []string{"127.0.0.1/32"}},
	}
	data, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	fsys[p] = &fstest.MapFile{Data: data}
	eng, err := policy.New(ctx, policy.Options{FS: fsys})
	if err != nil {
		return nil, err
	}
	caDir, err := os.MkdirTemp("", "sandgate-bench-egress-ca-")
	if err != nil {
		return nil, err
	}
	loop := []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	svc, err := egress.New(egress.Config{Mode: "STRICT", CADir: caDir, UpstreamRoots: roots,
		Credentials: []egress.Credential{{Host: credHost, Header: "X-Bench-Token", Value: "bench"}}},
		egress.Deps{Policy: eng, Resolver: egress.StaticResolver(map[string][]netip.Addr{inspectHost: loop, credHost: loop}, net.DefaultResolver)})
	if err != nil {
		os.RemoveAll(caDir)
		return nil, err
	}
	clientRoots := roots.Clone()
	clientRoots.AppendCertsFromPEM(svc.CACertPEM())
	handle := svc.Handle(egress.Binding{Tenant: "bench", SessionID: "bench", SessionKey: "bench/bench", Principal: "bench",
		RequestID: "bench", Risk: "LOW"})
	proxyLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.RemoveAll(caDir)
		return nil, err
	}
	pctx, cancel := context.WithCancel(ctx)
	go func() {
		for {
			c, err := proxyLn.Accept()
			if err != nil {
				return
			}
			go handle.ServeConn(pctx, c)
		}
	}()
	return &egressHTTPBench{proxy: proxyLn.Addr().String(), server: srvLn.Addr().String(), port: port, roots: clientRoots,
		stopFunc: func() { cancel(); proxyLn.Close(); srv.Close(); os.RemoveAll(caDir) }}, nil
}

// benchCertFor is a self-signed certificate for names.
func benchCertFor(names ...string) (*x509.CertPool, tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	c, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(c)
	return pool, tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

func (b *egressHTTPBench) client(viaProxy, keepAlive bool) *http.Client {
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: b.roots}, DisableKeepAlives: !keepAlive, DisableCompression: true,
		MaxIdleConnsPerHost: 1}
	if viaProxy {
		tr.Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: b.proxy})
	} else {
		tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, b.server)
		}
	}
	return &http.Client{Transport: tr}
}

// get fetches path from host with client and checks the size.
func (b *egressHTTPBench) get(client *http.Client, host, path string, want int64) side {
	u := fmt.Sprintf("https://%s:%d%s", host, b.port, path)
	return timed(func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, "GET", u, nil)
		res, err := client.Do(req)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		n, err := io.Copy(io.Discard, res.Body)
		if err == nil && (n != want || res.StatusCode != 200) {
			err = fmt.Errorf("%s: %d, %d bytes", u, res.StatusCode, n)
		}
		return err
	})
}

// scenarioEgressHTTP measures the per-request path in one run,
// alternating blocks.
func scenarioEgressHTTP(ctx context.Context, o opts) (egressHTTPResult, error) {
	b, err := startEgressHTTPBench(ctx)
	if err != nil {
		return egressHTTPResult{}, err
	}
	defer b.stop()
	dlInspected := b.get(b.client(true, false), inspectHost, "/", egressDownloadBytes)
	dlDirect := b.get(b.client(false, false), inspectHost, "/", egressDownloadBytes)
	reqInspected := b.get(b.client(true, true), inspectHost, "/small", 2)
	reqIntercepted := b.get(b.client(true, true), credHost, "/small", 2)
	for _, s := range []side{dlInspected, dlDirect, reqInspected, reqIntercepted} {
		if _, err := s(ctx); err != nil { // warm-up (and the keep-alive connections' set-up)
			return egressHTTPResult{}, err
		}
	}
	dl, err := ab(ctx, "egress-inspected-download", "50 MB HTTPS download from an inspected host: through the egress proxy vs direct",
		[]named{{label: "inspected via egress proxy", s: dlInspected}, {label: "direct", s: dlDirect}}, 1, o.egressN, 2)
	if err != nil {
		return egressHTTPResult{}, err
	}
	rq, err := ab(ctx, "egress-request", "one small GET on a keep-alive connection: an inspected host (decided) vs an intercepted one (not decided)",
		[]named{{label: "inspected (decided per request)", s: reqInspected}, {label: "intercepted, no decision", s: reqIntercepted}},
		1, o.egressN*50, o.block)
	if err != nil {
		return egressHTTPResult{}, err
	}
	r := egressHTTPResult{Download: dl, Request: rq}
	if p, ok := dl.side("inspected via egress proxy"); ok {
		if d, ok := dl.side("direct"); ok && p.Stats.P50 > 0 {
			r.ThroughputRatio = d.Stats.P50 / p.Stats.P50
		}
	}
	if p, ok := rq.side("inspected (decided per request)"); ok {
		if d, ok := rq.side("intercepted, no decision"); ok {
			r.DecisionOverheadMS = p.Stats.P50 - d.Stats.P50
		}
	}
	fmt.Printf("egress per request: inspected download %.0f%% of direct (target ≥ 50%%); decision overhead p50 %+.3f ms a request (target ≤ 0.5 ms)\n",
		100*r.ThroughputRatio, r.DecisionOverheadMS)
	return r, nil
}

func (b *egressHTTPBench) stop() { b.stopFunc() }

// egressHTTPTargetName is the report's line for the scenario.
const egressHTTPTargetName = "egress per request: inspected 50 MB download ≥ 50% of direct, decision overhead p50 ≤ 0.5 ms"

// egressHTTPHeadline adds the scenario's target and headline.
func egressHTTPHeadline(rep *report, add func(target), lines *[]string) {
	r := (*egressHTTPResult)(nil)
	if rep.Egress != nil {
		r = rep.Egress.HTTP
	}
	if r == nil {
		add(target{Name: egressHTTPTargetName, Missing: true, Reason: unavailable(rep, "egress")})
		return
	}
	t := target{Name: egressHTTPTargetName,
		Measured: fmt.Sprintf("%.0f%% of direct; decision %+.3f ms", 100*r.ThroughputRatio, r.DecisionOverheadMS),
		Met:      r.ThroughputRatio >= 0.5 && r.DecisionOverheadMS <= 0.5}
	if !t.Met {
		t.Reason = "below target"
	}
	add(t)
	*lines = append(*lines, fmt.Sprintf("Egress per request: a 50 MB download from an inspected host (TLS ended at the gateway CA, the request decided) at %.0f%% of direct; each request on an inspected keep-alive connection costs %+.3f ms (p50) over an intercepted one that decides nothing.", 100*r.ThroughputRatio, r.DecisionOverheadMS))
}
