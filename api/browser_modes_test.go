package api

import (
	"testing"
	"testing/fstest"

	"github.com/sandgate/sandgate/browser"
	"github.com/sandgate/sandgate/policy"
)

// TestBrowserWarnThroughTheGateway: under a policy whose new browser rule
// is in warn mode for the agent's tenant, a navigation the rule refuses
// loads, the response's warnings tell the agent which rule it ran into,
// and the audit records the would-be denial.
func TestBrowserWarnThroughTheGateway(t *testing.T) {
	pages := testPages(t)
	tree, err := policy.DefaultTree()
	if err != nil {
		t.Fatal(err)
	}
	tree["sandgate/browser/forms.rego"] = &fstest.MapFile{Data: []byte(`package sandgate.browser

deny_reasons contains reason("browser.forms", "form submissions are off limits") if contains(input.request.url, "/submit")
`)}
	tree["sandgate/config/enforcement/data.json"] = &fstest.MapFile{Data: []byte(`{"tenants": {"a": "warn"}}`)}
	e := newEnv(t, envOpts{browser: browserFor(t, hostPort(pages.URL)), policyFS: tree})

	r := browse(e, "warned", "navigate", map[string]any{"url": pages.URL + "/submit?name=Ada"})
	if nav := result(t, r); nav["title"] != "Result" {
		t.Fatalf("navigate: %s", r.raw)
	}
	ws, _ := r.body["warnings"].([]any)
	if len(ws) != 1 {
		t.Fatalf("warnings: %s", r.raw)
	}
	w := ws[0].(map[string]any)
	reason := w["reasons"].([]any)[0].(map[string]any)
	if w["url"] != "http://"+hostPort(pages.URL) || reason["code"] != "browser.forms" || reason["enforcement"] != "warn" {
		t.Fatalf("warning %v", w)
	}
	if r := browse(e, "warned", "navigate", map[string]any{"url": pages.URL + "/"}); r.body["warnings"] != nil {
		t.Fatalf("warnings on a page no rule refuses: %s", r.raw)
	}
	found := false
	for _, rec := range e.auditRecords("warned") {
		if rec.Kind == browser.KindAction && rec.WouldBe == policy.ActionDeny && rec.Action == policy.ActionAllow {
			found = true
		}
	}
	if !found {
		t.Fatal("no browser.action record with would_be deny")
	}
}
