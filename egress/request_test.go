package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/confirm"
)

// apiUpstream is an HTTPS server for api.test that logs every request it
// serves ("METHOD path auth=<Authorization>"): what reached the server.
type apiUpstream struct {
	mu  sync.Mutex
	log []string
}

func (a *apiUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.log = append(a.log, fmt.Sprintf("%s %s auth=%s", r.Method, r.URL.Path, r.Header.Get("Authorization")))
	a.mu.Unlock()
	io.Copy(io.Discard, r.Body)
	fmt.Fprintf(w, "served %s %s", r.Method, r.URL.Path)
}

func (a *apiUpstream) served() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.log)
}

// apiSetup: api.test on the test TLS server with GET /v1/ allowed, POST
// held for a person and /v1/admin denied (issue 33's "GET this API, POST
// only with approval").
func apiSetup(t *testing.T, opts ...option) (*harness, *upstreams, *apiUpstream) {
	t.Helper()
	h, u := setup(t, func(u *upstreams) []rule {
		base := func(name, action string) rule {
			r := loopbackRule(name, action, []int{u.tPort}, "api.test")
			return r
		}
		get := base("api-get", "allow")
		get["methods"], get["path_prefixes"] = []string{"GET", "HEAD"}, []string{"/v1/"}
		post := base("api-post", "require_approval")
		post["methods"] = []string{"POST"}
		admin := base("api-admin", "deny")
		admin["paths"] = []string{"/v1/admin/**"}
		return []rule{get, post, admin}
	}, opts...)
	api := &apiUpstream{}
	u.tls.Config.Handler = api
	return h, u, api
}

// denied is the proxy's refusal as an agent reads it.
type denied struct {
	Error    struct{ Code, Message string }
	Decision string
	Rule     string
	Method   string
	Host     string
	Path     string
	HowToAsk string `json:"how_to_ask"`
	Proposal *struct {
		Endpoint, Method string
		Body             map[string]string
	}
}

func readDenied(t *testing.T, resp *http.Response) denied {
	t.Helper()
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var d denied
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("refusal %s %s: %s", resp.Status, resp.Header.Get("Content-Type"), body)
	}
	if err := json.Unmarshal(body, &d); err != nil {
		t.Fatalf("refusal body %q: %v", body, err)
	}
	if want := "decision=" + d.Decision + "; rule=\"" + d.Rule + "\""; resp.Header.Get(HeaderDenied) != want {
		t.Errorf("%s: %q, want %q", HeaderDenied, resp.Header.Get(HeaderDenied), want)
	}
	if !strings.Contains(d.HowToAsk, "require_approval") || !strings.HasPrefix(d.Error.Message, "sandgate egress: ") {
		t.Errorf("refusal does not tell how to ask: %+v", d)
	}
	return d
}

