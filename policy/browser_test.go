package policy

import (
	"context"
	"testing"
)

func browserInput(url, scheme, host string, port int, resolved ...string) BrowserInput {
	return BrowserInput{
		Mode: "STRICT", SessionID: "s-1", Backend: "external",
		Request:  BrowserRequest{URL: url, Scheme: scheme, Host: host, Port: port, Method: "GET", ResourceType: "Document", Navigation: true},
		Resolved: resolved,
	}
}

func TestDecideBrowser(t *testing.T) {
	e := newEngine(t, Options{})
	allowTest := browserInput("http://127.0.0.1:8123/", "http", "127.0.0.1", 8123, "127.0.0.1")
	allowTest.AllowHosts = []string{"127.0.0.1:8123"}
	cases := []struct {
		name   string
		in     BrowserInput
		action string
		code   string
	}{
		{"public", browserInput("https://example.com/", "https", "example.com", 443, "93.184.216.34"), "allow", ""},
		{"gateway itself", browserInput("http://127.0.0.1:8080/v1/policy", "http", "127.0.0.1", 8080, "127.0.0.1"), "deny", "browser.blocked_address"},
		{"rebinding name", browserInput("http://rebind.test/", "http", "rebind.test", 80, "93.184.216.34", "127.0.0.1"), "deny", "browser.blocked_address"},
		{"metadata", browserInput("http://169.254.169.254/latest", "http", "169.254.169.254", 80, "169.254.169.254"), "deny", "browser.blocked_address"},
		{"file", browserInput("file:///etc/passwd", "file", "", 0), "deny", "browser.scheme"},
		{"javascript", browserInput("javascript:alert(1)", "javascript", "", 0), "deny", "browser.scheme"},
		{"allowlisted test server", allowTest, "allow", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := e.DecideBrowser(context.Background(), c.in)
			if d.Action != c.action || d.PolicyRevision != e.Revision() {
				t.Fatalf("got %+v, want %s", d, c.action)
			}
			if c.code != "" && (len(d.Reasons) == 0 || d.Reasons[0].Code != c.code) {
				t.Fatalf("reasons %v, want %s", d.Reasons, c.code)
			}
		})
	}
}

func TestDecideBrowserFailsClosed(t *testing.T) {
	// A tree without the browser package still serves exec decisions, and
	// denies every browser request.
	e := newEngine(t, Options{FS: treeWith(t, map[string]string{"sandgate/browser/browser.rego": ""})})
	d := e.DecideBrowser(context.Background(), browserInput("https://example.com/", "https", "example.com", 443, "93.184.216.34"))
	if d.Action != ActionDeny || d.Reasons[0].Code != ReasonUndefined {
		t.Fatalf("got %+v", d)
	}
	bad := newEngine(t, Options{FS: treeWith(t, map[string]string{"sandgate/browser/browser.rego": "package sandgate.browser\n\ndecision := {\"action\": \"maybe\", \"reasons\": []}\n"})})
	if d := bad.DecideBrowser(context.Background(), browserInput("https://e.com/", "https", "e.com", 443, "93.184.216.34")); d.Action != ActionDeny || d.Reasons[0].Code != ReasonInvalidDecision {
		t.Fatalf("got %+v", d)
	}
}
