package browser

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/internal/policytest"
	"github.com/sandgate/sandgate/policy"
)

// flipDNS answers from a table that the test changes between lookups.
type flipDNS struct {
	mu  sync.Mutex
	ans map[string][]netip.Addr
}

func (f *flipDNS) set(host string, addrs ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var as []netip.Addr
	for _, a := range addrs {
		as = append(as, netip.MustParseAddr(a))
	}
	f.ans[host] = as
}

func (f *flipDNS) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if a, ok := f.ans[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func newTestGuard(t *testing.T, dns Resolver, allow ...string) (*guard, *audit.Memory) {
	t.Helper()
	eng, err := policy.New(context.Background(), policy.Options{EvalTimeout: policytest.EvalTimeout})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{AllowHosts: allow}
	cfg.applyDefaults()
	st := audit.NewMemory()
	return newGuard(&cfg, eng, dns, newRecorder(st, slog.New(slog.DiscardHandler)), "unit", BackendExternal), st
}

// DNS rebinding: the name resolves to a public address when the page's
// request is decided, and to loopback a moment later. The proxy connects to
// the address that was decided on, never to a second answer; and once that
// decision is gone, a fresh decision sees loopback and denies.
func TestProxyDialsTheCheckedAddress(t *testing.T) {
	dns := &flipDNS{ans: map[string][]netip.Addr{}}
	g, st := newTestGuard(t, dns)
	p, err := newEgressProxy(g, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()

	dns.set("rebind.test", "203.0.113.7")
	tg, _ := targetOf("https://rebind.test/")
	if v := g.decide(t.Context(), tg, layerFetch); !v.decision.Allowed() {
		t.Fatalf("public address denied: %+v", v.decision)
	}
	dns.set("rebind.test", "127.0.0.1")
	addrs, ok := p.allowed(t.Context(), target{scheme: "https", host: "rebind.test", port: 443})
	if !ok || len(addrs) != 1 || addrs[0].String() != "203.0.113.7" {
		t.Fatalf("proxy would dial %v (allowed %v), want the checked 203.0.113.7", addrs, ok)
	}

	// The decision expires; the proxy decides again and sees loopback.
	g.mu.Lock()
	clear(g.tickets)
	clear(g.lookups)
	g.mu.Unlock()
	if addrs, ok := p.allowed(t.Context(), target{scheme: "https", host: "rebind.test", port: 443}); ok {
		t.Fatalf("rebound name allowed, would dial %v", addrs)
	}
	g.rec.flush(t.Context())
	page, _ := st.Query(t.Context(), audit.Query{Kind: KindRequest})
	var proxyDenied bool
	for _, r := range page.Records {
		proxyDenied = proxyDenied || (r.Detail["layer"] == layerProxy && r.Action == policy.ActionDeny && r.Detail["resolved"] == "127.0.0.1")
	}
	if !proxyDenied {
		t.Fatalf("the proxy's denial is not audited: %+v", page.Records)
	}
}

// The proxy serves plain http and CONNECT only with its credentials,
// connects to the pinned loopback address of an allowlisted name, and
// refuses what the policy denies.
func TestProxyAuthAndForwarding(t *testing.T) {
	pg := newPages(t)
	tr := newTrap(t)
	_, port, _ := net.SplitHostPort(pg.hostPort())
	dns := &flipDNS{ans: map[string][]netip.Addr{}}
	dns.set("pages.test", "127.0.0.1")
	g, _ := newTestGuard(t, dns, "pages.test:"+port)
	p, err := newEgressProxy(g, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	proxyURL, _ := url.Parse("http://" + p.addr())

	client := func(auth bool) *http.Client {
		pu := *proxyURL
		if auth {
			pu.User = url.UserPassword(proxyUser, p.pass)
		}
		return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&pu)}}
	}
	res, err := client(false).Get("http://pages.test:" + port + "/submit?name=x")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusProxyAuthRequired {
		t.Fatalf("without credentials: %d", res.StatusCode)
	}
	res, err = client(true).Get("http://pages.test:" + port + "/submit?name=x")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(body), "Hello, x!") {
		t.Fatalf("proxied: %d %q", res.StatusCode, body)
	}
	res, err = client(true).Get(tr.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden {
		t.Fatalf("denied host: %d", res.StatusCode)
	}

	// CONNECT, then HTTP inside the tunnel.
	c, err := net.Dial("tcp", p.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT pages.test:%s HTTP/1.1\r\nHost: pages.test:%s\r\nProxy-Authorization: %s\r\n\r\n", port, port, p.auth)
	br := bufio.NewReader(c)
	cres, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || cres.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", cres, err)
	}
	fmt.Fprintf(c, "GET /submit?name=tunnel HTTP/1.1\r\nHost: pages.test\r\nConnection: close\r\n\r\n")
	ires, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(ires.Body)
	if !strings.Contains(string(body), "Hello, tunnel!") {
		t.Fatalf("through the tunnel: %q", body)
	}
	if tr.hits.Load() != 0 {
		t.Fatal("the denied listener was reached")
	}
}

// The proxy's credentials are hop-by-hop: the server behind it never sees
// them.
func TestProxyCredentialsStayWithTheProxy(t *testing.T) {
	seen := make(chan http.Header, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
	}))
	defer up.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(up.URL, "http://"))
	g, _ := newTestGuard(t, &flipDNS{ans: map[string][]netip.Addr{}}, "127.0.0.1:"+port)
	p, err := newEgressProxy(g, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	pu, _ := url.Parse("http://" + p.addr())
	pu.User = url.UserPassword(proxyUser, p.pass)
	res, err := (&http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}).Get(up.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	h := <-seen
	for _, k := range []string{"Proxy-Authorization", "Proxy-Connection", "X-Forwarded-For"} {
		if h.Get(k) != "" {
			t.Errorf("upstream saw %s: %q", k, h.Get(k))
		}
	}
}
