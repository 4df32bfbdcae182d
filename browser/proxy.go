package browser

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"sync"
	"time"
)

// proxyUser is the user name of the proxy's basic credentials; the password
// is a random secret per browser.
const proxyUser = "sandgate"

// proxyDialTimeout bounds one upstream connection attempt.
const proxyDialTimeout = 10 * time.Second

// egressProxy is the HTTP proxy an external Chromium is pinned to with
// --proxy-server (and --proxy-bypass-list=<-loopback>, so loopback goes
// through it too). It is the one place the external browser's network
// traffic leaves from, and the place where the SSRF check is enforced on
// the address actually dialled:
//
//   - Every CONNECT (https, wss and, in Chromium, ws) and every plain http
//     request names a host and port. The proxy takes the addresses the
//     Fetch layer decided on a moment ago for that host and port (a
//     ticket), or else resolves the host itself and asks the policy, and
//     then dials one of exactly those addresses. A name that resolves to a
//     public address for the check and to 127.0.0.1 for the connection
//     (DNS rebinding) cannot pass: there is no second lookup.
//   - Requests Fetch interception never sees (WebSocket handshakes, which
//     Chromium tunnels through CONNECT) are decided and audited here.
//   - The proxy wants Proxy-Authorization with a secret that only this
//     browser's CDP session knows (answered through Fetch.authRequired).
//     Chromium's own background services (time, component updates, sign-in)
//     run in network contexts that never get the credentials, so they never
//     leave the host; and nothing else on the host can use the proxy as an
//     open door to the network.
type egressProxy struct {
	guard *guard
	log   *slog.Logger
	ln    net.Listener
	srv   *http.Server
	auth  string // expected Proxy-Authorization value
	pass  string
	rp    *httputil.ReverseProxy
	tr    *http.Transport

	mu      sync.Mutex
	tunnels map[net.Conn]struct{}
	closed  bool
}

