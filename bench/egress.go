package main

import (
	"bufio"
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
	"io/fs"
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

// egressDownloadBytes is the egress scenario's download (issue 17: 50 MB).
const egressDownloadBytes = 50 << 20

// egressHost is the name the bench's rule allows; it resolves to the
// bench's HTTPS server on 127.0.0.1.
const egressHost = "files.bench.test"

// egressResult is the egress proxy against direct connections on loopback:
// a 50 MB HTTPS download, and the setup of a tunnel (until the client can
// send its ClientHello) against a TCP connect.
type egressResult struct {
	Download abResult `json:"download"`
	Setup    abResult `json:"setup"`
	// ThroughputRatio is the proxy's download throughput over direct's
	// (p50 against p50); the target is ≥ 0.8.
	ThroughputRatio float64 `json:"throughput_ratio"`
	// SetupOverheadMS is the p50 tunnel setup minus the p50 connect; the
	// target is ≤ 2 ms.
	SetupOverheadMS float64 `json:"setup_overhead_ms"`
	// HTTP is the per-request path (issue 33), nil when it failed.
	HTTP *egressHTTPResult `json:"http,omitempty"`
}

// egressBench is the proxy served the way an executor's bridge serves it
// (a loopback listener handing each connection to a run's Handle), in
// this process, with the shipped policy plus one allow rule.
type egressBench struct {
	proxy    string // the proxy's address
	server   string // the HTTPS server's 127.0.0.1:port
	port     int
	roots    *x509.CertPool
	stopFunc func()
}

func startEgressBench(ctx context.Context) (*egressBench, error) {
	roots, cert, err := benchCert(egressHost)
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
		w.Header().Set("Content-Length", strconv.Itoa(len(payload)))
		_, _ = w.Write(payload)
	}), TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
		// The setup side hangs up before TLS on purpose.
		ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = srv.ServeTLS(srvLn, "", "") }()
	port := srvLn.Addr().(*net.TCPAddr).Port
	fsys, err := egressPolicyFS(port)
	if err != nil {
		return nil, err
	}
	eng, err := policy.New(ctx, policy.Options{FS: fsys})
	if err != nil {
		return nil, err
	}
	svc, err := egress.New(egress.Config{Mode: "STRICT", TLSPorts: []int{port}}, egress.Deps{
		Policy:   eng,
		Resolver: egress.StaticResolver(map[string][]netip.Addr{egressHost: {netip.MustParseAddr("127.0.0.1")}}, net.DefaultResolver),
	})
	if err != nil {
		return nil, err
	}
	handle := svc.Handle(egress.Binding{Tenant: "bench", SessionID: "bench", SessionKey: "bench/bench", Principal: "bench",
		RequestID: "bench", Risk: "LOW"})
	proxyLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
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
	return &egressBench{proxy: proxyLn.Addr().String(), server: srvLn.Addr().String(), port: port, roots: roots,
		stopFunc: func() { cancel(); proxyLn.Close(); srv.Close() }}, nil
}

func (b *egressBench) stop() { b.stopFunc() }

// egressPolicyFS is the shipped policy tree with one rule allowing the
// bench host on the server's port (and naming loopback, which it is).
func egressPolicyFS(port int) (fs.FS, error) {
	out, err := policy.DefaultTree()
	if err != nil {
		return nil, err
	}
	const p = "sandgate/config/data.json"
	var doc map[string]any
	if err := json.Unmarshal(out[p].Data, &doc); err != nil {
		return nil, err
	}
	doc["egress"].(map[string]any)["rules"] = []any{map[string]any{"name": "bench", "action": "allow",
		"hosts": []string{egressHost}, "ports": []int{port}, "cidrs": []string{"127.0.0.1/32"}}}
	data, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	out[p] = &fstest.MapFile{Data: data}
	return out, nil
}

