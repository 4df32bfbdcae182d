package egress

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/confirm"
)

// upstreams are the test's servers on 127.0.0.1: a plain HTTP one and an
// HTTPS one whose certificate names every test host.
type upstreams struct {
	plain, tls       *httptest.Server
	plainPort, tPort int
	hits             atomic.Int64
}

func newUpstreams(t *testing.T, pki *testPKI) *upstreams {
	u := &upstreams{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		fmt.Fprintf(w, "hello from %s", r.Host)
	})
	u.plain = httptest.NewServer(h)
	t.Cleanup(u.plain.Close)
	u.tls = pki.tlsServer(t, h, "api.test", "ask.test", "flip.test", "sni.test", "other.test", "keep.test", "drop.test")
	u.plainPort, u.tPort = portOf(t, u.plain), portOf(t, u.tls)
	return u
}

// loopbackRule allows hosts on the test servers' ports and names the
// loopback address they resolve to.
func loopbackRule(name, action string, ports []int, hosts ...string) rule {
	return rule{"name": name, "action": action, "hosts": hosts, "ports": ports, "cidrs": []string{"127.0.0.1/32"}}
}

// setup builds the harness around two upstream servers; the test host
// names resolve to 127.0.0.1.
func setup(t *testing.T, rules func(u *upstreams) []rule, opts ...option) (*harness, *upstreams) {
	t.Helper()
	pki := newPKI(t)
	u := newUpstreams(t, pki)
	opts = append([]option{func(h *harness) { h.pki = pki; h.cfg.UpstreamRoots = pki.pool; h.cfg.TLSPorts = []int{u.tPort} }}, opts...)
	h := newHarness(t, rules(u), opts...)
	for _, host := range []string{"api.test", "plain.test", "ask.test", "sni.test", "other.test", "keep.test", "drop.test", "glob.test", "denied.test"} {
		h.res.set(host, "127.0.0.1")
	}
	return h, u
}

func TestDecisions(t *testing.T) {
	t.Parallel()
	h, u := setup(t, func(u *upstreams) []rule {
		return []rule{
			loopbackRule("plain", "allow", []int{u.plainPort}, "plain.test"),
			loopbackRule("api", "allow", []int{u.tPort}, "api.test"),
			{"name": "globbed", "action": "allow", "hosts": []string{"*.test"}, "ports": []int{u.tPort}, "cidrs": []string{"127.0.0.1/32"}},
			loopbackRule("no", "deny", []int{u.tPort}, "denied.test"),
		}
	})
	proxy := h.listen(binding("team-a", "s1"))
	tests := []struct {
		name, url  string
		wantStatus int
		wantErr    string
		wantRule   string
		wantAction string
	}{
		{"plain http allowed", fmt.Sprintf("http://plain.test:%d/x", u.plainPort), 200, "", "plain", "allow"},
		{"https allowed end to end", fmt.Sprintf("https://api.test:%d/x", u.tPort), 200, "", "api", "allow"},
		{"deny rule", fmt.Sprintf("https://denied.test:%d/", u.tPort), 0, "Forbidden", "no", "deny"},
		{"loopback through a glob is refused", fmt.Sprintf("https://glob.test:%d/", u.tPort), 0, "Forbidden", "egress.blocked_address", "deny"},
		{"unknown host", fmt.Sprintf("https://nowhere.test:%d/", u.tPort), 0, "Forbidden", "egress.unresolved", "deny"},
		{"plain http to a port no rule names", fmt.Sprintf("http://plain.test:%d/x", u.tPort), 403, "", "egress.blocked_address", "deny"},
	}
	for i, tc := range tests {
		status, body, err := h.get(proxy, tc.url)
		if tc.wantErr != "" {
			wantRefused(t, err, tc.wantErr)
		} else if err != nil || status != tc.wantStatus {
			t.Fatalf("%s: status %d err %v, want %d", tc.name, status, err, tc.wantStatus)
		}
		if status == 200 && !strings.HasPrefix(body, "hello from") {
			t.Errorf("%s: body %q", tc.name, body)
		}
		if status == 403 && !strings.Contains(body, "sandgate egress:") {
			t.Errorf("%s: refusal body %q is not the proxy's", tc.name, body)
		}
		rec := h.records("s1", i+1)[0]
		if rec.Detail["rule"] != tc.wantRule || rec.Action != tc.wantAction || rec.Kind != KindEgress {
			t.Errorf("%s: record rule %q action %q, want %q %q", tc.name, rec.Detail["rule"], rec.Action, tc.wantRule, tc.wantAction)
		}
		if tc.wantAction == "allow" && (rec.Detail["bytes_down"] == "0" || rec.Outcome != audit.OutcomeOK || rec.Detail["address"] == "") {
			t.Errorf("%s: allowed record %+v lacks bytes, outcome or address", tc.name, rec)
		}
	}
	if n := u.hits.Load(); n != 2 {
		t.Errorf("upstreams served %d requests, want 2 (only the allowed ones)", n)
	}
	allowed, denied := testutil.ToFloat64(h.met.conns.WithLabelValues("allow", "ok")), testutil.ToFloat64(h.met.conns.WithLabelValues("deny", "denied"))
	if allowed != 2 || denied != 4 || testutil.ToFloat64(h.met.bytes.WithLabelValues("down")) == 0 {
		t.Errorf("metrics: %v allowed, %v denied, want 2 and 4 with bytes counted", allowed, denied)
	}
}

