package mcp

import (
	"strings"
	"testing"

	"github.com/sandgate/sandgate/browser"
	"github.com/sandgate/sandgate/policy"
)

// TestBrowserWarningsInText: the browser tool's text, which is what an
// agent reads, names each warn-mode rule a request ran into.
func TestBrowserWarningsInText(t *testing.T) {
	out := browserOutput{Action: "navigate", Backend: "external", Result: map[string]any{"title": "Result"},
		Warnings: []browser.Warning{{URL: "https://forms.example:443", Navigation: true, Layer: "action",
			Reasons: []policy.Reason{{Code: "browser.forms", Message: "form submissions are off limits", Enforcement: policy.EnforcementWarn}}}}}
	got := renderBrowser(out)
	if want := "policy warning browser.forms: form submissions are off limits (https://forms.example:443, would be denied)"; !strings.Contains(got, want) {
		t.Fatalf("text %q lacks %q", got, want)
	}
	out.Warnings = nil
	if strings.Contains(renderBrowser(out), "policy warning") {
		t.Fatal("a warning without warnings")
	}
}
