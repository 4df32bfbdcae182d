package browser

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/executors/aio"
)

// aioImage is the locally built AIO sandbox image (make images).
const aioImage = "sandgate/aio:latest"

func skipOrFailDocker(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("SANDGATE_REQUIRE_DOCKER") == "1" {
		t.Fatal("SANDGATE_REQUIRE_DOCKER=1: " + why)
	}
	t.Skip(why)
}

// sandboxChromiums lists the Chromium browser processes (not their
// children) running in a container, from the host's /proc.
func sandboxChromiums(container string) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		cg, err := os.ReadFile("/proc/" + e.Name() + "/cgroup")
		if err != nil || container == "" || !bytes.Contains(cg, []byte(container)) {
			continue
		}
		cmd, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.Contains(cmd, []byte("chrom")) || bytes.Contains(cmd, []byte("--type=")) ||
			bytes.Contains(cmd, []byte("crashpad")) {
			continue
		}
		var pid int
		for _, c := range e.Name() {
			pid = pid*10 + int(c-'0')
		}
		out = append(out, pid)
	}
	return out
}

// The aio backend against the browser inside a real sandgate/aio
// container, reached through executors/aio's BrowserCDP: a session moves
// from the external Chromium to the sandbox's, keeping one browser, and
// the sandbox's browser is policed and audited like the external one.
func TestAIOSandboxBrowser(t *testing.T) {
	requireChromium(t)
	if os.Geteuid() != 0 {
		skipOrFailDocker(t, "the AIO executor needs root (bind mounts under its state directory)")
	}
	state, err := os.MkdirTemp("", "sgx")
	if err != nil {
		t.Fatal(err)
	}
	var nonce [4]byte
	_, _ = rand.Read(nonce[:])
	var h *harness
	e, err := aio.New(context.Background(), aio.PoolConfig{
		Image: aioImage, Instance: "sgbrowser-" + hex.EncodeToString(nonce[:]), StateDir: state,
		MaxInstances: 2, IdleTimeout: time.Minute, AcquireTimeout: time.Minute,
		Workspaces: func(ctx context.Context, id string) (aio.Workspace, error) {
			d, err := h.ws.Ensure(ctx, id)
			return aio.Workspace{Dir: d.Path, UID: d.UID, GID: d.GID}, err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := e.Close(ctx); err != nil {
			t.Errorf("aio Close: %v", err)
		}
		_ = syscall.Unmount(state, syscall.MNT_DETACH)
		_ = os.Remove(state)
	})
	actx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err = e.Available(actx)
	cancel()
	if err != nil {
		skipOrFailDocker(t, "the AIO backend is not available (Docker engine, image "+aioImage+"): "+err.Error())
	}

	p := newPages(t)
	h = newHarness(t, harnessOpts{allow: []string{p.hostPort()}, aio: e, tune: func(c *Config) {
		c.StartTimeout, c.ViewportWidth, c.ViewportHeight = 2*time.Minute, 800, 600
	}})
	const s = "aio-real"
	sandbox := RouteContext{NeedsFileAccess: true}

	h.must(s, ActionNavigate, map[string]any{"url": p.URL + "/"})
	if sessionProcs(s) == 0 || len(browserMains(testDataDir)) != 1 {
		t.Fatalf("before: %d external processes, browsers %v", sessionProcs(s), browserMains(testDataDir))
	}

	res := h.must(s, ActionNavigate, map[string]any{"url": "about:blank"}, sandbox)
	if res.Backend != BackendAIO || !res.Started {
		t.Fatalf("switch to aio: %+v", res)
	}
	info, ok := e.InstanceInfo(s)
	if !ok || info.Container == "" {
		t.Fatalf("no sandbox instance for the session: %+v", info)
	}
	// After: the external Chromium is gone, one Chromium runs in the
	// session's sandbox, and the router holds one browser, on aio.
	if n, mains, inBox := sessionProcs(s), browserMains(testDataDir), sandboxChromiums(info.Container); n != 0 || len(mains) != 0 || len(inBox) != 1 {
		t.Fatalf("after: %d external processes, host browsers %v, sandbox browsers %v", n, mains, inBox)
	}
	if live := h.m.Live(); len(live) != 1 || live[s] != BackendAIO {
		t.Fatalf("live = %v", live)
	}

	shot := h.must(s, ActionScreenshot, map[string]any{}, sandbox).Data.(ScreenshotResult)
	if shot.Width != 800 || shot.Height != 600 || !strings.HasPrefix(shot.Path, "/workspace/.sandgate/screenshots/") {
		t.Fatalf("sandbox screenshot %+v", shot)
	}
	// The sandbox browser's requests are decided and audited: a file:
	// navigation is refused; a network one is paused, decided (aio: no
	// address rules, the sandbox has no network) and fails in the sandbox.
	if _, err := h.do(s, ActionNavigate, map[string]any{"url": "file:///etc/passwd"}, sandbox); !errors.Is(err, ErrPolicyDenied) {
		t.Fatalf("file: in the sandbox browser: %v", err)
	}
	_, err = h.do(s, ActionNavigate, map[string]any{"url": "http://nothing.invalid/"}, sandbox)
	if code, _, _ := errcode.Of(err); code != errcode.NavigationFailed {
		t.Fatalf("a page the sandbox cannot reach: %v", err)
	}
	waitFor(t, 5*time.Second, func() bool {
		for _, r := range h.records(s, KindRequest) {
			if r.Detail["backend"] == BackendAIO && r.Detail["layer"] == layerFetch && r.Detail["host"] == "nothing.invalid" {
				return true
			}
		}
		return false
	})

	// Back to external: the sandbox browser keeps running (it is the
	// sandbox's), our tab in it is closed, and one external browser starts.
	if res := h.must(s, ActionNavigate, map[string]any{"url": p.URL + "/"}); res.Backend != BackendExternal || sessionProcs(s) == 0 {
		t.Fatalf("back to external: %+v", res)
	}
	if err := h.m.ReleaseSession(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	if n := sessionProcs(s); n != 0 {
		t.Fatalf("%d external processes after ReleaseSession", n)
	}
}