func newEgressProxy(g *guard, log *slog.Logger) (*egressProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	var b [24]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	pass := hex.EncodeToString(b[:])
	p := &egressProxy{
		guard: g, log: log, ln: ln, pass: pass,
		auth:    "Basic " + base64.StdEncoding.EncodeToString([]byte(proxyUser+":"+pass)),
		tunnels: make(map[net.Conn]struct{}),
	}
	p.tr = &http.Transport{
		Proxy:                 nil, // never the gateway's environment proxy
		DialContext:           p.dialPinned,
		MaxIdleConnsPerHost:   8,
		IdleConnTimeout:       60 * time.Second,
		ResponseHeaderTimeout: 60 * time.Second,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite:   func(*httputil.ProxyRequest) {}, // the outgoing request is prepared in serveHTTP
		Transport: p.tr,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			log.Debug("browser proxy: upstream failed", "err", err)
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	p.srv = &http.Server{
		Handler:           p,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// addr is the proxy's listening address, for --proxy-server.
func (p *egressProxy) addr() string { return p.ln.Addr().String() }

// close stops the listener and cuts every open tunnel.
func (p *egressProxy) close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.tunnels {
		_ = c.Close()
	}
	p.mu.Unlock()
	_ = p.srv.Close()
	p.tr.CloseIdleConnections()
}

func (p *egressProxy) authorized(r *http.Request) bool {
	got := r.Header.Get("Proxy-Authorization")
	return subtle.ConstantTimeCompare([]byte(got), []byte(p.auth)) == 1
}

func (p *egressProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !p.authorized(r) {
		w.Header().Set("Proxy-Authenticate", `Basic realm="sandgate"`)
		w.WriteHeader(http.StatusProxyAuthRequired)
		return
	}
	if r.Method == http.MethodConnect {
		p.serveConnect(w, r)
		return
	}
	p.serveHTTP(w, r)
}

// allowed decides host:port for a connection, reusing a Fetch-layer ticket
// when there is one, and returns the addresses to dial.
func (p *egressProxy) allowed(ctx context.Context, t target) ([]netip.Addr, bool) {
	if addrs, ok := p.guard.ticketFor(t.hostPort()); ok {
		return addrs, true
	}
	v := p.guard.decide(ctx, t, layerProxy)
	return v.addrs, v.decision.Allowed()
}

func (p *egressProxy) serveConnect(w http.ResponseWriter, r *http.Request) {
	host, port, err := net.SplitHostPort(r.Host)
	n, perr := strconv.Atoi(port)
	if err != nil || perr != nil || n < 1 || n > 65535 {
		http.Error(w, "bad CONNECT target", http.StatusBadRequest)
		return
	}
	t := target{raw: "https://" + r.Host + "/", scheme: "https", host: normHost(host), port: n, method: http.MethodConnect}
	addrs, ok := p.allowed(r.Context(), t)
	if !ok {
		http.Error(w, "blocked by the sandgate browser policy", http.StatusForbidden)
		return
	}
	up, err := dialAny(r.Context(), addrs, n)
	if err != nil {
		http.Error(w, "upstream connection failed", http.StatusBadGateway)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		_ = up.Close()
		http.Error(w, "hijack unsupported", http.StatusInternalServerError)
		return
	}
	down, buf, err := hj.Hijack()
	if err != nil {
		_ = up.Close()
		return
	}
	if !p.track(down, up) {
		return
	}
	defer p.untrack(down, up)
	if _, err := io.WriteString(down, "HTTP/1.1 200 Connection Established\r\n\r\n"); err != nil {
		return
	}
	// Bytes the client sent after the CONNECT head (a TLS ClientHello that
	// raced the answer) are in buf.
	if n := buf.Reader.Buffered(); n > 0 {
		head, _ := buf.Reader.Peek(n)
		if _, err := up.Write(head); err != nil {
			return
		}
	}
	splice(down, up)
}

func (p *egressProxy) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if !r.URL.IsAbs() || r.URL.Scheme != "http" {
		http.Error(w, "only absolute http URLs and CONNECT are proxied", http.StatusBadRequest)
		return
	}
	t, ok := targetOf(r.URL.String())
	if !ok || t.host == "" {
		http.Error(w, "bad request target", http.StatusBadRequest)
		return
	}
	t.method = r.Method
	if r.Header.Get("Upgrade") != "" {
		t.scheme = "ws"
		t.raw = "ws" + r.URL.String()[len("http"):]
	}
	addrs, allowed := p.allowed(r.Context(), t)
	if !allowed {
		http.Error(w, "blocked by the sandgate browser policy", http.StatusForbidden)
		return
	}
	out := r.Clone(context.WithValue(r.Context(), pinnedKey{}, pinned{addrs: addrs, port: t.port}))
	out.RequestURI = ""
	out.Host = r.Host
	p.rp.ServeHTTP(w, out)
}

type pinnedKey struct{}

// pinned carries the checked addresses of one proxied request down to the
// Transport's dialer.
type pinned struct {
	addrs []netip.Addr
	port  int
}

// dialPinned is the Transport's only dialer: it connects to the addresses
// the decision was made on, never to a fresh lookup of the name. Pooled
// connections are keyed by the URL's host and port, so a reused connection
// is one that was dialled, for that same name, to a checked address.
func (p *egressProxy) dialPinned(ctx context.Context, _, _ string) (net.Conn, error) {
	pin, ok := ctx.Value(pinnedKey{}).(pinned)
	if !ok {
		return nil, errors.New("browser proxy: dial without a decision")
	}
	return dialAny(ctx, pin.addrs, pin.port)
}

func dialAny(ctx context.Context, addrs []netip.Addr, port int) (net.Conn, error) {
	if len(addrs) == 0 {
		return nil, errors.New("browser proxy: no address to dial")
	}
	d := net.Dialer{Timeout: proxyDialTimeout}
	var errs []error
	for _, a := range addrs {
		c, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

func (p *egressProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range cs {
			_ = c.Close()
		}
		return false
	}
	for _, c := range cs {
		p.tunnels[c] = struct{}{}
	}
	return true
}

func (p *egressProxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		_ = c.Close()
		delete(p.tunnels, c)
	}
}

// splice copies both ways until either side ends, then closes both: a
// tunnel is over when one end hangs up (half-open tunnels would only pin
// goroutines).
func splice(a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	_ = a.Close()
	_ = b.Close()
	<-done
}