func TestRequestsAreDecidedOneByOne(t *testing.T) {
	t.Parallel()
	h, u, api := apiSetup(t)
	proxy := h.listen(binding("team-a", "r"))
	c := h.client(proxy)
	base := fmt.Sprintf("https://api.test:%d", u.tPort)
	target := hostPort("api.test", u.tPort)
	do := func(method, path string) *http.Response {
		var body io.Reader
		if method == http.MethodPost {
			body = strings.NewReader("payload")
		}
		req, _ := http.NewRequest(method, base+path, body)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		return resp
	}

	// GET under /v1/ goes through, with a certificate of the gateway CA.
	resp := do("GET", "/v1/items?page=2")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "served GET /v1/items" {
		t.Fatalf("GET: %s %q", resp.Status, body)
	}
	if issuer := resp.TLS.PeerCertificates[0].Issuer.CommonName; issuer != "sandgate egress CA" || resp.TLS.NegotiatedProtocol == "h2" {
		t.Errorf("inspected host served by %q over %q", issuer, resp.TLS.NegotiatedProtocol)
	}

	// A denied path: 403 from the proxy naming the rule; the server never sees it.
	d := readDenied(t, do("GET", "/v1/admin/users"))
	if d.Rule != "api-admin" || d.Decision != "deny" || d.Error.Code != "policy_denied" || d.Method != "GET" || d.Path != "/v1/admin/users" {
		t.Errorf("admin refusal %+v", d)
	}
	// Outside every matcher: denied by the rules that govern the host.
	if d := readDenied(t, do("DELETE", "/v1/items/1")); d.Rule != "api-get" {
		t.Errorf("DELETE refusal %+v", d)
	}

	// POST is held: approved, it runs; denied, it is refused.
	type result struct{ resp *http.Response }
	ch := make(chan result, 1)
	go func() { ch <- result{do("POST", "/v1/items")} }()
	v := h.pendingFor("r", "POST "+target+"/v1/items")
	if v.Kind != confirm.KindEgress || v.Tenant != "team-a" {
		t.Errorf("approval view %+v", v)
	}
	h.decide(v.ID, "approve", confirm.ScopeOnce)
	r := <-ch
	body, _ = io.ReadAll(r.resp.Body)
	r.resp.Body.Close()
	if r.resp.StatusCode != 200 || string(body) != "served POST /v1/items" {
		t.Fatalf("approved POST: %s %q", r.resp.Status, body)
	}
	go func() { ch <- result{do("POST", "/v1/other")} }()
	h.decide(h.pendingFor("r", "POST "+target+"/v1/other").ID, "deny", "")
	if d := readDenied(t, (<-ch).resp); d.Decision != "approval_denied" || d.Error.Code != "approval_denied" || d.Path != "/v1/other" {
		t.Errorf("denied POST refusal %+v", d)
	}

	// The server's log shows only what was allowed.
	if got, want := api.served(), []string{"GET /v1/items auth=", "POST /v1/items auth="}; !slices.Equal(got, want) {
		t.Errorf("the server served %q, want %q", got, want)
	}

	// One record a request, each linked to its connection's record;
	// paths without the query.
	recs := h.requestRecords("r", 5)
	conns := map[string]bool{}
	for _, rec := range h.records("r", 5) {
		conns[rec.Detail["connection_id"]] = true
	}
	var got []string
	for _, rec := range recs {
		if !conns[rec.Detail["connection_id"]] {
			t.Errorf("request record %+v is linked to no connection record", rec.Detail)
		}
		got = append(got, fmt.Sprintf("%s %s %s %s %d", rec.Detail["method"], rec.Detail["path"], rec.Action, rec.Detail["rule"], rec.HTTPStatus))
	}
	slices.Sort(got)
	want := []string{"DELETE /v1/items/1 deny api-get 403", "GET /v1/admin/users deny api-admin 403",
		"GET /v1/items allow api-get 200", "POST /v1/items allow approval.once 200", "POST /v1/other deny approval_denied 403"}
	if !slices.Equal(got, want) {
		t.Errorf("request records:\n got  %q\n want %q", got, want)
	}
}

// requestRecords waits for n request records of session.
func (h *harness) requestRecords(session string, n int) []audit.Record {
	h.t.Helper()
	var recs []audit.Record
	waitFor(h.t, func() bool {
		page, err := h.db.Query(t0(), audit.Query{SessionID: session, Kind: KindEgressRequest, Limit: 100})
		if err != nil {
			h.t.Fatal(err)
		}
		recs = page.Records
		return len(recs) >= n
	}, fmt.Sprintf("%d request records of %s", n, session))
	if len(recs) != n {
		h.t.Fatalf("%d request records, want %d", len(recs), n)
	}
	return recs
}

