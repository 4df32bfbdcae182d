package browser

import (
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/errcode"
)

// deniedFor returns the session's denial records for a host:port.
func deniedFor(recs []audit.Record, hostPort string) []audit.Record {
	var out []audit.Record
	for _, r := range recs {
		if r.Detail["host"]+":"+r.Detail["port"] == hostPort {
			out = append(out, r)
		}
	}
	return out
}

func TestSSRF(t *testing.T) {
	p := newPages(t)
	tr := newTrap(t) // on 127.0.0.1 too, but not allowlisted
	trapHP := strings.TrimPrefix(tr.URL, "http://")
	h := newHarness(t, harnessOpts{allow: []string{p.hostPort()}})

	t.Run("typed URL to a loopback host", func(t *testing.T) {
		const s = "ssrf-typed"
		_, err := h.do(s, ActionNavigate, map[string]any{"url": tr.URL + "/v1/policy"})
		d, ok := isDenied(err)
		if !ok || d.Reasons[0].Code != "browser.blocked_address" {
			t.Fatalf("err = %v (%+v)", err, d)
		}
		if recs := deniedFor(h.denials(s), trapHP); len(recs) == 0 || recs[0].Detail["layer"] != layerAction {
			t.Fatalf("denial not audited: %+v", h.denials(s))
		}
		acts := h.records(s, KindAction)
		if last := acts[len(acts)-1]; last.Outcome != audit.OutcomeDenied || last.ErrorCode != string(errcode.PolicyDenied) || last.Detail["host"] != "127.0.0.1" {
			t.Fatalf("action record = %+v", last)
		}
	})

	t.Run("redirect from an allowlisted page to a denied host", func(t *testing.T) {
		const s = "ssrf-redirect"
		_, err := h.do(s, ActionNavigate, map[string]any{"url": p.URL + "/redirect?to=" + url.QueryEscape(tr.URL+"/secret")})
		if _, ok := isDenied(err); !ok {
			t.Fatalf("err = %v, want policy_denied", err)
		}
		recs := deniedFor(h.denials(s), trapHP)
		if len(recs) == 0 || recs[0].Detail["layer"] != layerFetch || recs[0].Detail["navigation"] != "true" {
			t.Fatalf("redirect denial not audited: %+v", h.denials(s))
		}
	})

	t.Run("img pointing at a denied host", func(t *testing.T) {
		const s = "ssrf-img"
		res := h.must(s, ActionNavigate, map[string]any{"url": p.URL + "/img?src=" + url.QueryEscape(tr.URL+"/pixel.png")})
		if len(res.Blocked) != 1 || res.Blocked[0].URL != "http://"+trapHP || res.Blocked[0].ResourceType != "Image" {
			t.Fatalf("blocked = %+v", res.Blocked)
		}
		if recs := deniedFor(h.denials(s), trapHP); len(recs) != 1 || recs[0].Detail["resource_type"] != "Image" {
			t.Fatalf("img denial not audited: %+v", h.denials(s))
		}
	})

	for _, c := range []struct{ name, url, code string }{
		{"file", "file:///etc/passwd", "browser.scheme"},
		{"javascript", "javascript:alert(document.cookie)", "browser.scheme"},
		{"chrome", "chrome://version", "browser.scheme"},
		{"data", "data:text/html,<h1>hi</h1>", "browser.scheme"},
		{"localhost name", "http://localhost:" + strings.Split(trapHP, ":")[1] + "/", "browser.blocked_host"},
		{"metadata address", "http://169.254.169.254/latest/meta-data/", "browser.blocked_address"},
		{"unresolvable name", "http://no-such-host.test/", "browser.unresolved"},
		{"fully qualified localhost", "http://localhost.:" + strings.Split(trapHP, ":")[1] + "/", "browser.blocked_host"},
		{"numeric IPv4 form", "http://2130706433:" + strings.Split(trapHP, ":")[1] + "/", "browser.unresolved"},
		{"IPv6 loopback", "http://[::1]:" + strings.Split(trapHP, ":")[1] + "/", "browser.blocked_address"},
		{"IPv4-mapped IPv6 loopback", "http://[::ffff:127.0.0.1]:" + strings.Split(trapHP, ":")[1] + "/", "browser.blocked_address"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := "ssrf-" + strings.ReplaceAll(c.name, " ", "-")
			_, err := h.do(s, ActionNavigate, map[string]any{"url": c.url})
			d, ok := isDenied(err)
			if !ok {
				t.Fatalf("err = %v, want policy_denied", err)
			}
			found := false
			for _, r := range d.Reasons {
				found = found || r.Code == c.code
			}
			if !found {
				t.Fatalf("reasons = %+v, want %s", d.Reasons, c.code)
			}
			if len(h.denials(s)) == 0 {
				t.Fatal("denial not audited")
			}
		})
	}

	t.Run("page-initiated fetch and websocket to a denied host", func(t *testing.T) {
		const s = "ssrf-js"
		h.must(s, ActionNavigate, map[string]any{"url": p.URL + "/js?target=" + url.QueryEscape(trapHP)})
		h.must(s, ActionWaitFor, map[string]any{"selector": "#ws-done"})
		got := h.must(s, ActionContent, map[string]any{"selector": "#out"}).Data.(ContentResult)
		if got.Content != "fetch:blocked ws:blocked" {
			t.Fatalf("page saw %q", got.Content)
		}
		var layers []string
		for _, r := range deniedFor(h.denials(s), trapHP) {
			layers = append(layers, r.Detail["layer"])
		}
		// The fetch is paused and failed by the Fetch layer; the WebSocket,
		// which Fetch never sees, is refused by the proxy.
		slices.Sort(layers)
		if strings.Join(layers, ",") != "fetch,proxy" {
			t.Fatalf("denials by layer = %v", layers)
		}
	})

	// Nothing ever reached the trap: not the typed URL, the redirect, the
	// image, nor a DNS-free name pointing at it.
	time.Sleep(200 * time.Millisecond)
	if n := tr.hits.Load(); n != 0 {
		t.Fatalf("the denied listener received %d requests", n)
	}
}
