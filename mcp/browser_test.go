package mcp

import (
	"bytes"
	"context"
	"image/png"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/browser"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/workspace"
)

// requireBrowser skips without Chromium, unless SANDGATE_REQUIRE_BROWSER=1
// makes its absence a failure.
func requireBrowser(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(browser.DefaultChromiumPath); err == nil {
		return
	}
	if os.Getenv("SANDGATE_REQUIRE_BROWSER") == "1" {
		t.Fatal("chromium is not installed and SANDGATE_REQUIRE_BROWSER=1")
	}
	t.Skip("chromium is not installed (set SANDGATE_REQUIRE_BROWSER=1 to fail instead)")
}

// offlineDNS fails every name: only the loopback page the test serves loads.
type offlineDNS struct{}

func (offlineDNS) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	return nil, &net.DNSError{Err: "no such host (test resolver)", Name: host, IsNotFound: true}
}

// TestBrowserScreenshot: the browser tool navigates (the policy allows
// the test's loopback page only because it is allow-listed) and a
// screenshot comes back as PNG image content showing the page, while the
// structured result says where it was saved.
func TestBrowserScreenshot(t *testing.T) {
	requireBrowser(t)
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte(`<html><head><title>green</title></head><body style="margin:0;background:#00ff00"></body></html>`))
	}))
	defer page.Close()
	u, _ := url.Parse(page.URL)
	e := newEnv(t, envOpts{browser: func(eng *policy.Engine, st audit.Store, ws *workspace.Workspaces) *browser.Manager {
		dir, err := os.MkdirTemp("", "sgmcp-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
		m, err := browser.New(browser.Config{AllowHosts: []string{u.Host}, DataDir: dir, ViewportWidth: 640, ViewportHeight: 400},
			browser.Deps{Policy: eng, Audit: st, Workspaces: ws, Resolver: offlineDNS{}})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}})
	cs := e.connect(agentTok, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	nav, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "browser", Arguments: map[string]any{"action": "navigate", "params": map[string]any{"url": page.URL}}})
	if err != nil || nav.IsError {
		t.Fatalf("navigate: %v %s", err, text(nav))
	}
	res := callTool(t, cs, "browser", map[string]any{"action": "screenshot"})
	var out browserOutput
	structured(t, res, &out)
	checkOutput(t, cs, "browser", res)
	var img *sdk.ImageContent
	for _, c := range res.Content {
		if ic, ok := c.(*sdk.ImageContent); ok {
			img = ic
		}
	}
	if img == nil || img.MIMEType != "image/png" {
		t.Fatalf("no PNG image content in %d content items", len(res.Content))
	}
	pic, err := png.Decode(bytes.NewReader(img.Data))
	if err != nil {
		t.Fatal(err)
	}
	if pic.Bounds().Dx() != 640 {
		t.Errorf("screenshot %v wide, want the 640 px viewport", pic.Bounds())
	}
	if r, g, b, _ := pic.At(320, 200).RGBA(); r>>8 > 10 || g>>8 < 245 || b>>8 > 10 {
		t.Errorf("screenshot centre is rgb(%d,%d,%d), want the page's green", r>>8, g>>8, b>>8)
	}
	shot, _ := out.Result.(map[string]any)
	if p, _ := shot["path"].(string); len(p) < len("/workspace/") || p[:len("/workspace/")] != "/workspace/" || shot["base64"] != nil {
		t.Errorf("structured result %+v: want the saved path and no base64 copy", out.Result)
	}
}
