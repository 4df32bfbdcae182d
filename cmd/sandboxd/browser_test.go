package main

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// TestBrowserInfo: /v1/browser/info starts Chromium on demand and the CDP
// URL it returns works through sandboxd's authenticated proxy.
func TestBrowserInfo(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("SANDGATE_REQUIRE_BROWSER") == "1" {
			t.Fatal("SANDGATE_REQUIRE_BROWSER=1 and chromium is not installed")
		}
		t.Skip("chromium not installed")
	}
	ts := newTestServer(t, func(c *config) { c.Chromium = chromium })
	r := ts.do(http.MethodGet, "/v1/browser/info", nil)
	d := r.envelope(t, true)
	for _, k := range []string{"user_agent", "cdp_url", "vnc_url", "cdp_ui_url", "viewport", "page_viewport"} {
		if _, ok := d[k]; !ok {
			t.Errorf("BrowserInfo has no %q", k)
		}
	}
	cdp, _ := d["cdp_url"].(string)
	host := strings.TrimPrefix(ts.hs.URL, "http://")
	if !strings.HasPrefix(cdp, "ws://"+host+"/cdp/devtools/browser/") {
		t.Fatalf("cdp_url %q does not go through sandboxd at %s", cdp, host)
	}
	if !strings.Contains(d["user_agent"].(string), "Chrome") {
		t.Errorf("user_agent %v", d["user_agent"])
	}
	// Without the key the proxy refuses the WebSocket.
	if _, res, err := websocket.DefaultDialer.Dial(cdp, nil); err == nil || res == nil || res.StatusCode != http.StatusUnauthorized {
		t.Errorf("unauthenticated CDP dial: %v", err)
	}
	conn, _, err := websocket.DefaultDialer.Dial(cdp, http.Header{"X-AIO-API-Key": {testKey}})
	if err != nil {
		t.Fatalf("CDP dial: %v", err)
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	if err := conn.WriteJSON(map[string]any{"id": 1, "method": "Browser.getVersion"}); err != nil {
		t.Fatal(err)
	}
	var msg struct {
		ID     int            `json:"id"`
		Result map[string]any `json:"result"`
	}
	if err := conn.ReadJSON(&msg); err != nil {
		t.Fatal(err)
	}
	if msg.ID != 1 || !strings.Contains(msg.Result["product"].(string), "Chrome") {
		t.Errorf("Browser.getVersion: %+v", msg)
	}
	// /cdp/json/version is rewritten to point through the proxy too.
	v := ts.do(http.MethodGet, "/cdp/json/version", nil)
	var ver map[string]any
	_ = json.Unmarshal(v.raw, &ver)
	if ws, _ := ver["webSocketDebuggerUrl"].(string); !strings.HasPrefix(ws, "ws://"+host+"/cdp/") {
		t.Errorf("json/version: %s", v.raw)
	}
	// A second info call reuses the running browser.
	d2 := ts.do(http.MethodGet, "/v1/browser/info", nil).envelope(t, true)
	if d2["cdp_url"] != cdp {
		t.Errorf("second info started another browser: %v vs %v", d2["cdp_url"], cdp)
	}
}
