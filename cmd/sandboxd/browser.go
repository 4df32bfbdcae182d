package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/sandgate/sandgate/executors/process"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// browser is the sandbox's one Chromium, started on demand with remote
// debugging on a loopback port and reached from outside only through
// sandboxd's /cdp/ proxy (the container has no network, and the proxy adds
// sandboxd's API key check in front of the DevTools endpoint, which has no
// authentication of its own).
type browser struct {
	cfg  config
	jobs *jobTable

	mu      sync.Mutex
	cmd     *exec.Cmd
	port    int
	dataDir string
	exited  chan struct{}
	drop    func()
	root    treeRoot
	stderr  *tailBuffer
}

// browserStartTimeout bounds a Chromium start.
const browserStartTimeout = 30 * time.Second

// flags are Chromium's: headless, no sandbox (the container drops every
// capability, so Chromium's own sandbox cannot start), a fresh profile, no
// background traffic (the sandbox has no network anyway).
func (b *browser) flags(dataDir string) []string {
	return []string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
		"--user-data-dir=" + dataDir,
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-breakpad", "--disable-crash-reporter", "--no-first-run", "--no-default-browser-check",
		"--window-size=1280,720", "about:blank",
	}
}

// ensure starts Chromium unless it runs, and returns its DevTools port.
func (b *browser) ensure(ctx context.Context) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd != nil {
		select {
		case <-b.exited:
			b.cmd = nil
		default:
			return b.port, nil
		}
	}
	dataDir, err := os.MkdirTemp("", "sandboxd-chromium-")
	if err != nil {
		return 0, err
	}
	cmd := exec.Command(b.cfg.Chromium, b.flags(dataDir)...)
	cmd.Dir = dataDir
	marker := "browser-" + newID()
	// TMPDIR too: Chromium keeps its singleton socket in a directory of
	// its own there, which a killed Chromium leaves behind (on the host,
	// one in /tmp per sandboxd test browser).
	cmd.Env = b.jobs.env(map[string]string{"HOME": dataDir, "XDG_CONFIG_HOME": dataDir, "XDG_CACHE_HOME": dataDir, "TMPDIR": dataDir}, "", marker)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	tail := &tailBuffer{max: 4096}
	cmd.Stderr = tail
	root, drop, err := b.jobs.startTree(cmd, marker)
	if err != nil {
		_ = os.RemoveAll(dataDir)
		return 0, fmt.Errorf("start %s: %w", b.cfg.Chromium, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		drop()
		_ = process.KillGroup(root.pid)
		close(exited)
	}()
	port, err := waitDevToolsPort(ctx, dataDir, exited)
	if err != nil {
		b.jobs.sweepTree(root).kill(2 * time.Second)
		<-exited
		_ = os.RemoveAll(dataDir)
		return 0, fmt.Errorf("%w (chromium said: %s)", err, strings.TrimSpace(tail.String()))
	}
	b.cmd, b.port, b.dataDir, b.exited, b.drop, b.root, b.stderr = cmd, port, dataDir, exited, drop, root, tail
	return port, nil
}

// waitDevToolsPort reads the port Chromium picked from DevToolsActivePort.
func waitDevToolsPort(ctx context.Context, dataDir string, exited <-chan struct{}) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, browserStartTimeout)
	defer cancel()
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		if b, err := os.ReadFile(filepath.Join(dataDir, "DevToolsActivePort")); err == nil {
			line, _, _ := strings.Cut(string(b), "\n")
			if port, err := strconv.Atoi(strings.TrimSpace(line)); err == nil && port > 0 {
				return port, nil
			}
		}
		select {
		case <-exited:
			return 0, errors.New("chromium exited during start-up")
		case <-ctx.Done():
			return 0, fmt.Errorf("chromium did not open its DevTools port: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

func (b *browser) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd == nil {
		return
	}
	b.jobs.sweepTree(b.root).kill(2 * time.Second)
	<-b.exited
	_ = os.RemoveAll(b.dataDir)
	b.cmd = nil
}

// devtoolsVersion is Chromium's /json/version.
type devtoolsVersion struct {
	Browser              string `json:"Browser"`
	UserAgent            string `json:"User-Agent"`
	WebSocketDebuggerURL string `json:"webSocketDebuggerUrl"`
}

func fetchVersion(ctx context.Context, port int) (devtoolsVersion, error) {
	var v devtoolsVersion
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(port)+"/json/version", nil)
	if err != nil {
		return v, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return v, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return v, fmt.Errorf("/json/version: HTTP %d", res.StatusCode)
	}
	return v, json.NewDecoder(res.Body).Decode(&v)
}