func benchCert(host string) (*x509.CertPool, tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
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

// download fetches the payload over HTTPS, through the proxy or directly
// (the name then dialled as the server's address), on a new connection.
func (b *egressBench) download(viaProxy bool) side {
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: b.roots}, DisableKeepAlives: true, DisableCompression: true}
	if viaProxy {
		tr.Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: b.proxy})
	} else {
		tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, b.server)
		}
	}
	client := &http.Client{Transport: tr}
	u := fmt.Sprintf("https://%s:%d/", egressHost, b.port)
	return timed(func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, "GET", u, nil)
		res, err := client.Do(req)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		n, err := io.Copy(io.Discard, res.Body)
		if err == nil && n != egressDownloadBytes {
			err = fmt.Errorf("downloaded %d bytes", n)
		}
		return err
	})
}

// setup times what a client waits for before it can start TLS: a TCP
// connect directly, or a connect to the proxy, CONNECT and its 200 (the
// resolution, the policy decision and the proxy's own dial included).
func (b *egressBench) setup(viaProxy bool) side {
	return timed(func(ctx context.Context) error {
		var d net.Dialer
		if !viaProxy {
			c, err := d.DialContext(ctx, "tcp", b.server)
			if err == nil {
				c.Close()
			}
			return err
		}
		c, err := d.DialContext(ctx, "tcp", b.proxy)
		if err != nil {
			return err
		}
		defer c.Close()
		target := net.JoinHostPort(egressHost, strconv.Itoa(b.port))
		if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target); err != nil {
			return err
		}
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err
		}
		if res.StatusCode != 200 {
			return fmt.Errorf("CONNECT: %s", res.Status)
		}
		return nil
	})
}

// scenarioEgress measures the proxy against direct connections in one
// run, alternating blocks.
func scenarioEgress(ctx context.Context, o opts) (egressResult, error) {
	b, err := startEgressBench(ctx)
	if err != nil {
		return egressResult{}, err
	}
	defer b.stop()
	for _, s := range []side{b.download(true), b.download(false), b.setup(true), b.setup(false)} {
		if _, err := s(ctx); err != nil { // warm-up, and a check that both paths work
			return egressResult{}, err
		}
	}
	dl, err := ab(ctx, "egress-download", "50 MB HTTPS download: through the egress proxy vs direct",
		[]named{{label: "via egress proxy", s: b.download(true)}, {label: "direct", s: b.download(false)}}, 1, o.egressN, 2)
	if err != nil {
		return egressResult{}, err
	}
	su, err := ab(ctx, "egress-setup", "tunnel setup: CONNECT through the egress proxy vs TCP connect",
		[]named{{label: "CONNECT via egress proxy", s: b.setup(true)}, {label: "TCP connect", s: b.setup(false)}}, 1, o.egressN*20, o.block)
	if err != nil {
		return egressResult{}, err
	}
	r := egressResult{Download: dl, Setup: su}
	if p, ok := dl.side("via egress proxy"); ok {
		if d, ok := dl.side("direct"); ok && p.Stats.P50 > 0 {
			r.ThroughputRatio = d.Stats.P50 / p.Stats.P50
		}
	}
	if p, ok := su.side("CONNECT via egress proxy"); ok {
		if d, ok := su.side("TCP connect"); ok {
			r.SetupOverheadMS = p.Stats.P50 - d.Stats.P50
		}
	}
	fmt.Printf("egress: download throughput %.0f%% of direct (target ≥ 80%%); CONNECT setup p50 +%.2f ms over a TCP connect (target ≤ +2 ms)\n",
		100*r.ThroughputRatio, r.SetupOverheadMS)
	b.stop() // before the per-request scenario's server takes the loopback
	if h, err := scenarioEgressHTTP(ctx, o); err != nil {
		fmt.Fprintf(os.Stderr, "bench: egress per request unavailable: %v\n", err)
	} else {
		r.HTTP = &h
	}
	return r, nil
}
