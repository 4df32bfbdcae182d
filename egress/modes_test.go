package egress

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/policy"
)

// fetch is GET or POST of u through proxy, with the response's and the
// CONNECT answer's Sandgate-Warning headers.
func (h *harness) fetch(proxy, method, u string) (status int, warnings, connectWarnings []string, err error) {
	c := h.client(proxy)
	var mu sync.Mutex
	c.Transport.(*http.Transport).OnProxyConnectResponse = func(_ context.Context, _ *url.URL, _ *http.Request, res *http.Response) error {
		mu.Lock()
		defer mu.Unlock()
		connectWarnings = res.Header.Values(WarningHeader)
		return nil
	}
	req, _ := http.NewRequest(method, u, strings.NewReader(""))
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	mu.Lock()
	defer mu.Unlock()
	return resp.StatusCode, resp.Header.Values(WarningHeader), connectWarnings, nil
}

// TestEnforcementModesThroughTheProxy (issue 32, enforcement modes on
// egress): a dryrun deny rule lets the connection through and its audit
// record shows the would-be denial, telling the agent nothing; a warn
// hold lets it through without a person and the CONNECT's answer says
// so; a warn HTTP rule lets an inspected request through with
// Sandgate-Warning on its response and the would-be denial on the
// request's record; a warn rule on a plain HTTP request warns on its
// response; a host no rule allows is still refused.
func TestEnforcementModesThroughTheProxy(t *testing.T) {
	t.Parallel()
	h, u := setup(t, func(u *upstreams) []rule {
		dry := rule{"name": "no-api", "action": "deny", "hosts": []string{"api.test"}, "ports": []int{u.tPort}, "enforcement": "dryrun"}
		ask := loopbackRule("ask", "require_approval", []int{u.tPort}, "ask.test")
		ask["enforcement"] = "warn"
		ro := loopbackRule("ro", "allow", []int{u.tPort}, "other.test")
		ro["methods"], ro["enforcement"] = []string{"GET"}, "warn"
		noPlain := rule{"name": "no-plain", "action": "deny", "hosts": []string{"plain.test"}, "ports": []int{u.plainPort}, "enforcement": "warn"}
		return []rule{loopbackRule("api", "allow", []int{u.tPort}, "api.test"), dry, ask, ro,
			loopbackRule("plain", "allow", []int{u.plainPort}, "plain.test"), noPlain}
	})
	proxy := h.listen(binding("team-a", "s1"))
	tport := ":" + strconv.Itoa(u.tPort)

	// dryrun: through, recorded, not told.
	status, warns, cwarns, err := h.fetch(proxy, http.MethodGet, "https://api.test"+tport+"/")
	if err != nil || status != http.StatusOK || len(warns)+len(cwarns) != 0 {
		t.Fatalf("dryrun deny rule: %d %v %v %v, want 200 without warnings", status, warns, cwarns, err)
	}
	rec := h.records("s1", 1)[0]
	if rec.Action != policy.ActionAllow || rec.WouldBe != policy.ActionDeny || rec.Detail["would_be_rule"] != "no-api" ||
		rec.Detail["rule"] != "api" || !hasReason(rec, "egress.denied", policy.EnforcementDryrun) {
		t.Fatalf("dryrun record: %s by %s, would be %q by %q, reasons %+v", rec.Action, rec.Detail["rule"], rec.WouldBe,
			rec.Detail["would_be_rule"], rec.Reasons)
	}

	// warn on a hold: through without a person, told at CONNECT.
	status, _, cwarns, err = h.fetch(proxy, http.MethodGet, "https://ask.test"+tport+"/")
	if err != nil || status != http.StatusOK || len(cwarns) != 1 || !strings.HasPrefix(cwarns[0], `egress.approval; "ask.test:`) {
		t.Fatalf("warn hold: %d %v %v", status, cwarns, err)
	}
	if len(h.hub.Pending()) != 0 {
		t.Fatal("a warn hold asked a person")
	}
	if rec := h.records("s1", 2)[0]; rec.Action != policy.ActionAllow || rec.WouldBe != policy.ActionRequireApproval {
		t.Fatalf("warn hold record: %s, would be %q", rec.Action, rec.WouldBe)
	}

	// warn on an inspected request: through, told on the response.
	status, warns, _, err = h.fetch(proxy, http.MethodPost, "https://other.test"+tport+"/v1/items")
	if err != nil || status != http.StatusOK || len(warns) != 1 || !strings.HasPrefix(warns[0], "egress.request_not_allowed; ") {
		t.Fatalf("warn request rule: %d %v %v", status, warns, err)
	}
	rr := h.requestRecords("s1", 1)[0]
	if rr.Action != policy.ActionAllow || rr.WouldBe != policy.ActionDeny || rr.Detail["would_be_rule"] != "ro" ||
		!hasReason(rr, "egress.request_not_allowed", policy.EnforcementWarn) {
		t.Fatalf("request record: %s would be %q by %q, reasons %+v", rr.Action, rr.WouldBe, rr.Detail["would_be_rule"], rr.Reasons)
	}
	if status, warns, _, err = h.fetch(proxy, http.MethodGet, "https://other.test"+tport+"/v1/items"); err != nil ||
		status != http.StatusOK || len(warns) != 0 {
		t.Fatalf("an allowed GET: %d %v %v", status, warns, err)
	}

	// warn on a plain request: told on the response.
	status, warns, _, err = h.fetch(proxy, http.MethodGet, "http://plain.test:"+strconv.Itoa(u.plainPort)+"/")
	if err != nil || status != http.StatusOK || len(warns) != 1 || !strings.Contains(warns[0], `denied by rule \"no-plain\"`) {
		t.Fatalf("warn plain request: %d %v %v", status, warns, err)
	}

	// Enforced as ever where no mode applies.
	if status, _, _, err := h.fetch(proxy, http.MethodGet, "https://sni.test"+tport+"/"); err == nil && status == http.StatusOK {
		t.Fatal("a host no rule allows was let through")
	}
}

func hasReason(rec audit.Record, code, enforcement string) bool {
	for _, r := range rec.Reasons {
		if r.Code == code && r.Enforcement == enforcement {
			return true
		}
	}
	return false
}