// TestPipelinedRequestIsDecided: two requests written at once on one
// connection; the first is allowed, the second denied, and only the
// first reaches the server.
func TestPipelinedRequestIsDecided(t *testing.T) {
	t.Parallel()
	h, u, api := apiSetup(t)
	proxy := h.listen(binding("team-a", "p"))
	target := hostPort("api.test", u.tPort)
	raw, resp := connect(t, proxy, target)
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %s", resp.Status)
	}
	roots := h.pki.pool.Clone()
	roots.AppendCertsFromPEM(h.svc.CACertPEM())
	tc := tls.Client(raw, &tls.Config{ServerName: "api.test", RootCAs: roots, NextProtos: []string{"h2", "http/1.1"}})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	if p := tc.ConnectionState().NegotiatedProtocol; p == "h2" {
		t.Fatalf("h2 was negotiated with an inspected host")
	}
	fmt.Fprintf(tc, "GET /v1/a HTTP/1.1\r\nHost: %s\r\n\r\nGET /v1/admin/x HTTP/1.1\r\nHost: %s\r\n\r\nGET /v1/b HTTP/1.1\r\nHost: %s\r\n\r\n", target, target, target)
	br := bufio.NewReader(tc)
	var statuses []int
	for range 3 {
		r, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("after %v: %v", statuses, err)
		}
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
		statuses = append(statuses, r.StatusCode)
	}
	if !slices.Equal(statuses, []int{200, 403, 200}) {
		t.Errorf("pipelined statuses %v, want [200 403 200] (a refused request without a body keeps the connection)", statuses)
	}
	if got := api.served(); !slices.Equal(got, []string{"GET /v1/a auth=", "GET /v1/b auth="}) {
		t.Errorf("the server served %q", got)
	}
}