func TestApprovals(t *testing.T) {
	t.Parallel()
	h, u := setup(t, func(u *upstreams) []rule {
		return []rule{loopbackRule("ask", "require_approval", []int{u.tPort}, "ask.test")}
	})
	target := hostPort("ask.test", u.tPort)
	url := "https://" + target + "/"
	type result struct {
		status int
		err    error
	}
	getAsync := func(proxy string) chan result {
		ch := make(chan result, 1)
		go func() { s, _, err := h.get(proxy, url); ch <- result{s, err} }()
		return ch
	}
	proxyA := h.listen(binding("team-a", "a"))
	proxyB := h.listen(binding("team-a", "b"))
	proxyOtherTenant := h.listen(binding("team-b", "a"))

	// Session a: approved for the session; the second connection does not ask.
	ch := getAsync(proxyA)
	v := h.pendingFor("a", target)
	if v.Tenant != "team-a" || v.Code != "" || v.RequestID != "req-a" {
		t.Errorf("approval view %+v", v)
	}
	h.decide(v.ID, "approve", confirm.ScopeSession)
	if r := <-ch; r.err != nil || r.status != 200 {
		t.Fatalf("approved connection: %d %v", r.status, r.err)
	}
	if s, _, err := h.get(proxyA, url); err != nil || s != 200 {
		t.Fatalf("second connection of the approved session: %d %v", s, err)
	}
	// A tunnel's record is written when the proxy sees it close, so the
	// two records may be in either order: the first is the one that
	// carries the approval, the second reuses the session's answer.
	recs := h.records("a", 2)
	if recs[0].Approval != nil {
		recs[0], recs[1] = recs[1], recs[0]
	}
	for _, r := range recs {
		if r.Detail["rule"] != ruleSessionApproval {
			t.Errorf("record rule %q, want %q", r.Detail["rule"], ruleSessionApproval)
		}
	}
	if recs[0].Approval != nil {
		t.Errorf("no record without an approval, want the second to reuse the session's answer: %+v", recs)
	}
	if recs[1].Approval == nil || recs[1].Approval.Status != confirm.StatusApproved || recs[1].Approval.DecidedBy != "alice" {
		t.Errorf("first record approval %+v", recs[1].Approval)
	}

	// Session b, and session a of another tenant, inherit nothing; b is denied.
	for _, p := range []struct{ proxy, tenant, session string }{{proxyB, "team-a", "b"}, {proxyOtherTenant, "team-b", "a"}} {
		ch = getAsync(p.proxy)
		var v confirm.View
		deadline := time.Now().Add(10 * time.Second)
		for v.ID == "" && time.Now().Before(deadline) {
			for _, pv := range h.hub.Pending() {
				if pv.Tenant == p.tenant && pv.SessionID == p.session && pv.Target == target {
					v = pv
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
		if v.ID == "" {
			t.Fatalf("session %s connected without asking", p.session)
		}
		h.decide(v.ID, "deny", "")
		r := <-ch
		wantRefused(t, r.err, "Forbidden")
	}
	if rec := h.records("b", 1)[0]; rec.Detail["rule"] != "approval_denied" || rec.Action != "deny" {
		t.Errorf("denied record %+v", rec)
	}

	// Once: the next connection asks again.
	proxyC := h.listen(binding("team-a", "c"))
	ch = getAsync(proxyC)
	h.decide(h.pendingFor("c", target).ID, "approve", confirm.ScopeOnce)
	if r := <-ch; r.err != nil {
		t.Fatal(r.err)
	}
	ch = getAsync(proxyC)
	h.decide(h.pendingFor("c", target).ID, "deny", "")
	wantRefused(t, (<-ch).err, "Forbidden")
}

func TestApprovalTimeoutIsADeny(t *testing.T) {
	t.Parallel()
	h, u := setup(t, func(u *upstreams) []rule {
		return []rule{loopbackRule("ask", "require_approval", []int{u.tPort}, "ask.test")}
	}, withConfig(func(c *Config) { c.ApprovalTimeout = 200 * time.Millisecond }))
	proxy := h.listen(binding("team-a", "t"))
	_, _, err := h.get(proxy, fmt.Sprintf("https://ask.test:%d/", u.tPort))
	wantRefused(t, err, "Forbidden")
	rec := h.records("t", 1)[0]
	if rec.Approval == nil || rec.Approval.Status != confirm.StatusTimeout || rec.Detail["rule"] != "approval_timeout" {
		t.Errorf("record %+v approval %+v", rec, rec.Approval)
	}
}

func TestRebindingIsRefused(t *testing.T) {
	t.Parallel()
	h, u := setup(t, func(u *upstreams) []rule {
		return []rule{loopbackRule("flip", "allow", []int{u.tPort}, "flip.test")}
	})
	h.res.set("flip.test", "127.0.0.1", "10.1.2.3")
	proxy := h.listen(binding("team-a", "r"))
	url := fmt.Sprintf("https://flip.test:%d/", u.tPort)
	if s, _, err := h.get(proxy, url); err != nil || s != 200 {
		t.Fatalf("first answer (the named loopback address): %d %v", s, err)
	}
	_, _, err := h.get(proxy, url)
	wantRefused(t, err, "Forbidden")
	// The first tunnel's record is written when the proxy sees it close,
	// which may come after the refusal's: the refusal is found by its rule.
	recs := h.records("r", 2)
	if rec := onlyRule(t, recs, "egress.blocked_address"); rec.Detail["address"] != "" || rec.Action != "deny" {
		t.Errorf("rebound record %+v", rec)
	}
	if rec := onlyRule(t, recs, "flip"); rec.Detail["address"] == "" || rec.Action != "allow" {
		t.Errorf("first record %+v", rec)
	}
}

// onlyRule returns the one record of recs whose rule is rule, and fails
// the test when there is not exactly one.
func onlyRule(t *testing.T, recs []audit.Record, rule string) audit.Record {
	t.Helper()
	var found []audit.Record
	for _, r := range recs {
		if r.Detail["rule"] == rule {
			found = append(found, r)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d records with rule %q among %+v, want 1", len(found), rule, recs)
	}
	return found[0]
}

// connect opens a raw CONNECT tunnel and returns the connection after the
// proxy's answer.
func connect(t *testing.T, proxy, target string) (net.Conn, *http.Response) {
	t.Helper()
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	return c, resp
}

func TestServerNameMustMatch(t *testing.T) {
	t.Parallel()
	h, u := setup(t, func(u *upstreams) []rule {
		return []rule{loopbackRule("sni", "allow", []int{u.tPort}, "sni.test", "other.test")}
	})
	proxy := h.listen(binding("team-a", "n"))
	c, resp := connect(t, proxy, hostPort("sni.test", u.tPort))
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %s", resp.Status)
	}
	tc := tls.Client(c, &tls.Config{ServerName: "other.test", RootCAs: h.pki.pool})
	_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err == nil {
		t.Fatal("a ClientHello for other.test went through a CONNECT to sni.test")
	}
	if rec := h.records("n", 1)[0]; rec.Detail["rule"] != ruleSNIMismatch || rec.Action != "deny" {
		t.Errorf("record %+v", rec)
	}
	if u.hits.Load() != 0 {
		t.Error("the upstream served a request")
	}
}

func TestHostHeaderMustMatch(t *testing.T) {
	t.Parallel()
	h, u := setup(t, func(u *upstreams) []rule {
		return []rule{loopbackRule("plain", "allow", []int{u.plainPort}, "plain.test")}
	})
	proxy := h.listen(binding("team-a", "m"))
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET http://plain.test:%d/ HTTP/1.1\r\nHost: evil.test:%d\r\n\r\n", u.plainPort, u.plainPort)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 400 || !strings.Contains(string(body), "does not match") {
		t.Fatalf("%s %q", resp.Status, body)
	}
	if h.records("m", 1)[0].Detail["rule"] != ruleBadRequest || u.hits.Load() != 0 {
		t.Error("a mismatched Host reached the server or was not audited")
	}
}

func TestCredentialIsAttachedOnlyForItsHost(t *testing.T) {
	t.Parallel()
	const secret = "Bearer s3cret-token-for-api"
	var sawAuth atomic.Value
	h, u := setup(t, func(u *upstreams) []rule {
		return []rule{loopbackRule("api", "allow", []int{u.tPort}, "api.test", "other.test")}
	}, withConfig(func(c *Config) {
		c.Credentials = []Credential{{Host: "api.test", Header: "Authorization", Value: secret}}
	}))
	u.tls.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sawAuth.Store(r.Header.Get("Authorization"))
		if r.Header.Get("Authorization") != secret {
			http.Error(w, "no credential", http.StatusUnauthorized)
			return
		}
		io.WriteString(w, "authorized")
	})
	proxy := h.listen(binding("team-a", "k"))
	req, _ := http.NewRequest("GET", fmt.Sprintf("https://api.test:%d/v1", u.tPort), nil)
	req.Header.Set("Authorization", "Bearer what-the-sandbox-made-up")
	resp, err := h.client(proxy).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "authorized" {
		t.Fatalf("%s %q", resp.Status, body)
	}
	if issuer := resp.TLS.PeerCertificates[0].Issuer.CommonName; issuer != "sandgate egress CA" {
		t.Errorf("api.test was not intercepted: certificate issued by %q", issuer)
	}
	resp, err = h.client(proxy).Get(fmt.Sprintf("https://other.test:%d/", u.tPort))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if issuer := resp.TLS.PeerCertificates[0].Issuer.CommonName; issuer != "test upstream CA" {
		t.Errorf("other.test was intercepted (issuer %q); only hosts with a credential may be", issuer)
	}
	if resp.StatusCode != http.StatusUnauthorized || sawAuth.Load() != "" {
		t.Errorf("other.test got a credential: %s %q", resp.Status, sawAuth.Load())
	}
	recs, _ := json.Marshal(h.records("k", 2))
	if strings.Contains(string(recs), "s3cret") {
		t.Error("the secret is in an audit record")
	}
	if pem := string(h.svc.CACertPEM()); !strings.Contains(pem, "BEGIN CERTIFICATE") || strings.Contains(pem, "PRIVATE") {
		t.Errorf("CACertPEM %q", pem)
	}
}