type viewport struct {
	Width  int `json:"width"`
	Height int `json:"height"`
}

type browserInfo struct {
	UserAgent    string    `json:"user_agent"`
	CDPURL       string    `json:"cdp_url"`
	VNCURL       string    `json:"vnc_url"`
	CDPUIURL     *string   `json:"cdp_ui_url"`
	Viewport     viewport  `json:"viewport"`
	PageViewport *viewport `json:"page_viewport"`
}

// handleBrowserInfo starts Chromium if needed and returns a CDP URL that
// goes through this server: ws://<the Host the caller used>/cdp/devtools/
// browser/<id>. Callers must send the API key on that WebSocket too.
func (s *server) handleBrowserInfo(w http.ResponseWriter, r *http.Request) {
	port, err := s.browser.ensure(r.Context())
	if err != nil {
		writeFail(w, http.StatusInternalServerError, "Failed to start the browser: "+err.Error(), nil)
		return
	}
	v, err := fetchVersion(r.Context(), port)
	if err != nil {
		writeFail(w, http.StatusInternalServerError, "The browser does not answer: "+err.Error(), nil)
		return
	}
	writeOK(w, browserInfo{UserAgent: v.UserAgent, CDPURL: proxiedWS(r, v.WebSocketDebuggerURL), VNCURL: "",
		Viewport: viewport{Width: 1280, Height: 720}})
}

// proxiedWS rewrites Chromium's ws://127.0.0.1:<port>/devtools/... to the
// same path under this server's /cdp/.
func proxiedWS(r *http.Request, raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	host := r.Host
	if host == "" {
		host = "localhost"
	}
	return "ws://" + host + "/cdp" + u.Path
}

// handleCDP proxies /cdp/* to Chromium's DevTools HTTP and WebSocket
// endpoints, starting Chromium on demand.
func (s *server) handleCDP(w http.ResponseWriter, r *http.Request) {
	port, err := s.browser.ensure(r.Context())
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"detail": "browser unavailable: " + err.Error()})
		return
	}
	target := &url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(port)}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.URL.Path = strings.TrimPrefix(r.URL.Path, "/cdp")
			pr.Out.URL.RawPath = ""
			if pr.Out.URL.Path == "" {
				pr.Out.URL.Path = "/"
			}
			// DevTools refuses non-loopback Host headers and WebSocket
			// Origins it was not told to allow; neither means anything
			// behind this authenticated proxy.
			pr.Out.Host = target.Host
			pr.Out.Header.Del("Origin")
			pr.Out.Header.Del("X-AIO-API-Key")
			pr.Out.Header.Del("Authorization")
		},
		ModifyResponse: func(res *http.Response) error {
			if !strings.HasPrefix(res.Request.URL.Path, "/json") {
				return nil
			}
			body, err := io.ReadAll(io.LimitReader(res.Body, 4<<20))
			_ = res.Body.Close()
			if err != nil {
				return err
			}
			host := r.Host
			if host == "" {
				host = "localhost"
			}
			body = bytes.ReplaceAll(body, []byte("ws://"+target.Host+"/"), []byte("ws://"+host+"/cdp/"))
			body = bytes.ReplaceAll(body, []byte("ws="+target.Host+"/"), []byte("ws="+host+"/cdp/"))
			res.Body = io.NopCloser(bytes.NewReader(body))
			res.ContentLength = int64(len(body))
			res.Header.Set("Content-Length", strconv.Itoa(len(body)))
			return nil
		},
	}
	rp.ServeHTTP(w, r)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append([]byte(nil), t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
