package policy

import (
	"context"
	"encoding/json"
	"testing"
	"time"
)

// browserModesTree adds an administrator's own browser rule: forms.example is off
// limits. With enforcement modes in data it is rolled out in dry run
// everywhere, and tenant "acme" is in warn mode.
var browserModesTree = map[string]string{
	"sandgate/browser/forms.rego": `package sandgate.browser

deny_reasons contains reason("browser.forms", "forms.example is off limits") if input.request.host == "forms.example"
`,
	"sandgate/config/enforcement/data.json": `{"rules": {"browser.forms": "dryrun", "browser.blocked_address": "dryrun"}, "tenants": {"acme": "warn"}}`,
}

func formsInput(tenant string) BrowserInput {
	in := browserInput("https://forms.example/submit?token=s3cret", "https", "forms.example", 443, "93.184.216.34")
	in.Tenant = tenant
	return in
}

// TestBrowserEnforcementModes: a dryrun rule lets the request through and
// records the would-be denial without telling the agent; a warn tenant is
// let through and told; the checks that protect the gateway host stay
// enforced even when the data says dryrun; and the decision log's result
// carries would_be and each reason's mode.
func TestBrowserEnforcementModes(t *testing.T) {
	srv := newOPAServer(t)
	cfg, _ := json.Marshal(map[string]any{
		"services":      map[string]any{"ctl": map[string]any{"url": srv.srv.URL}},
		"decision_logs": map[string]any{"service": "ctl", "reporting": map[string]any{"min_delay_seconds": 1, "max_delay_seconds": 2}},
	})
	e := newEngine(t, Options{FS: treeWith(t, browserModesTree), OPAConfig: cfg})
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	ctx := context.Background()
	loopback := browserInput("http://x.test/", "http", "x.test", 80, "127.0.0.1")
	loopback.Tenant = "acme"
	cases := []struct {
		name     string
		in       BrowserInput
		action   string
		wouldBe  string
		mode     string // the enforcement of the first reason
		warnings int
	}{
		{"dryrun rule", formsInput("other"), ActionAllow, ActionDeny, EnforcementDryrun, 0},
		{"warn tenant", formsInput("acme"), ActionAllow, ActionDeny, EnforcementWarn, 1},
		{"host protection enforced", loopback, ActionDeny, "", "", 0},
		{"no reason", browserInput("https://example.com/", "https", "example.com", 443, "93.184.216.34"), ActionAllow, "", "", 0},
	}
	var ids []string
	for _, c := range cases {
		d := e.DecideBrowser(ctx, c.in)
		ids = append(ids, d.DecisionID)
		if d.Action != c.action || d.WouldBe != c.wouldBe || len(d.Warnings()) != c.warnings {
			t.Fatalf("%s: %s (would be %q, warnings %v) %+v", c.name, d.Action, d.WouldBe, d.Warnings(), d.Reasons)
		}
		if len(d.Reasons) > 0 && d.Reasons[0].Enforcement != c.mode {
			t.Fatalf("%s: reasons %+v, want mode %q", c.name, d.Reasons, c.mode)
		}
	}
	got := waitLogged(t, srv, ids, uploadWindow)
	if ev := got[ids[0]]; lookup(ev, "result", "would_be") != ActionDeny || lookup(ev, "result", "action") != ActionAllow {
		t.Fatalf("dryrun decision logged as %v", ev["result"])
	}
	if rs, _ := lookup(got[ids[1]], "result", "reasons").([]any); len(rs) != 1 || lookup(rs[0], "enforcement") != EnforcementWarn {
		t.Fatalf("warn decision logged with reasons %v", rs)
	}
	if lookup(got[ids[1]], "input", "tenant") != "acme" {
		t.Fatalf("the log's input has no tenant: %v", got[ids[1]]["input"])
	}
	if lookup(got[ids[3]], "result", "would_be") != nil {
		t.Fatalf("an unconditional allow logged with would_be: %v", got[ids[3]]["result"])
	}
}

// TestBrowserDecisionWouldBe: the parser takes would_be only as the deny
// an allowed request would have been.
func TestBrowserDecisionWouldBe(t *testing.T) {
	for _, c := range []struct {
		name string
		doc  map[string]any
		ok   bool
	}{
		{"allow would be deny", map[string]any{"action": "allow", "reasons": []any{}, "would_be": "deny"}, true},
		{"deny would be deny", map[string]any{"action": "deny", "reasons": []any{}, "would_be": "deny"}, false},
		{"allow would be allow", map[string]any{"action": "allow", "reasons": []any{}, "would_be": "allow"}, false},
		{"not a string", map[string]any{"action": "allow", "reasons": []any{}, "would_be": true}, false},
	} {
		d, err := parseBrowserDecision(c.doc)
		if (err == nil) != c.ok || (c.ok && d.WouldBe != ActionDeny) {
			t.Errorf("%s: %+v %v", c.name, d, err)
		}
	}
}

// BenchmarkDecideBrowserModesVsNone alternates a browser decision under
// the shipped policy and under one whose config.enforcement puts a rule
// in dry run (the request is one that rule refuses, so the modes' work is
// done), and reports both p50s and their ratio.
func BenchmarkDecideBrowserModesVsNone(b *testing.B) {
	plain := newEngine(b, Options{FS: treeWith(b, map[string]string{"sandgate/browser/forms.rego": browserModesTree["sandgate/browser/forms.rego"]})})
	moded := newEngine(b, Options{FS: treeWith(b, browserModesTree)})
	in := formsInput("other")
	ctx := context.Background()
	var a, m []time.Duration
	for b.Loop() {
		t0 := time.Now()
		plain.DecideBrowser(ctx, in)
		t1 := time.Now()
		moded.DecideBrowser(ctx, in)
		a, m = append(a, t1.Sub(t0)), append(m, time.Since(t1))
	}
	b.ReportMetric(float64(p50(a))/1e3, "none-p50-µs")
	b.ReportMetric(float64(p50(m))/1e3, "modes-p50-µs")
	b.ReportMetric(float64(p50(m))/float64(p50(a)), "ratio")
}