func TestTunnelCap(t *testing.T) {
	t.Parallel()
	h, u := setup(t, func(u *upstreams) []rule {
		return []rule{loopbackRule("api", "allow", []int{u.tPort}, "api.test")}
	}, withConfig(func(c *Config) { c.MaxTunnelsPerSession = 1 }))
	b := binding("team-a", "cap")
	proxy := h.listen(b)
	target := hostPort("api.test", u.tPort)
	c, resp := connect(t, proxy, target)
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	tc := tls.Client(c, &tls.Config{ServerName: "api.test", RootCAs: h.pki.pool})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	if _, second := connect(t, proxy, target); second.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("second tunnel: %s, want 429", second.Status)
	}
	if rec := h.records("cap", 1)[0]; rec.Detail["rule"] != ruleTunnelCap {
		t.Errorf("record %+v", rec)
	}
	tc.Close()
	// The slot is free again once the first tunnel ends.
	deadline := time.Now().Add(10 * time.Second)
	for h.svc.OpenTunnels(b.SessionKey) != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if s, _, err := h.get(proxy, "https://"+target+"/"); err != nil || s != 200 {
		t.Fatalf("after the first tunnel closed: %d %v", s, err)
	}
}

func TestReloadClosesForbiddenTunnels(t *testing.T) {
	t.Parallel()
	rules := func(u *upstreams) []rule {
		return []rule{loopbackRule("keep", "allow", []int{u.tPort}, "keep.test"), loopbackRule("drop", "allow", []int{u.tPort}, "drop.test")}
	}
	h, u := setup(t, rules)
	proxy := h.listen(binding("team-a", "rl"))
	open := func(host string) *tls.Conn {
		c, resp := connect(t, proxy, hostPort(host, u.tPort))
		if resp.StatusCode != 200 {
			t.Fatal(resp.Status)
		}
		tc := tls.Client(c, &tls.Config{ServerName: host, RootCAs: h.pki.pool})
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		return tc
	}
	keep, drop := open("keep.test"), open("drop.test")
	h.reload([]rule{loopbackRule("keep", "allow", []int{u.tPort}, "keep.test")})
	_ = drop.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := drop.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("the tunnel the new policy forbids is still open (read: %v)", err)
	}
	// The allowed tunnel still carries a request.
	_ = keep.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(keep, "GET / HTTP/1.1\r\nHost: keep.test\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(keep), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the still-allowed tunnel: %v %v", resp, err)
	}
	keep.Close()
	var closedBy string
	for _, r := range h.records("rl", 2) {
		if r.Detail["host"] == "drop.test" {
			closedBy = r.Detail["closed_by"]
		}
	}
	if closedBy != "egress.policy_reload: egress.blocked_address" {
		t.Errorf("closed_by %q", closedBy)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

func TestMalformedRequests(t *testing.T) {
	t.Parallel()
	h, _ := setup(t, func(*upstreams) []rule { return nil })
	proxy := h.listen(binding("team-a", "bad"))
	for _, raw := range []string{
		"GET /relative HTTP/1.1\r\nHost: x\r\n\r\n",
		"CONNECT nohostport HTTP/1.1\r\n\r\n",
		"GET https://api.test/ HTTP/1.1\r\nHost: api.test\r\n\r\n",
		"CONNECT api.test:80 HTTP/1.1\r\nHost: api.test:80\r\n\r\n",
	} {
		c, err := net.Dial("tcp", proxy)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, raw)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		c.Close()
		if err != nil || resp.StatusCode != 400 {
			t.Errorf("%q: %v %v, want 400", raw, resp, err)
		}
	}
	h.records("bad", 4)
}

// TestWaitingConnectionsCountTowardTheCap: a session cannot flood the
// approvers; a connection waiting for a person holds its slot.
func TestWaitingConnectionsCountTowardTheCap(t *testing.T) {
	t.Parallel()
	h, u := setup(t, func(u *upstreams) []rule {
		return []rule{loopbackRule("ask", "require_approval", []int{u.tPort}, "ask.test")}
	}, withConfig(func(c *Config) { c.MaxTunnelsPerSession = 1 }))
	proxy := h.listen(binding("team-a", "flood"))
	target := hostPort("ask.test", u.tPort)
	first := make(chan error, 1)
	go func() { _, _, err := h.get(proxy, "https://"+target+"/"); first <- err }()
	v := h.pendingFor("flood", target)
	if _, resp := connect(t, proxy, target); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a second connection while one waits: %s, want 429", resp.Status)
	}
	if n := len(h.hub.Pending()); n != 1 {
		t.Errorf("%d approvals pending, want 1", n)
	}
	h.decide(v.ID, "approve", confirm.ScopeOnce)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
}
