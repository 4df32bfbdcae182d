package browser

import (
	"bytes"
	"encoding/base64"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestFormRoundTrip(t *testing.T) {
	p := newPages(t)
	h := newHarness(t, harnessOpts{allow: []string{p.hostPort()}})
	const s = "form"

	res := h.must(s, ActionNavigate, map[string]any{"url": p.URL + "/"})
	nav := res.Data.(PageResult)
	if nav.Status != 200 || nav.Title != "Form" || nav.URL != p.URL+"/" {
		t.Fatalf("navigate = %+v", nav)
	}
	if !res.Started || res.Backend != BackendExternal {
		t.Fatalf("first action: started=%v backend=%s", res.Started, res.Backend)
	}
	h.must(s, ActionType, map[string]any{"selector": "#name", "text": "Ada"})
	h.must(s, ActionClick, map[string]any{"selector": "#go", "wait_navigation": true})
	h.must(s, ActionWaitFor, map[string]any{"selector": "#result"})
	got := h.must(s, ActionContent, map[string]any{"selector": "#result"}).Data.(ContentResult)
	if got.Content != "Hello, Ada!" || got.Truncated {
		t.Fatalf("content = %+v", got)
	}
	html := h.must(s, ActionContent, map[string]any{"format": "html"}).Data.(ContentResult)
	if !strings.Contains(html.Content, `<p id="result">Hello, Ada!</p>`) {
		t.Fatalf("html = %q", html.Content)
	}
	back := h.must(s, ActionBack, nil).Data.(PageResult)
	if back.Title != "Form" {
		t.Fatalf("back = %+v", back)
	}
	if res := h.must(s, ActionClose, nil); !res.Data.(CloseResult).Closed {
		t.Fatalf("close = %+v", res.Data)
	}
	if n := sessionProcs(s); n != 0 {
		t.Fatalf("%d Chromium processes left after close", n)
	}
	// Closing wrote the allow records still batched: the typed URL, the
	// documents the Fetch layer let through (the form, its submission, the
	// page back), each naming host and scheme only.
	var typed, docs int
	for _, r := range h.records(s, KindRequest) {
		if r.Action != "allow" || r.Detail["host"] != "127.0.0.1" || r.Detail["scheme"] != "http" {
			t.Fatalf("request record %+v", r)
		}
		switch {
		case r.Detail["layer"] == layerAction:
			typed++
		case r.Detail["layer"] == layerFetch && r.Detail["resource_type"] == "Document":
			docs++
		}
	}
	if typed != 1 || docs < 3 {
		t.Fatalf("allow records: %d typed, %d documents", typed, docs)
	}
}

func TestScreenshot(t *testing.T) {
	p := newPages(t)
	h := newHarness(t, harnessOpts{allow: []string{p.hostPort()}, tune: func(c *Config) { c.ViewportWidth, c.ViewportHeight = 800, 600 }})
	const s = "shot"
	h.must(s, ActionNavigate, map[string]any{"url": p.URL + "/tall"})

	res := h.must(s, ActionScreenshot, map[string]any{"return_base64": true}).Data.(ScreenshotResult)
	if res.Width != 800 || res.Height != 600 || !strings.HasPrefix(res.Path, "/workspace/.sandgate/screenshots/") {
		t.Fatalf("screenshot = %+v", res)
	}
	raw, err := base64.StdEncoding.DecodeString(res.Base64)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != 800 || b.Dy() != 600 {
		t.Fatalf("PNG is %v", b)
	}
	dir, err := h.ws.Ensure(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	onDisk, err := os.ReadFile(filepath.Join(dir.Path, strings.TrimPrefix(res.Path, "/workspace/")))
	if err != nil || !bytes.Equal(onDisk, raw) {
		t.Fatalf("file in workspace: %v (equal=%v)", err, bytes.Equal(onDisk, raw))
	}
	if os.Geteuid() == 0 {
		for _, rel := range []string{".sandgate", ".sandgate/screenshots", strings.TrimPrefix(res.Path, "/workspace/")} {
			fi, err := os.Stat(filepath.Join(dir.Path, rel))
			if err != nil {
				t.Fatal(err)
			}
			if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != dir.UID || int(st.Gid) != dir.GID {
				t.Errorf("%s owned by %d:%d, want %d:%d", rel, st.Uid, st.Gid, dir.UID, dir.GID)
			}
		}
	}

	full := h.must(s, ActionScreenshot, map[string]any{"full_page": true, "path": "/workspace/shots/full.png"}).Data.(ScreenshotResult)
	if full.Path != "/workspace/shots/full.png" || full.Width != 800 || full.Height < 3000 || full.Base64 != "" {
		t.Fatalf("full-page screenshot = %+v", full)
	}
	if _, err := os.Stat(filepath.Join(dir.Path, "shots/full.png")); err != nil {
		t.Fatal(err)
	}
}