// TestScopedCredential: a credential bound to GET /v1/ on api.test is
// attached only to matching requests; others go out without it, and the
// records never hold it.
func TestScopedCredential(t *testing.T) {
	t.Parallel()
	const secret = "Bearer scoped-s3cret"
	h, u, api := apiSetup(t, withConfig(func(c *Config) {
		c.Credentials = []Credential{{Host: "api.test", Header: "Authorization", Value: secret, Methods: []string{"GET"}, PathPrefix: "/v1/"}}
	}))
	// Allow every request here so only the credential's scope differs.
	h.reload([]rule{loopbackRule("api", "allow", []int{u.tPort}, "api.test")})
	proxy := h.listen(binding("team-a", "c"))
	base := fmt.Sprintf("https://api.test:%d", u.tPort)
	for _, tc := range []struct{ method, path string }{{"GET", "/v1/me"}, {"GET", "/v2/me"}, {"POST", "/v1/me"}, {"GET", "/v1x"}} {
		req, _ := http.NewRequest(tc.method, base+tc.path, nil)
		resp, err := h.client(proxy).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	want := []string{"GET /v1/me auth=" + secret, "GET /v2/me auth=", "POST /v1/me auth=", "GET /v1x auth="}
	if got := api.served(); !slices.Equal(got, want) {
		t.Errorf("the server saw\n %q\nwant\n %q", got, want)
	}
	all, _ := json.Marshal(append(h.records("c", 4), h.requestRecords("c", 4)...))
	if strings.Contains(string(all), "s3cret") || !strings.Contains(string(all), `"credential_header":"Authorization"`) {
		t.Errorf("audit records hold the secret or do not say a credential was attached: %s", all)
	}
}

// TestRefusalsAreStructured: a refused CONNECT and a refused plain
// request carry the JSON body and the header too, and a path with dot
// segments is refused before any rule is asked.
func TestRefusalsAreStructured(t *testing.T) {
	t.Parallel()
	h, u, api := apiSetup(t, withConfig(func(c *Config) { c.ProposalEndpoint = "/v1/sessions/{session}/proposals" }))
	h.reload([]rule{
		loopbackRule("no", "deny", []int{u.tPort}, "denied.test"),
		{"name": "ro", "action": "allow", "hosts": []string{"plain.test", "api.test"}, "ports": []int{u.plainPort, u.tPort},
			"cidrs": []string{"127.0.0.1/32"}, "request_preset": "http-readonly"},
	})
	proxy := h.listen(binding("team-a", "s"))
	_, resp := connect(t, proxy, hostPort("denied.test", u.tPort))
	if d := readDenied(t, resp); d.Rule != "no" || d.Host != "denied.test" || d.Decision != "deny" || d.Proposal == nil ||
		d.Proposal.Endpoint != "/v1/sessions/s/proposals" || d.Proposal.Body["value"] != hostPort("denied.test", u.tPort) {
		t.Errorf("CONNECT refusal %+v proposal %+v", d, d.Proposal)
	}
	req, _ := http.NewRequest("POST", fmt.Sprintf("http://plain.test:%d/form", u.plainPort), strings.NewReader("x"))
	resp, err := h.client(proxy).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if d := readDenied(t, resp); d.Rule != "ro" || d.Method != "POST" || d.Path != "/form" {
		t.Errorf("plain POST refusal %+v", d)
	}
	for _, p := range []string{"/v1/%2e%2e/admin", "/a/./b", "/v1/items/..;/admin", "/v1/items/%2e%2e;/admin", "/v1/%252e%252e/admin"} {
		raw, resp := connect(t, proxy, hostPort("api.test", u.tPort))
		if resp.StatusCode != 200 {
			t.Fatal(resp.Status)
		}
		roots := h.pki.pool.Clone()
		roots.AppendCertsFromPEM(h.svc.CACertPEM())
		tc := tls.Client(raw, &tls.Config{ServerName: "api.test", RootCAs: roots})
		fmt.Fprintf(tc, "GET %s HTTP/1.1\r\nHost: api.test:%d\r\n\r\n", p, u.tPort)
		r, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil || r.StatusCode != http.StatusBadRequest || r.Header.Get("X-Sandgate-Rule") != ruleBadPath {
			t.Errorf("%s: %v %v", p, r, err)
		}
	}
	if n := len(api.served()); n != 0 {
		t.Errorf("the server served %d requests", n)
	}
}

func t0() context.Context { return context.Background() }

// waitFor polls cond for up to 10 s.
func waitFor(t testing.TB, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLargeInspectedResponse: a response read ahead (over prefetchAbove)
// arrives whole and in order, on a connection that stays usable.
func TestLargeInspectedResponse(t *testing.T) {
	t.Parallel()
	h, u, _ := apiSetup(t)
	payload := make([]byte, 3<<20+12345)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	u.tls.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("chunked") == "" {
			w.Header().Set("Content-Length", fmt.Sprint(len(payload)))
		}
		w.Write(payload)
	})
	proxy := h.listen(binding("team-a", "big"))
	c := h.client(proxy)
	c.Transport.(*http.Transport).DisableKeepAlives = false
	for _, q := range []string{"", "?chunked=1", ""} {
		resp, err := c.Get(fmt.Sprintf("https://api.test:%d/v1/big%s", u.tPort, q))
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || !bytes.Equal(got, payload) {
			t.Fatalf("%q: %d bytes, %v", q, len(got), err)
		}
	}
	recs := h.requestRecords("big", 3)
	if recs[0].Detail["connection_id"] != recs[2].Detail["connection_id"] {
		t.Errorf("the three requests did not share one kept-alive connection: %v %v", recs[0].Detail, recs[2].Detail)
	}
}

// TestReloadThatInspectsClosesPassThrough: a tunnel opened end to end is
// closed when a reload puts a request rule on its host (its requests
// were never decided); the next connection is inspected.
func TestReloadThatInspectsClosesPassThrough(t *testing.T) {
	t.Parallel()
	h, u := setup(t, func(u *upstreams) []rule { return []rule{loopbackRule("keep", "allow", []int{u.tPort}, "keep.test")} })
	proxy := h.listen(binding("team-a", "ri"))
	c, resp := connect(t, proxy, hostPort("keep.test", u.tPort))
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	tc := tls.Client(c, &tls.Config{ServerName: "keep.test", RootCAs: h.pki.pool})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	ro := loopbackRule("keep", "allow", []int{u.tPort}, "keep.test")
	ro["methods"] = []string{"GET"}
	h.reload([]rule{ro})
	_ = tc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := tc.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("the pass-through tunnel is still open after its host became inspected (read: %v)", err)
	}
	req, _ := http.NewRequest("DELETE", fmt.Sprintf("https://keep.test:%d/x", u.tPort), nil)
	resp, err := h.client(proxy).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if d := readDenied(t, resp); d.Rule != "keep" {
		t.Errorf("refusal %+v", d)
	}
}
